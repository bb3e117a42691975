"""POSIX quoting and sentinel-framed shell scripts for the legacy ``shell:`` service.

``shell:`` has no exit status and mixes stderr into stdout, so several commands are joined
into one script in which each step is framed by lines carrying a random nonce, and each step
ends with its own exit status (``echo "<nonce>:<n>:end:$?"``). The nonce is drawn fresh for
every script, so no stored message body can forge a frame.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence

import attrs

from android_bridge.exceptions import CommandRejected, IncompleteRead


def posix_quote(text: str) -> str:
    """Quote ``text`` so a POSIX shell passes it to a command as one literal argument.

    ``shlex.quote`` does the quoting: ASCII letters, digits and ``@%+=:,./-_`` stay as they
    are, anything else goes in single quotes, which make every character literal except the
    single quote itself (written ``'"'"'``). What it does not check is checked here: a NUL
    cannot travel in a shell argument at all, and a lone surrogate cannot be encoded as
    UTF-8, so both are refused.

    Raises:
        CommandRejected: ``text`` contains NUL or cannot be encoded as UTF-8.
    """
    if "\x00" in text:
        raise CommandRejected("a shell argument cannot contain NUL")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CommandRejected(
            "a shell argument must be valid Unicode (no lone surrogates)"
        ) from exc
    return shlex.quote(text)


@attrs.frozen(kw_only=True)
class StepOutput:
    """What one step of a framed script printed, and the exit status the shell reported."""

    #: Everything the step printed (stdout and stderr mixed), exactly as received.
    output: str
    #: ``$?`` right after the step, as reported by the shell.
    exit_status: int


@attrs.frozen(kw_only=True)
class FramedScript:
    """A shell script whose steps are framed by nonce-carrying sentinel lines."""

    #: The command line sent to ``shell:``.
    command: str
    #: The random nonce in every frame line.
    nonce: str
    #: How many steps the script has.
    step_count: int

    def split(self, raw: str) -> tuple[StepOutput, ...]:
        """Cut the raw output into per-step outputs, proving every frame is present once.

        Raises:
            IncompleteRead: a frame is missing, repeated or out of order (truncated output).
        """
        steps: list[StepOutput] = []
        position = 0
        for index in range(self.step_count):
            begin = f"{self.nonce}:{index}:begin\n"
            if raw.count(begin) != 1:
                raise IncompleteRead(f"step {index}: start frame missing or repeated")
            begin_at = raw.index(begin)
            if begin_at != position and raw[position:begin_at].strip():
                raise IncompleteRead(f"step {index}: unexpected output before the step")
            start = begin_at + len(begin)
            end_marker = f"{self.nonce}:{index}:end:"
            if raw.count(end_marker) != 1:
                raise IncompleteRead(f"step {index}: end frame missing or repeated")
            end_at = raw.index(end_marker, start)
            newline = raw.find("\n", end_at)
            if newline < 0:
                raise IncompleteRead(f"step {index}: end frame truncated")
            status_text = raw[end_at + len(end_marker) : newline]
            if not re.fullmatch(r"\d{1,3}", status_text):
                raise IncompleteRead(f"step {index}: exit status unreadable")
            body = raw[start:end_at]
            # The frame line starts on its own line: the step's last newline belongs to the frame
            # only when the step printed nothing after it; a step whose output lacks a trailing
            # newline is glued to the frame, which we keep as-is.
            steps.append(StepOutput(output=body, exit_status=int(status_text)))
            position = newline + 1
        if raw[position:].strip():
            raise IncompleteRead("unexpected output after the last step")
        return tuple(steps)


def frame_script(
    steps: Sequence[str], *, nonce: str | None = None, one_write: bool = False
) -> FramedScript:
    """Join ``steps`` (each a shell command line) into one framed script.

    Each step is ``echo <nonce>:<n>:begin; <step>; echo "<nonce>:<n>:end:$?"``; stderr is
    folded into stdout by the ``shell:`` service anyway. The end frame starts with a newline
    written by ``echo`` of the previous line, so a step whose output lacks a trailing newline
    still ends before the frame.

    ``one_write`` (for scripts that only read): the framed steps run in a command
    substitution, their stderr folded in, and the shell prints what they printed with one
    ``echo -E``, which mksh writes with one ``write(2)`` (``funcs.c`` ``c_print``, Android 10
    to 15): the output leaves the phone in one ADB packet (adbd reads the PTY once) instead
    of one per command. The text is the same, as the last step's end frame is the only
    trailing newline the substitution strips and ``echo`` puts back; what differs is that
    mksh drops NUL bytes in a substitution, and that a script cut off prints nothing (a read
    proves nothing then either). Never for a script that sends: its hang-up semantics are
    its own.
    """
    chosen = nonce if nonce is not None else "SB" + secrets.token_hex(12)
    parts: list[str] = []
    for index, step in enumerate(steps):
        parts.append(f"echo {chosen}:{index}:begin; {step}; echo {chosen}:{index}:end:$?")
    command = "; ".join(parts)
    if one_write:
        command = f'{ONE_WRITE_VARIABLE}=$({{ {command}; }} 2>&1); echo -E "${ONE_WRITE_VARIABLE}"'
    return FramedScript(command=command, nonce=chosen, step_count=len(steps))


#: The shell variable that holds a ``one_write`` script's output until it is printed.
ONE_WRITE_VARIABLE = "sb_out"
