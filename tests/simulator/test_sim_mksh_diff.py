"""The simulated shell against real mksh: generated command lines give the same argv, output
and exit status in both.

Android's ``/system/bin/sh`` is mksh (``external/mksh``, built without ``MKSH_BINSHPOSIX`` or
``MKSH_BINSHREDUCED``, so ``echo`` interprets backslash escapes even when called as ``sh``).
Debian's ``/usr/bin/mksh`` is the same shell; the test runs it under the name
``/system/bin/sh`` so that its messages name the shell as a phone's do. One difference is
normalised, and only this one: Debian's build (mksh 59c-15 and later, "Overhaul error
reporting functions", debian/changelog) prefixes error messages with ``E: ``, which the R59c
release Android ships does not. ``printf`` is not an mksh builtin on either system (toybox's on
the phone, coreutils' here), so it is used only with ``'%s\\n'``, where both agree.

Each command line is built from the pieces the product sends: words quoted by
``posix_quote`` (any NUL-free text: CR, control characters, emoji, right-to-left marks,
decomposed accents), double-quoted words with ``\\``, ``$``, backquotes and ``$(...)``, bare
words with backslash escapes, ``$?`` and variables, assignments from command substitutions,
``;``, ``&&``, ``||``, newlines and pipes. A ``probe`` command prints its argv as ``<arg>``
per argument, so argv itself is compared, not only what ``echo`` makes of it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import select
import shutil
import signal
import subprocess
import termios
import time
import tty
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from android_bridge._role import ROLE_HOLDER_READ, ROLE_REPORT
from android_bridge._shell import posix_quote
from android_bridge.simulator._awk import awk
from android_bridge.simulator._files import (
    ROOT,
    Credentials,
    FileCommands,
    FilesView,
    FileTree,
    toybox_release,
)
from android_bridge.simulator._shell import CommandFn, Output, ScriptKilled, Session, Shell
from android_bridge.simulator._toybox import grep as toybox_grep

MKSH = shutil.which("mksh")

pytestmark = pytest.mark.skipif(
    MKSH is None and os.environ.get("CI") != "true",
    reason="mksh is not installed (.ci/run installs it; in CI its absence fails)",
)

#: The same probe as a shell function for mksh (``print -r`` writes its argument raw).
_MKSH_PROBE = 'probe() { for a in "$@"; do print -nr -- "<$a>"; done; print; }\n'
#: Debian's build prefixes errors with "E: " (see the module docstring).
_DEBIAN_ERROR_PREFIX = b"E: /system/bin/sh: "

Result = tuple[bytes, bytes, int]


async def _probe(argv: list[str], stdin: str) -> Output:
    return Output.out("".join(f"<{arg}>" for arg in argv[1:]) + "\n")


def run_simulated(script: str) -> Result:
    """Run ``script`` in the simulated shell with only the builtins and ``probe``."""
    chunks, status = asyncio.run(Shell({"probe": _probe}).run_chunks(script))
    stdout = "".join(text for fd, text in chunks if fd == 1)
    stderr = "".join(text for fd, text in chunks if fd == 2)
    return (
        stdout.encode("utf-8", "surrogateescape"),
        stderr.encode("utf-8", "surrogateescape"),
        status,
    )


def run_mksh(script: str, cwd: Path) -> Result:
    """Run ``script`` in real mksh named ``/system/bin/sh``, in an empty directory."""
    assert MKSH is not None, "mksh is missing: install the Debian package mksh"
    completed = subprocess.run(
        ["/system/bin/sh", "-c", _MKSH_PROBE + script],
        executable=MKSH,
        capture_output=True,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(cwd)},
        timeout=10,
        check=False,
    )
    stdout, stderr = (
        stream.replace(_DEBIAN_ERROR_PREFIX, b"/system/bin/sh: ")
        for stream in (completed.stdout, completed.stderr)
    )
    return stdout, stderr, completed.returncode


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty working directory: an unquoted glob matches nothing and stays literal."""
    return tmp_path_factory.mktemp("mksh-cwd")


# -- generated command lines --------------------------------------------------------------

