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
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from android_bridge._role import ROLE_HOLDER_READ, ROLE_REPORT
from android_bridge._shell import posix_quote
from android_bridge.simulator._shell import CommandFn, Output, Shell
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
