"""Dispatcher verdicts on scripted device output: garbled replies are never 'not sent'."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from android_bridge import (
    BridgeError,
    CommandRejected,
    DispatchEvidence,
    IncompleteRead,
    OutcomeUnknown,
    SmsDispatcher,
    UnparseableOutput,
)
from android_bridge._shell import StepOutput

WATERMARK = "Row: 0 _id=7, date=1000\n"
CLOCK = "1764420000123\n"


class ScriptedDevice:
    """Stands in for Device: one scripted answer (or error) for the dispatch round trip."""

    serial = "scripted:5555"

    def __init__(self, answer: tuple[StepOutput, ...] | BridgeError) -> None:
        self.answer = answer
        self.round_trips = 0
        self.known_max_id = 7

    async def mode(self) -> str:
        return "shell"

    async def run(self, steps: Sequence[str]) -> tuple[StepOutput, ...]:
        self.round_trips += 1
        if isinstance(self.answer, BridgeError):
            raise self.answer
        return self.answer


def _send_step(output: str, status: int) -> tuple[StepOutput, ...]:
    return (
        StepOutput(output=WATERMARK, exit_status=0),
        StepOutput(output=CLOCK, exit_status=0),
        StepOutput(output=output, exit_status=status),
    )


async def _send(answer: tuple[StepOutput, ...] | BridgeError) -> DispatchEvidence:
    device = ScriptedDevice(answer)
    dispatcher = SmsDispatcher(device)  # type: ignore[arg-type]
    return await dispatcher.send("+12025550143", "hi")


@pytest.mark.parametrize(
    "error", [IncompleteRead("frames missing"), UnparseableOutput("not UTF-8")]
)
async def test_garbled_reply_after_writing_is_unknown(error: BridgeError) -> None:
    """Truncated or undecodable output after the command was written is OutcomeUnknown."""
    with pytest.raises(OutcomeUnknown):
        await _send(error)


async def test_am_failure_without_marker_is_rejected() -> None:
    """``am`` exiting non-zero means the keys never ran: CommandRejected."""
    answer = _send_step("Exception occurred while executing 'start':\n", 255)
    with pytest.raises(CommandRejected):
        await _send(answer)


async def test_failed_key_event_after_am_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compose screen opened but a key event failed: the outcome is unknown."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    answer = _send_step("Starting: Intent { }\nSBAM00ff\nError: Unknown keycode\n", 1)
    with pytest.raises(OutcomeUnknown):
        await _send(answer)


async def test_repeated_marker_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output carrying the success marker twice is garbled: OutcomeUnknown."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    answer = _send_step("Starting: Intent { }\nSBAM00ff\nSBAM00ff\n", 0)
    with pytest.raises(OutcomeUnknown):
        await _send(answer)


async def test_clean_reply_gives_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean reply yields the watermark, its date and the clock read before the send."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    evidence = await _send(_send_step("Starting: Intent { }\nSBAM00ff\n", 0))
    expected = (7, 1000, True, 1764420000123, "Starting: Intent { }\n")
    assert expected == (
        evidence.watermark_id,
        evidence.watermark_date_ms,
        evidence.watermark_proven,
        evidence.device_clock_ms,
        evidence.am_output,
    )