#: Characters a body may hold that matter to a shell or to a terminal.
_SPECIAL = (
    "\r",
    "\n",
    "\t",
    "\x0b",
    "\x0c",
    "\x1b",
    "\x7f",
    "\x01",
    "\x1f",
    "\x85",
    "\xa0",
    "\u2028",
    "\u200f",
    "\u202e",
    "\u0301",
    "e\u0301",
    "\U0001f600",
    "\U0001f1fa\U0001f1f8",
    "'",
    '"',
    "\\",
    "$",
    "`",
    "$(",
    "${",
    ")",
    ";",
    "&",
    "|",
    "<",
    ">",
    "#",
    "~",
    "*",
    "?",
    "[",
    " ",
    "-n",
    "\\c",
    "\\n",
    "\\0101",
    "\\x41",
)
_BODY = st.lists(
    st.one_of(
        st.characters(exclude_categories=("Cs",), exclude_characters="\0"),
        st.sampled_from(_SPECIAL),
    ),
    max_size=10,
).map("".join)
#: Characters safe in a bare word (no globbing, tilde, comment or quoting).
_BARE = st.text(alphabet="abcXYZ019_@%+=:,./-", min_size=1, max_size=6)
#: Simple commands whose output a substitution captures.
_INNER = st.sampled_from(
    [
        "probe a",
        "probe 'a  b' c",
        "echo x",
        "echo '  spaced  out  '",
        "echo 'tab\there'",
        "echo 'cr\rhere'",
        "echo 'vt\x0bff\x0chere'",
        "echo 'nbsp\xa0here'",
        "echo 'two\n\nlines\n\n'",
        "printf '%s\\n' 'p q'",
        "false",
        "true",
        "nosuch",
        "echo err 1>&2",
    ]
)


def _dquote_text(text: str) -> str:
    """``text`` inside double quotes, escaping what double quotes would expand."""
    return re.sub(r'([\\$`"])', r"\\\1", text)


@st.composite
def _dquoted(draw: st.DrawFn) -> str:
    parts = draw(
        st.lists(
            st.one_of(
                _BODY.map(_dquote_text),
                st.sampled_from(["$?", "$o", "${o}", "$s", "\\$", "\\\\", "\\`", '\\"', "\\x"]),
                _INNER.map(lambda inner: f"$({inner})"),
                st.sampled_from(["`probe b`", "`echo y`", "`false`"]),
            ),
            max_size=4,
        )
    )
    return '"' + "".join(parts) + '"'


@st.composite
def _bare(draw: st.DrawFn) -> str:
    parts = draw(
        st.lists(
            st.one_of(
                _BARE,
                st.sampled_from(["\\ ", "\\'", '\\"', "\\$", "\\\\", "\\;", "\\\n", "\\a", "\\#"]),
            ),
            min_size=1,
            max_size=4,
        )
    )
    return "".join(parts)


_WORD = st.one_of(
    _BODY.map(posix_quote),
    _dquoted(),
    _bare(),
    st.sampled_from(["$?", "$o", "$s", '""', "''"]),
    _INNER.map(lambda inner: f"$({inner})"),
    _INNER.map(lambda inner: f"`{inner}`"),
)


@st.composite
def _command(draw: st.DrawFn) -> str:
    kind = draw(
        st.sampled_from(["probe", "probe", "probe", "echo", "printf", "assign", "status", "sub"])
    )
    words = draw(st.lists(_WORD, max_size=4))
    if kind == "probe":
        return " ".join(["probe", *words])
    if kind == "echo":
        return " ".join(["echo", *words])
    if kind == "printf":
        return " ".join(["printf", "'%s\\n'", *words]) if words else "printf '%s\\n' ''"
    if kind == "assign":
        name = draw(st.sampled_from(["o", "s"]))
        return f"{name}={draw(_WORD)}"
    if kind == "sub":
        inner = draw(st.sampled_from(["probe", "echo"]))
        return f"o=$({' '.join([inner, *words])} 2>&1); s=$?"
    return draw(st.sampled_from(["true", "false", "s=$?", 'probe "$s" "$o"', "exit 3", "nosuch"]))


