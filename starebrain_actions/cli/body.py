"""The message body of ``starebrain send``: where it comes from (``--body`` or
``--body-file``), how many SMS the phone makes of it, and whether it fits on the phone's
command line at all.

**The limit.** adbd runs a ``shell:`` command as ``/system/bin/sh -c COMMAND``
(packages/modules/adb ``daemon/shell_service.cpp``, ``Subprocess::ForkAndExec``), so the
whole send script, body included, is *one* argument of one ``execve``. Linux refuses an
argument longer than ``MAX_ARG_STRLEN``, 32 pages (include/uapi/linux/binfmts.h), its
terminating NUL included: 128 KiB with 4 KiB pages, the smallest page size Android uses.
The script is bigger than the body: the reads that come before the send in the same round
trip, the send path's checks, the fence, the framing, and the body quoted for the shell (a
single quote in it takes several bytes). So the check builds the script the send path would
build, with the bridge's own builders, for the largest values the parts it cannot know yet can take
(the fence names, reading through ``su 1000``), and refuses the body when
that script would not fit. The send would otherwise fail on the phone with ``E2BIG`` after
its receipt was committed, as an outcome nobody could prove.
"""

from __future__ import annotations

import sys
import unicodedata
import uuid
from typing import Final

import click

from android_bridge import _device
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.segments import SegmentCount, count_segments
from starebrain_actions.phone.send_path import check_send_path

#: The longest argument string Linux accepts, its terminating NUL included (the bridge
#: refuses a longer command as NotSent too).
MAX_ARG_STRLEN: Final = _device.MAX_ARG_STRLEN
#: ``--body-file`` reads at most this much: a file longer than the limit (a byte-order mark
#: and a final line ending aside) cannot fit whatever it holds.
_READ_LIMIT: Final = MAX_ARG_STRLEN + 8
#: The longest values the parts of a send script not known before the send can take.
_LONGEST_DISPATCH_ID: Final = str(uuid.UUID(int=2**128 - 1))
_LONGEST_EPOCH: Final = "f" * 32
#: A ledger's id, which each send script writes beside its fence claim (every id has this
#: length: ``android_bridge._fence.check_ledger_id``).
_LEDGER_ID: Final = "f" * 32
_LONGEST_SUB_ID: Final = 2**31 - 1
#: The send step's nonce, as long as the dispatchers draw it (``secrets.token_hex(8)``).
_NONCE: Final = "0" * 16


