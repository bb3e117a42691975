"""The simulated ``awk`` against a real one-true-awk: the same output and exit status.

Android's ``/system/bin/awk`` is one-true-awk (external/one-true-awk, "version 20190125" at
android-10.0.0_r30 to "version 20240311" at android-15.0.0_r1); Debian's ``original-awk`` is
the same program (version 20220912 in bookworm). The send script's ``dumpsys role`` parser
(``android_bridge._role.ROLE_DUMP_AWK``) runs on generated dumps, one user or several, roles
with no holder, one or several, Android 15's ``fallback_enabled=`` lines, and look-alike
names; each run must agree between the two awks and give user 0's SMS holders.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from android_bridge._role import ROLE_DUMP_AWK, ROLE_SMS
from android_bridge.simulator._awk import awk

ORIGINAL_AWK = shutil.which("original-awk")

pytestmark = pytest.mark.skipif(
    ORIGINAL_AWK is None and os.environ.get("CI") != "true",
    reason="original-awk is not installed (.ci/run installs it; in CI its absence fails)",
)

Result = tuple[str, int]


def run_simulated(argv: list[str], stdin: str) -> tuple[str, str, int]:
    """stdout, stderr and status of the simulated ``awk``."""
    output = asyncio.run(awk(["awk", *argv], stdin))
    stdout = "".join(text for fd, text in output.chunks if fd == 1)
    stderr = "".join(text for fd, text in output.chunks if fd == 2)
    return stdout, stderr, output.status


def run_real(argv: list[str], stdin: str) -> Result:
    """stdout and status of one-true-awk."""
    assert ORIGINAL_AWK is not None, "original-awk is missing: install the Debian package"
    completed = subprocess.run(
        [ORIGINAL_AWK, *argv],
        input=stdin.encode(),
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        timeout=10,
        check=False,
    )
    return completed.stdout.decode(), completed.returncode


def agree(argv: list[str], stdin: str) -> Result:
    """Run both; assert the simulated one modelled the program and agrees; return it."""
    stdout, stderr, status = run_simulated(argv, stdin)
    assert "" == stderr
    assert run_real(argv, stdin) == (stdout, status)
    return stdout, status


# -- generated dumps ------------------------------------------------------------------------

_PACKAGE = st.sampled_from(
    ["com.android.messaging", "com.google.android.apps.messaging", "org.example.sms", "a.b"]
)
_ROLE_NAME = st.sampled_from(
    [
        ROLE_SMS,
        ROLE_SMS,
        "android.app.role.DIALER",
        "android.app.role.HOME",
        "android.app.role.SMS_EXTRA",
        "xandroid.app.role.SMS",
    ]
)
_ROLE = st.tuples(_ROLE_NAME, st.lists(_PACKAGE, max_size=3))
_USER = st.tuples(
    st.sampled_from([0, 0, 10, 11, 100]),
    st.lists(_ROLE, max_size=4),
)


def _field(lines: list[str], indent: str, name: str, values: list[str | list[str]]) -> None:
    """``DualDumpOutputStream``: one value as ``name=value`` (``name={`` for an object), several
    as ``name=[`` with unnamed elements."""
    if len(values) == 1:
        _value(lines, indent, name + "=", values[0])
        return
    lines.append(f"{indent}{name}=[")
    for value in values:
        _value(lines, indent + "  ", "", value)
    lines.append(f"{indent}]")


def _value(lines: list[str], indent: str, label: str, value: str | list[str]) -> None:
    if isinstance(value, str):
        lines.append(f"{indent}{label}{value}")
        return
    lines.append(f"{indent}{label}{{")
    lines.extend(f"{indent}  {line}" for line in value)
    lines.append(f"{indent}}}")


def _dump(users: list[tuple[int, list[tuple[str, list[str]]]]], fallback: bool) -> str:
    """A ``dumpsys role`` text of these users and roles."""
    states: list[str | list[str]] = []
    for user_id, roles in users:
        state = [f"user_id={user_id}", "version=5", "packages_hash=0123ABCD"]
        objects: list[str | list[str]] = []
        for name, holders in roles:
            role = [f"name={name}"] + (["fallback_enabled=false"] if fallback else [])
            if holders:
                held: list[str] = []
                _field(held, "", "holders", list(holders))
                role += held
            objects.append(role)
        if objects:
            _field(state, "", "roles", objects)
        states.append(state)
    lines = ["ROLE STATE (dumpsys role):", "{"]
    if states:
        _field(lines, "  ", "user_states", states)
    lines.append("}")
    return "".join(line + "\n" for line in lines)


def _expected(users: list[tuple[int, list[tuple[str, list[str]]]]]) -> Result:
    """What the parser must give: user 0's SMS holders (the first ``holders=`` line only when
    several, as ``holders=[``), exit 0 when user 0 has the SMS role, else an empty line, 1."""
    held: list[str] = []
    found = False
    for user_id, roles in users:
        for name, holders in roles:
            if user_id == 0 and name == ROLE_SMS:
                found = True
                if len(holders) == 1:
                    held.append(holders[0])
                elif holders:
                    held.append("[")
    return ";".join(held) + "\n", 0 if found else 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(users=st.lists(_USER, max_size=3), fallback=st.booleans())
def test_the_role_dump_parser_agrees_and_finds_user_0s_holder(
    users: list[tuple[int, list[tuple[str, list[str]]]]], fallback: bool
) -> None:
    """ROLE_DUMP_AWK gives the same output and status in both awks, and that is user 0's SMS
    holders: never another user's, never a look-alike role's; nothing and status 1 when user
    0 has no SMS role (several holders come out as ``[``, which is no package)."""
    assert _expected(users) == agree(["-F=", ROLE_DUMP_AWK], _dump(users, fallback))


@pytest.mark.parametrize(
    "stdin",
    [
        "",
        "Can't find service: role\n",
        "Permission Denial: can't dump role from from pid=1, uid=2000\n",
        "ROLE STATE (dumpsys role):\n{\n}\n",
        "user_id=0\nname=android.app.role.SMS\nholders=a.b",  # no final newline
        "  user_id=0\r\n  name=android.app.role.SMS\r\n  holders=a.b\r\n",
    ],
)
def test_the_role_dump_parser_on_other_answers(stdin: str) -> None:
    """Whatever else dumpsys prints, both awks agree; only a user 0 SMS role exits 0."""
    agree(["-F=", ROLE_DUMP_AWK], stdin)


# -- the modelled subset --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        (["{print $2, $1}"], " a  b\tc\n\nd"),
        (["$1==0"], "0\n00\n0.0\n x\n1e0\n"),
        (['$1=="0"'], "0\n00\n"),
        (['$1!="0"'], "0\n00\n"),
        (['x==0{print "u"} x==""{print "e"} END{exit 3}'], "a\n"),
        (["/a|b/"], "xa\nc\nb\n"),
        (["!/a/"], "xa\nc\n"),
        (["$1"], "0\n1\na\n\n 0 \n0.0\n"),
        (['BEGIN{x=1}END{print x "" 2, !x, !"", !"a", !0, !"0"}'], ""),
        (["-Ft", "{print $2}"], "a\tb\n"),
        (["-F", "t", "{print $2}"], "a\tb\n"),
        (["-F:", '{print $3 "|" $1}'], "a:b:c\n::\n"),
        (["$1 ~ /^[a-c]+$/"], "abc\nabd\n"),
        (["$1 !~ /^[^a]/"], "abc\nbcd\n"),
        (["$0 ~ /a.c$/"], "abc\nabcd\n"),
        (["$1 ~ /^ *x\\.y$/"], "  x.y\nxzy\n"),
        (["/(ab)+c?/"], "ababc\nx\n"),
        (["{n=n $1}\nEND{print n; exit}"], "1\n2\n"),
        (['END{exit 1}\nEND{print "second"}'], ""),
        (['{exit 2}\nEND{print "end"}'], "a\nb\n"),
        (['BEGIN{exit 4} END{print "end"}'], "a\n"),
        (["BEGIN{exit 257}"], ""),
        (['END{print "a\\tb\\"c\\\\"}'], ""),
        (["a&&\nb{print}"], "x\n"),
        (['{print};{print "again"}'], "x\n"),
    ],
)
def test_the_subset_agrees(argv: list[str], stdin: str) -> None:
    """Each construct of the modelled subset (fields, strnum comparisons, regular expressions,
    truth, exit in BEGIN, rules and END, string escapes) agrees with one-true-awk (Debian's
    original-awk; external/one-true-awk ``lib.c``, ``tran.c``, ``run.c``, ``b.c`` at
    android-10.0.0_r30 to android-15.0.0_r1)."""
    agree(argv, stdin)


def _refused(argv: list[str]) -> tuple[int, bool]:
    _, stderr, status = run_simulated(argv, "a 1\n")
    return status, stderr.startswith("awk: not modelled by the simulator: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["{print NR}"],
        ["{print length($0)}"],
        ['{sub(/a/, "b"); print}'],
        ["{x += 1}"],
        ["$1 > 0"],
        ["$1 == 0 || $2 == 1"],
        ["{if ($1) print}"],
        ["{next}"],
        ["# comment"],
        ["/a{2}/"],
        ["/[[:digit:]]/"],
        ["$NF"],
        ["{print $1.5}"],
        ['$1 ~ "dynamic"'],
        ["-v", "x=1", "{print x}"],
        ["-F", "ab", "{print $1}"],
        ["{print}", "file"],
        [],
    ],
)
def test_what_is_not_modelled_is_refused(argv: list[str]) -> None:
    """Anything beyond the subset (built-in variables and functions, other operators and
    statements, comments, intervals, classes, options, files) exits 2 with "not modelled":
    a script that needs more fails in the simulator instead of being read kindly."""
    assert (2, True) == _refused(argv)


@pytest.mark.parametrize("text", ["0x10", "inf", "+nan", "1\r"])
def test_numbers_the_versions_read_differently_are_refused(text: str) -> None:
    """is_number differs between one-true-awk versions (hexadecimal, inf, nan, CR): ``strtod``
    alone at android-10.0.0_r30 and 11.0.0_r1 (``is_number``), ``is_valid_number`` refusing
    hexadecimal and unsigned inf/nan from 12.0.0_r1 (external/one-true-awk ``lib.c``):
    comparing such a field with a number is refused; as a string it is fine."""
    _, stderr, status = run_simulated(["$1 == 16"], text + "\n")
    assert (2, True) == (status, "not modelled" in stderr)
    agree(['$1 == "x"'], text + "\n")


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        pytest.param(["{print ($1 == 1), ($1 == $2)}"], "\u0661 1\n", id="arabic-indic-digit"),
        pytest.param(["{print ($1 == $2), ($1 == 0)}"], "\uff11 1\n", id="fullwidth-digit"),
        pytest.param(["{print ($1 == $2)}"], "1e999 2e999\n-1e999 -2e999\n", id="overflow"),
        pytest.param(["{print ($1 == $2)}"], "1e308 1.0e308\n0e5 0\n", id="in-range"),
    ],
)
def test_only_what_strtod_reads_as_a_decimal_is_a_number(argv: list[str], stdin: str) -> None:
    """A field is a number only when ``strtod`` reads all of it without ``ERANGE``
    (external/one-true-awk ``lib.c``: ``is_number``, ``r == HUGE_VAL || errno == ERANGE``, at
    android-10.0.0_r30 and 11.0.0_r1; ``is_valid_number``, ``errno == ERANGE``, at
    12.0.0_r1 to 15.0.0_r1): digits other than ASCII's are no digits to it, and a decimal
    too large for a double is a string, compared as one."""
    agree(argv, stdin)


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        pytest.param(["$1 == 0"], "1e-999\n", id="underflow-to-zero"),
        pytest.param(["$1 == $2"], "1e-310 1.0e-310\n", id="subnormal-pair"),
        pytest.param(["$1"], "1e-999\n", id="truth"),
        pytest.param(["$1 == $2"], "0x10 0x010\n", id="hexadecimal-pair"),
        pytest.param(["{\u00e9=1}"], "x\n", id="non-ascii-name"),
        pytest.param(["{print $\u0661}"], "x\n", id="non-ascii-field-number"),
    ],
)
def test_what_the_c_library_decides_is_refused(argv: list[str], stdin: str) -> None:
    """Whether ``strtod`` sets ``ERANGE`` for a decimal too small for a double is the C
    library's choice (C11 7.22.1.3; glibc does; bionic's was not read), so such a field is
    neither a number nor a string to the simulator: comparing it with a number or another
    disputed field, or testing its truth, is refused; so are names and field numbers in
    other than ASCII, which one-true-awk's lexer (``lex.c``, ``isalpha``/``isdigit``) does
    not take."""
    _, stderr, status = run_simulated(argv, stdin)
    assert (2, True) == (status, "not modelled" in stderr)