@st.composite
def _script(draw: st.DrawFn) -> str:
    commands = draw(st.lists(_command(), min_size=1, max_size=4))
    script = commands[0]
    for command in commands[1:]:
        separator = draw(st.sampled_from(["; ", " && ", " || ", "\n", " | "]))
        script += separator + command
    if draw(st.booleans()):
        script += '; probe "$?"'
    return script


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(script=_script())
def test_generated_command_lines_agree_with_mksh(script: str, empty_dir: Path) -> None:
    """argv, stdout, stderr and exit status agree with mksh for lines built as the product
    builds them (mksh ``external/mksh``, Android 10 to 15)."""
    expected, actual = run_mksh(script, empty_dir), run_simulated(script)
    if "|" in script:
        # The elements of a pipeline run at once in mksh: their stderr lines interleave in
        # any order (the simulator runs them one after the other).
        expected, actual = (
            (out, b"".join(sorted(err.splitlines(keepends=True))), status)
            for out, err, status in (expected, actual)
        )
    assert expected == actual


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("echo 'a\\cb'; echo c", id="backslash-c-drops-only-the-newline"),
        pytest.param("echo '\\x41\\x4g\\u00e9\\0101\\08\\101'", id="hex-unicode-octal"),
        pytest.param("echo '\\q\\\"\\'; echo '\\e\\E'", id="unknown-escapes-stay"),
        pytest.param("echo -n a; echo -e 'b\\tc'; echo -E 'd\\te'; echo -nq z", id="flags"),
        pytest.param("echo -- -n; echo -; echo -e", id="dashes"),
        pytest.param("o=$(printf 'a\\rb\\x0bc d\\te\\nf\\xc2\\xa0g'); probe $o", id="ifs"),
        pytest.param('o=$(false); probe $?; o=$(nosuch 2>&1); probe $? "$o"', id="sub-status"),
        pytest.param("probe \"$(echo '  a  ')\" $(echo '  a  b ') x$(echo)y", id="split"),
        pytest.param("probe a\\\nb 'c\nd' \"e\\\nf\"", id="continuation"),
        pytest.param("false || probe $?; true && probe $?; false && probe no", id="and-or"),
        pytest.param("probe `echo \\`echo nested\\``", id="nested-backquotes"),
        pytest.param("exit 3; probe never", id="exit"),
        pytest.param("probe 'a'\"b\"c\\ d $(probe e) `probe f`", id="concatenation"),
    ],
)
def test_pinned_lines_agree_with_mksh(script: str, empty_dir: Path) -> None:
    """Corner cases of echo, splitting and substitution agree with mksh (``external/mksh``
    ``funcs.c`` ``c_print``, ``misc.c`` ``unbksl``; Android 10 to 15)."""
    assert run_mksh(script, empty_dir) == run_simulated(script)


# -- the send script's role read ------------------------------------------------------------


def _stub(name: str, out: str, err: str, status: int) -> tuple[str, CommandFn]:
    """A command that prints ``out`` and ``err`` and exits ``status``: an mksh function and
    the simulator's equivalent (``awk``, at the end of a pipe, reads its input first)."""
    lines = ["cat >/dev/null"] if name == "awk" else []
    lines += [f"print -r -- {posix_quote(text)}" for text in (out,) if text]
    lines += [f"print -ru2 -- {posix_quote(text)}" for text in (err,) if text]
    function = f"{name}() {{ {'; '.join([*lines, f'return {status}'])}; }}\n"

    async def command(argv: list[str], stdin: str) -> Output:
        chunks = ((1, out + "\n"),) if out else ()
        chunks += ((2, err + "\n"),) if err else ()
        return Output(chunks, status)

    return function, command


