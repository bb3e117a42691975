"""toybox tools the product's scripts use on a phone, as far as they use them.

Android ships toybox as ``/system/bin/grep`` and friends since Android 6; its ``grep``
(``toys/posix/grep.c`` in toybox 0.8.x, the version in Android 10 to 15) reads stdin when no
file is named, selects lines matching any ``-e`` pattern (basic regular expressions, extended
with ``-E``, fixed strings with ``-F``), and exits 0 when a line was selected, 1 when none was,
2 on an error. ``-c`` prints the count of selected lines (and still exits 1 on a count of 0),
``-v`` inverts the selection, ``-x`` matches whole lines, ``-i`` ignores case, ``-q`` prints
nothing.
"""

from __future__ import annotations

import re
from typing import Final

from android_bridge.simulator._shell import Output, TerminalReadError, read_input

_FLAGS: Final = frozenset("cvxiqEFs")


def _basic_to_python(pattern: str) -> str:
    """A POSIX basic regular expression in Python's syntax (``\\(`` groups, bare ``+`` literal)."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            following = pattern[index + 1]
            out.append(following if following in "(){}|+?" else "\\" + following)
            index += 2
            continue
        out.append("\\" + char if char in "(){}|+?" else char)
        index += 1
    return "".join(out)


async def grep(argv: list[str], stdin: str) -> Output:
    """``grep [-cvxiqEF] [-e PATTERN]... [PATTERN]`` over stdin."""
    flags: set[str] = set()
    patterns: list[str] = []
    args = iter(argv[1:])
    positional: list[str] = []
    for arg in args:
        if arg == "-e":
            value = next(args, None)
            if value is None:
                return Output.err("grep: Needs 1 argument\n", 2)
            patterns.append(value)
        elif arg.startswith("-") and len(arg) > 1 and set(arg[1:]) <= _FLAGS:
            flags.update(arg[1:])
        elif arg.startswith("-") and len(arg) > 1:
            return Output.err(f"grep: Unknown option '{arg.lstrip('-')[:1]}'\n", 2)
        else:
            positional.append(arg)
    if not patterns:
        if not positional:
            return Output.err("grep: Needs 1 argument\n", 2)
        patterns.append(positional.pop(0))
    if positional:
        # Only stdin is modelled: the product's scripts never name a file.
        return Output.err(f"grep: {positional[0]}: No such file or directory\n", 2)
    compiled = []
    for pattern in patterns:
        if "F" in flags:
            source = re.escape(pattern)
        elif "E" in flags:
            source = pattern
        else:
            source = _basic_to_python(pattern)
        try:
            compiled.append(re.compile(source, re.IGNORECASE if "i" in flags else 0))
        except re.error:
            return Output.err(f"grep: bad regex '{pattern}'\n", 2)
    errors = ""
    try:
        text = await read_input(stdin)
    except TerminalReadError:
        # ``getdelim`` fails with EIO: ``perror_msg``, and the status is the match's (grep.c
        # sets ``!TT.found`` at its end)
        text, errors = "", "grep: (standard input): I/O error\n"
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    selected = []
    for line in lines:
        if "x" in flags:
            hit = any(regex.fullmatch(line) for regex in compiled)
        else:
            hit = any(regex.search(line) for regex in compiled)
        if hit != ("v" in flags):
            selected.append(line)
    status = 0 if selected else 1
    if "q" in flags:
        out = ""
    elif "c" in flags:
        out = f"{len(selected)}\n"
    else:
        out = "".join(line + "\n" for line in selected)
    chunks = tuple((fd, text) for fd, text in ((2, errors), (1, out)) if text)
    return Output(chunks, status)