def read_body(body: str | None, body_file: str | None) -> str:
    """The body from ``--body`` or ``--body-file`` (exactly one of them).

    A file (``-``: standard input) is read as UTF-8; a leading byte-order mark and one final
    line ending (``\\n`` or ``\\r\\n``, what an editor or ``echo`` adds) are dropped, nothing
    else.

    Raises:
        CliUsageError: both or neither given, an unreadable file, text that is not UTF-8.
    """
    from starebrain_actions.cli.context import CliUsageError

    if body is not None and body_file is not None:
        raise CliUsageError("give the message with --body or with --body-file, not both")
    if body is not None:
        return body
    if body_file is None:
        raise CliUsageError("give the message with --body TEXT or --body-file PATH (- for stdin)")
    name = "standard input" if body_file == "-" else body_file
    try:
        data: bytes
        if body_file == "-":
            if sys.stdin is None:
                raise CliUsageError("--body-file -: there is no standard input to read")
            data = sys.stdin.buffer.read(_READ_LIMIT + 1)
        else:
            with open(body_file, "rb") as handle:
                data = handle.read(_READ_LIMIT + 1)
    except OSError as exc:
        raise CliUsageError(f"cannot read --body-file {name}: {exc.strerror or exc}") from exc
    if len(data) > _READ_LIMIT:
        raise CliUsageError(
            f"the body in {name} is over {_READ_LIMIT} bytes: more than a phone's shell takes"
            f" in one argument ({MAX_ARG_STRLEN} bytes); nothing was recorded or sent"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliUsageError(
            f"--body-file {name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset"
            f" {exc.start})"
        ) from exc
    text = text.removeprefix("\ufeff")
    if text.endswith("\r\n"):
        return text[:-2]
    return text.removesuffix("\n")


def longest_send_script(recipient: str, body: str, send_path: str) -> int:
    """Bytes of the longest ``sh -c`` argument a send of ``body`` to ``recipient`` can put on
    the phone's command line, through ``send_path`` ("ui", "framework" or "auto": either).

    Built with the bridge's own builders (``run_send_round_trip``'s reads and framing, the
    send path's step), with the longest watermark, fence names, ledger id and subscription
    id, read through ``su 1000``.

    Raises:
        CommandRejected: the bridge refuses the recipient or the body (a NUL, a lone
            surrogate).
    """
    from android_bridge._device import SYSTEM_PREFIX
    from android_bridge._dispatcher import MessagingApp, send_command
    from android_bridge._framework import SEND_TEXT_CODES, framework_send_command
    from android_bridge._mms import latest_mms_query
    from android_bridge._reader import latest_ids_query
    from android_bridge._shell import frame_script

    fence = (_LONGEST_DISPATCH_ID, _LONGEST_EPOCH)
    steps: list[str] = []
    if send_path in ("ui", "auto"):
        steps.append(
            send_command(recipient, body, MessagingApp(), _NONCE, fence=fence, ledger_id=_LEDGER_ID)
        )
    if send_path in ("framework", "auto"):
        steps.append(
            framework_send_command(
                max(SEND_TEXT_CODES),
                _LONGEST_SUB_ID,
                recipient,
                body,
                _NONCE,
                fence=fence,
                ledger_id=_LEDGER_ID,
            )
        )
    reads = [
        latest_ids_query(prefix=SYSTEM_PREFIX),  # the dispatcher's: the highest row
        "date +%s%3N",
        latest_mms_query(prefix=SYSTEM_PREFIX),
    ]
    return max(len(frame_script([*reads, step]).command.encode("utf-8")) for step in steps)


def check_body(recipient: str, body: str, send_path: str) -> SegmentCount:
    """Refuse a body the phone's shell cannot take, or that ``send_path`` cannot send
    (``phone.send_path.check_send_path``: more than one SMS on ``framework``); warn on stderr when
    it is more than one SMS. Returns how the phone splits it.

    Raises:
        CliUsageError: the send script would exceed ``MAX_ARG_STRLEN``, the bridge refuses
            the body, or the send path cannot send it.
    """
    from android_bridge.exceptions import CommandRejected
    from starebrain_actions.cli.context import CliUsageError

    try:
        script = longest_send_script(recipient, body, send_path)
    except CommandRejected as exc:
        raise CliUsageError(f"bad input: {exc}") from exc
    if script + 1 > MAX_ARG_STRLEN:
        body_bytes = len(body.encode("utf-8"))
        room = MAX_ARG_STRLEN - 1 - (script - body_bytes)
        raise CliUsageError(
            f"the body is too long for the phone's shell: its send command would be {script}"
            f" bytes, and one argument holds at most {MAX_ARG_STRLEN - 1} (Linux"
            f" MAX_ARG_STRLEN); this body is {body_bytes} bytes of UTF-8, and about {room}"
            " would fit (a single quote takes more once quoted); nothing was recorded or sent"
        )
    try:
        check_send_path(send_path, body)
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    count = count_segments(body)
    if count.segments > 1:
        click.echo(f"starebrain send: warning: {describe(count)}", err=True)
    return count


def describe(count: SegmentCount) -> str:
    """One sentence saying how many SMS a body is, in which encoding, and why."""
    text = (
        f"the body is {count.segments} SMS segments ({count.encoding}: {count.units}"
        f" {count.unit_name}, at most {count.per_segment} per segment)"
    )
    if count.first_non_gsm is not None:
        code = ord(count.first_non_gsm)
        name = unicodedata.name(count.first_non_gsm, "")
        text += f"; UCS-2 because of U+{code:04X}{' ' + name if name else ''}"
    return text + (
        "; the phone sends them as one multipart message, and some messaging apps send a long"
        " text as MMS instead"
    )