@pytest.mark.parametrize(
    ("cmd", "awk"),
    [
        pytest.param(("com.android.messaging", "", 0), ("x", "", 0), id="cmd-role-answers"),
        pytest.param(("", "", 0), ("x", "", 0), id="cmd-role-no-holder"),
        pytest.param(
            ("Unknown command: get-role-holders", "", 255),
            ("com.android.messaging", "", 0),
            id="dump-parsed",
        ),
        pytest.param(
            ("Unknown command: get-role-holders", "", 255), ("", "", 0), id="dump-no-holder"
        ),
        pytest.param(("", "Exception occurred", 255), ("", "", 1), id="neither"),
        pytest.param(("", "", 255), ("", "awk: not found", 127), id="no-awk"),
    ],
)
def test_the_role_read_agrees_with_mksh(
    cmd: tuple[str, str, int], awk: tuple[str, str, int], empty_dir: Path
) -> None:
    """The send script's role read (``ROLE_HOLDER_READ``, then ``ROLE_REPORT``) leaves the same
    ``$t``, ``$d`` and ``$r`` in mksh as in the simulated shell, whatever ``cmd role`` and the
    dump parser print and exit with (``cmd``, ``dumpsys`` and ``awk`` stubbed alike in both)."""
    stubs = [_stub("cmd", *cmd), _stub("dumpsys", "dump", "", 0), _stub("awk", *awk)]
    script = f'{ROLE_HOLDER_READ}; {ROLE_REPORT}; probe "$t" "$d" "$r"'
    functions = "".join(function for function, _ in stubs)
    commands: dict[str, CommandFn] = {"probe": _probe, "grep": toybox_grep}
    names = ("cmd", "dumpsys", "awk")
    commands.update({name: command for name, (_, command) in zip(names, stubs, strict=True)})
    chunks, status = asyncio.run(Shell(commands).run_chunks(script))
    actual = (
        "".join(text for fd, text in chunks if fd == 1).encode(),
        "".join(text for fd, text in chunks if fd == 2).encode(),
        status,
    )
    assert run_mksh(functions + script, empty_dir) == actual


# -- groups, redirections to files, cat and trap -------------------------------------------

#: Where the simulated shell runs these scripts: a directory of its own tree, as the shell user.
_WORK = "/data/local/tmp/w"
_SHELL_USER = Credentials(uid=2000, gid=2000)

Files = dict[str, bytes | None]


def _normalise_debian(stderr: bytes) -> bytes:
    """Debian's build against R57 to R59c, as Android ships it (see the module docstring):
    ``E: ``/``W: `` prefixes, ``NAME: create: ERROR`` for ``can't create NAME: ERROR`` (and
    ``open``: mksh ``exec.c`` ``iosetup``, ``Tf_cant_ss_s``) and ``bad signal: X`` for
    ``bad signal 'X'`` (``funcs.c`` ``c_trap``, ``Tbad_sig_ss``)."""
    stderr = re.sub(rb"(?m)^[EW]: /system/bin/sh: ", b"/system/bin/sh: ", stderr)
    stderr = re.sub(
        rb"(?m)^/system/bin/sh: (.*): (create|open): ", rb"/system/bin/sh: can't \2 \1: ", stderr
    )
    return re.sub(rb"(?m)^(/system/bin/sh: trap: bad signal): (.*)$", rb"\1 '\2'", stderr)


def run_simulated_files(script: str, store: Path) -> tuple[Result, Files]:
    """Run ``script`` in the simulated shell in a fresh directory of a fresh tree, with the
    toybox tools (``cat``, ``rm``…) and ``probe``; return its result and the files left."""
    tree = FileTree(store, clock_ns=time.time_ns)
    try:
        tree.boot()
        tree.mkdir(ROOT, "/", _WORK, 0o777)
        tools = FileCommands(
            tree,
            cred=_SHELL_USER,
            toybox=toybox_release(15),
            zone=lambda: ZoneInfo("UTC"),
            cwd=_WORK,
        )
        shell = Shell({**tools.commands(), "probe": _probe}, files=tools)
        chunks, status = asyncio.run(shell.run_chunks(script))
        files = _tree_files(tree)
    finally:
        tree.close()
    stdout = "".join(text for fd, text in chunks if fd == 1)
    stderr = "".join(text for fd, text in chunks if fd == 2)
    return (
        stdout.encode("utf-8", "surrogateescape"),
        stderr.encode("utf-8", "surrogateescape"),
        status,
    ), files


