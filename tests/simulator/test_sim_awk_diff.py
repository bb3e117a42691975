"""The simulated ``awk`` against a real one-true-awk: the same output and exit status.

Android's ``/system/bin/awk`` is one-true-awk (external/one-true-awk, "version 20190125" at
android-10.0.0_r30 to "version 20240311" at android-15.0.0_r1); Debian's ``original-awk`` is
the same program (version 20220912 in bookworm).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

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
    truth, exit in BEGIN, rules and END, string escapes) agrees with one-true-awk."""
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
    """is_number differs between one-true-awk versions (hexadecimal, inf, nan, CR): comparing
    such a field with a number is refused; as a string it is fine."""
    _, stderr, status = run_simulated(["$1 == 16"], text + "\n")
    assert (2, True) == (status, "not modelled" in stderr)
    agree(['$1 == "x"'], text + "\n")