def run_mksh_files(script: str, directory: Path) -> tuple[Result, Files]:
    """Run ``script`` in real mksh in ``directory``; return its result and the files left."""
    stdout, stderr, status = run_mksh(script, directory)
    files: Files = {}
    for path in sorted(directory.rglob("*")):
        relative = str(path.relative_to(directory))
        files[relative] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return (stdout, _normalise_debian(stderr), status), files


_FILE = st.sampled_from(["f", "g"])
_TEXT = st.sampled_from(["a", "b c", "'q'", "é", ""])


@st.composite
def _file_command(draw: st.DrawFn) -> str:
    name = draw(_FILE)
    text = posix_quote(draw(_TEXT))
    redirect = draw(st.sampled_from([">", ">>"]))
    kind = draw(
        st.sampled_from(
            [
                "write",
                "group",
                "group-err",
                "nested",
                "cat",
                "cat-in",
                "cat-two",
                "rm",
                "sub",
                "pipe",
                "dir",
                "missing",
                "status",
                "trap",
                "trap-list",
            ]
        )
    )
    if kind == "write":
        return f"echo {text} {redirect}{name}"
    if kind == "group":
        return f"{{ echo {text}; probe {text}; }} {redirect}{name}"
    if kind == "group-err":
        return f"{{ echo {text}; echo err >&2; false; }} </dev/null {redirect}{name} 2>&1"
    if kind == "nested":
        return f"{{ {{ echo in; }} >>{name}; echo out; }} {redirect}{name}"
    if kind == "cat":
        return f"cat {name}"
    if kind == "cat-in":
        return f"cat <{name}"
    if kind == "cat-two":
        return "cat f g"
    if kind == "rm":
        return f"rm -f {name}"
    if kind == "sub":
        return f'o=$(cat {name} 2>&1); probe "$o" $?'
    if kind == "pipe":
        return f"{{ echo {text}; cat {name}; }} 2>&1 | cat"
    if kind == "dir":
        return f"echo x {redirect}d"
    if kind == "missing":
        return f"echo x {redirect}nosuch/{name}"
    if kind == "status":
        return 'probe "$?"'
    if kind == "trap":
        action = draw(st.sampled_from(["", "-", "echo x", "a'b"]))
        condition = draw(st.sampled_from(["HUP", "1", "hup", "SIGHUP", "INT 15", "EXIT", "FOO"]))
        if action not in ("", "-") and condition == "EXIT":
            condition = "TERM"  # an EXIT trap with commands would run: not modelled
        return f"trap {action if action == '-' else posix_quote(action)} {condition}"
    return "trap"


@st.composite
def _file_script(draw: st.DrawFn) -> str:
    commands = draw(st.lists(_file_command(), min_size=1, max_size=5))
    script = "mkdir d; " + commands[0]
    for command in commands[1:]:
        script += draw(st.sampled_from(["; ", " && ", " || ", "\n"])) + command
    return script + '; probe "$?"'


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=_file_script())
def test_groups_redirections_cat_and_trap_agree_with_mksh(
    script: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``{ …; }`` groups, ``>FILE``/``>>FILE``/``<FILE``/``2>&1``/``</dev/null``, ``cat``,
    ``rm -f`` and ``trap`` agree with mksh on a real directory: output, status and the files
    left with their contents (mksh ``syn.c``, ``exec.c`` ``iosetup``, ``funcs.c``
    ``c_trap``, R57 to R59c; toybox ``cat.c``)."""
    base = tmp_path_factory.mktemp("redirect-diff")
    host = base / "host"
    host.mkdir()
    assert run_mksh_files(script, host) == run_simulated_files(script, base / "sim.db")


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("{ echo a; echo b >&2; } >f 2>&1; cat f", id="group-to-a-file"),
        pytest.param("{ echo a; } 2>/dev/null >/nonexistent/x; echo s=$?", id="error-to-null"),
        pytest.param("echo a >/nonexistent/x 2>/dev/null; echo s=$?", id="error-shown"),
        pytest.param("{ x=1; }; echo $x; x=0; { x=2; } | cat; echo $x", id="group-scope"),
        pytest.param("{ echo a; exit 3; }; echo no", id="exit-in-a-group"),
        pytest.param("{ }; echo s=$?; echo { a }", id="empty-group-and-words"),
        pytest.param("echo x >f; echo y >>f; cat f; cat <f; cat f - <f", id="append-and-read"),
        pytest.param("echo a >f >g; cat f g", id="last-redirection-wins"),
        pytest.param("echo abc >f; { echo X; } 1<>f; cat f", id="read-write-overwrites"),
        pytest.param("mkdir d; cat d; echo s=$?; echo x >d; echo s=$?", id="directories"),
        pytest.param("trap '' HUP; trap; trap - HUP; trap; echo s=$?", id="trap-set-reset"),
        pytest.param("trap '' 1 2 15; trap 0 INT; trap", id="trap-numbers-reset"),
        pytest.param("trap '' SIGhup sig40 ERR EXIT; trap", id="trap-names"),
        pytest.param("trap '' FOO HUP 65; echo s=$?; trap", id="trap-bad-signal"),
        pytest.param("trap \"a'b\" HUP; trap \"'\" INT; trap 'a b' TERM; trap", id="trap-quoting"),
        pytest.param("trap x; trap -- - HUP; echo s=$?; trap", id="trap-one-operand"),
        pytest.param(
            "trap '' HUP; trap 'echo x' INT; o=$(trap); echo \"[$o]\"", id="trap-subshell"
        ),
        pytest.param("trap -p; echo never", id="trap-option-ends-the-script"),
        pytest.param("echo a >f; { cat; cat; echo s=$?; } <f", id="group-stdin-shared"),
        pytest.param('echo a >f; { o=$(cat); cat -; echo "[$o]"; } <f', id="comsub-shares"),
        pytest.param("echo a | { cat - -; cat; }; echo b | cat - -", id="pipe-shared"),
        pytest.param("echo a >f; cat <f; cat <f", id="each-redirection-anew"),
    ],
)
def test_pinned_groups_redirections_and_traps_agree_with_mksh(
    script: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Corner cases of groups, redirections (a group's stdin opened once and shared by its
    commands), ``cat`` and ``trap`` agree with mksh (``syn.c``, ``exec.c`` ``iosetup``,
    ``funcs.c`` ``c_trap``: R57 at android-10.0.0_r30 and 11, R59 to R59c at 12 to 15;
    toybox ``cat.c`` reads to EOF as coreutils does)."""
    base = tmp_path_factory.mktemp("redirect-pinned")
    host = base / "host"
    host.mkdir()
    assert run_mksh_files(script, host) == run_simulated_files(script, base / "sim.db")


# -- the hang-up: a real PTY closed under real mksh ----------------------------------------

#: The point of the hang-up: the script printed this, the terminal's master is then closed.
_READY = "ready"


def _tree_files(tree: FileTree) -> Files:
    return {
        entry.path.removeprefix(_WORK + "/"): (
            FilesView(tree).read_bytes(entry.path) if entry.kind == "file" else None
        )
        for entry in tree.entries()
        if entry.path.startswith(_WORK + "/")
    }


def run_mksh_hung_up(
    script: str, directory: Path, hang_up_after_s: float = 0.0
) -> tuple[int, Files]:
    """Run ``script`` in real mksh as adbd runs a legacy ``shell:`` command: ``sh -c`` as
    the leader of a new session whose controlling terminal is a PTY in raw mode
    (``Subprocess::ForkAndExec``, android-11 to 15; ``forkpty`` on 10). Once it printed
    ``ready``, close the PTY's master, as adbd does when the stream goes (the kernel hangs
    the terminal up), ``hang_up_after_s`` later. Return the shell's exit status (129 when
    SIGHUP ended it) and the files it left."""
    assert MKSH is not None, "mksh is missing: install the Debian package mksh"
    master, slave = os.openpty()
    tty.setraw(slave)

    def become_session_leader() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        ["/system/bin/sh", "-c", script],
        executable=MKSH,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=directory,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(directory)},
        start_new_session=True,
        preexec_fn=become_session_leader,
    )
    os.close(slave)
    seen = b""
    try:
        while (_READY + "\n").encode() not in seen:
            ready, _, _ = select.select([master], [], [], 10)
            assert ready, f"the script never printed {_READY}: {seen!r}"
            chunk = os.read(master, 4096)
            assert chunk, f"the script ended before {_READY}: {seen!r}"
            seen += chunk
        time.sleep(hang_up_after_s)
    finally:
        os.close(master)
    status = process.wait(timeout=20)
    files: Files = {}
    for path in sorted(directory.rglob("*")):
        relative = str(path.relative_to(directory))
        files[relative] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return (128 - status if status < 0 else status), files


def run_simulated_hung_up(
    script: str, store: Path, hang_up_after_s: float = 0.0
) -> tuple[int, Files]:
    """Run ``script`` in the simulated shell as the phone runs a legacy ``shell:`` command
    (the leader of its :class:`Session`); hang the session up ``hang_up_after_s`` after it
    printed ``ready``.
    Return its exit status (129 when the hang-up ended it) and the files it left."""
    tree = FileTree(store, clock_ns=time.time_ns)
    try:
        tree.boot()
        tree.mkdir(ROOT, "/", _WORK, 0o777)
        tools = FileCommands(
            tree,
            cred=_SHELL_USER,
            toybox=toybox_release(15),
            zone=lambda: ZoneInfo("UTC"),
            cwd=_WORK,
        )
        session = Session()
        seen: list[str] = []

        async def terminal(fd: int, text: str) -> None:
            seen.append(text)
            if _READY + "\n" in "".join(seen) and not session.hung_up:
                if hang_up_after_s:
                    asyncio.get_running_loop().call_later(hang_up_after_s, session.hang_up)
                else:
                    session.hang_up()

        shell = Shell(
            {**tools.commands(), "awk": awk, "grep": toybox_grep},
            on_output=terminal,
            session=session,
            files=tools,
            leader=True,
        )
        try:
            _, status = asyncio.run(shell.run_chunks(script))
        except ScriptKilled:
            status = 129
        return status, _tree_files(tree)
    finally:
        tree.close()


#: What the script does before the hang-up (its traps).
_BEFORE = (
    "",
    "trap '' HUP",
    "trap '' 1",
    "trap '' SIGHUP",
    "trap -- '' hup INT",
    "trap '' HUP; trap - HUP",
    "trap '' INT",
    "trap '' HUP; trap 1",
)
#: What it does after: each step notes its status in ``log`` (a file, which still works).
_AFTER = (
    'echo a; echo "echo=$?" >>log',
    "printf 'b\\n'; echo \"printf=$?\" >>log",
    'echo e >&2; echo "stderr=$?" >>log',
    'cat log; echo "cat=$?" >>log',
    'cat >>log; echo "stdin=$?" >>log',
    'o=$(echo x; echo y >&2); echo "sub=$o:$?" >>log',
    '{ echo g; echo h >&2; } >>log 2>&1; echo "group=$?" >>log',
    "trap - HUP",
    "trap '' HUP",
    "false",
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.sampled_from(_BEFORE),
    after=st.lists(st.sampled_from(_AFTER), min_size=1, max_size=5),
)
@pytest.mark.long(18)
def test_a_hang_up_does_what_it_does_to_real_mksh(
    before: str, after: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Close the terminal under a script, as adbd does when the connection goes: without
    ``trap '' HUP`` the script ends there (exit 129, nothing after it runs); with it, it runs
    on to its end, every write to the terminal failing (status 1, nothing printed), files
    and command substitutions working. The simulated session does the same as real mksh on
    a real PTY (Linux ``__tty_hangup``; mksh ``histrap.c``/``jobs.c`` R57 to R59c)."""
    script = "; ".join(
        part
        for part in (before, f"echo {_READY}; sleep 0.3", *after, 'echo "end=$?" >>log')
        if part
    )
    base = tmp_path_factory.mktemp("hangup-diff")
    host = base / "host"
    host.mkdir()
    assert run_mksh_hung_up(script, host) == run_simulated_hung_up(script, base / "sim.db")


@pytest.mark.parametrize(
    "before",
    [
        pytest.param("trap '' HUP | cat", id="trap-in-a-pipeline"),
        pytest.param("true | trap '' HUP", id="trap-last-in-a-pipeline"),
        pytest.param("x=$(trap '' HUP)", id="trap-in-a-substitution"),
        pytest.param("{ trap '' HUP; }", id="trap-in-a-group"),
        pytest.param("trap '' HUP; trap - HUP | cat", id="reset-in-a-pipeline"),
    ],
)
def test_only_the_leaders_own_trap_spares_it_a_hang_up(
    before: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Only the trap of the script's own ``sh`` (the session leader) decides whether the
    hang-up's SIGHUP ends it: every element of a pipeline and a command substitution is a
    forked subshell (mksh ``exec.c`` ``execute`` ``TPIPE``/``exchild``, ``eval.c``
    ``comsub``), whose ``trap '' HUP`` leaves the leader's SIGHUP as it was; a ``{ …; }``
    group runs in the leader itself (mksh R57 at android-10.0.0_r30 and 11, R59 to R59c at
    12 to 15; Linux ``tty_signal_session_leader``). Real mksh on a real PTY and the
    simulated session agree."""
    script = f'{before}; echo {_READY}; sleep 0.3; echo "after=$?" >>log'
    base = tmp_path_factory.mktemp("hangup-subshell")
    host = base / "host"
    host.mkdir()
    assert run_mksh_hung_up(script, host) == run_simulated_hung_up(script, base / "sim.db")


@pytest.mark.parametrize(
    ("script", "hang_up_after_s"),
    [
        pytest.param(
            "trap '' HUP; echo ready; sleep 0.3; cat; echo \"cat=$?\" >>log", 0, id="cat-after"
        ),
        pytest.param(
            "trap '' HUP; echo ready; sleep 0.3; grep -q x; echo \"grep=$?\" >>log",
            0,
            id="grep-after",
        ),
        pytest.param(
            "trap '' HUP; echo ready; sleep 0.3; awk 'END{exit 3}'; echo \"awk=$?\" >>log",
            0,
            id="awk-after",
        ),
        pytest.param("trap '' HUP; echo ready; cat; echo \"cat=$?\" >>log", 0.3, id="cat-waiting"),
        pytest.param(
            "trap '' HUP; echo ready; cat - -; echo \"cat=$?\" >>log", 0.3, id="cat-twice-waiting"
        ),
        pytest.param(
            "trap '' HUP; echo ready; o=$(cat); echo \"o=$o:$?\" >>log", 0.3, id="comsub-waiting"
        ),
        pytest.param("echo ready; cat; echo after >>log", 0.3, id="no-trap-waiting"),
        pytest.param(
            "trap '' HUP; echo ready; echo x | cat >>log; cat </dev/null; echo \"n=$?\" >>log",
            0.3,
            id="fed",
        ),
    ],
)
def test_a_read_of_the_terminal_waits_for_the_hang_up(
    script: str, hang_up_after_s: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A command reading the script's terminal (no pipe, no redirection) waits: nobody types
    into adbd's PTY (it is the command's stdin: ``shell_service.cpp``, system/core ``adb/``
    android-10.0.0_r30, packages/modules/adb 11.0.0_r1 to 15.0.0_r1), so ``read(2)`` on the
    slave blocks until the master is closed. A read begun after that sees EOF
    (``hung_up_tty_read``); one waiting then fails with EIO (``pty_close`` sets
    ``TTY_OTHER_CLOSED`` and wakes it, ``n_tty_read`` returns ``-EIO``; Android common
    kernel), which toybox ``cat`` reports and exits 1 for (``do_cat``: ``perror_msg_raw``,
    0.8.0 to 0.8.11). A script that does not ignore SIGHUP ends there (129). Real mksh (with
    coreutils ``cat``, GNU ``grep`` and the host's ``awk``, which do the same at EOF and for
    ``cat``'s EIO) and the simulated session agree."""
    base = tmp_path_factory.mktemp("hangup-stdin")
    host = base / "host"
    host.mkdir()
    assert run_mksh_hung_up(script, host, hang_up_after_s) == run_simulated_hung_up(
        script, base / "sim.db", hang_up_after_s
    )
