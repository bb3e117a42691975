"""Dispatcher verdicts on scripted device output: garbled replies are never 'not sent'."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from android_bridge import (
    BridgeError,
    CommandRejected,
    DispatchEvidence,
    IncompleteRead,
    MessagingApp,
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
    content_prefix = ""

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
        StepOutput(output="Row: 0 _id=3\n", exit_status=0),
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


CLEAN_AM = "Starting: Intent { }\nStatus: ok\nActivity: com.example/.Compose\nComplete\n"
#: What the checks print before am when all pass (role holder read, role, awake, unlocked).
CHECKS = "SBROLE00ff:0:0:com.example\nSBOK00ff:role\nSBOK00ff:awake\nSBOK00ff:unlocked\n"
#: What the focus check prints after am when it passes.
FOCUS = "SBOK00ff:focus\n"


async def test_am_failure_without_go_marker_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chain stopped before the keys (no go marker after am's exit line): CommandRejected."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    answer = _send_step("Exception occurred while executing 'start':\nSBAMX00ff:255\n", 1)
    with pytest.raises(CommandRejected):
        await _send(answer)


async def test_brought_to_front_never_reaches_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task brought to the front (old draft, extras not delivered) stopped before the keys is
    rejected, and the reason quotes am."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    warning = "Warning: Activity not started, its current task has been brought to the front"
    answer = _send_step(f"{CHECKS}Starting: Intent {{ }}\n{warning}\nStatus: ok\nSBAMX00ff:0\n", 1)
    with pytest.raises(CommandRejected, match="brought to the front"):
        await _send(answer)


async def test_failed_key_event_after_go_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys were reached but a key event failed: the outcome is unknown."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    answer = _send_step(
        f"{CHECKS}{CLEAN_AM}SBAMX00ff:0\n{FOCUS}SBGO00ff\nError: Unknown keycode\n", 1
    )
    with pytest.raises(OutcomeUnknown):
        await _send(answer)


@pytest.mark.parametrize(
    "output",
    [
        f"{CLEAN_AM}SBAMX00ff:0\nSBAMX00ff:0\nSBGO00ff\n",
        f"{CLEAN_AM}SBAMX00ff:0\nSBGO00ff\nSBGO00ff\n",
        f"{CLEAN_AM}SBGO00ff\n",
        f"{CLEAN_AM}SBAMX00ff:0\nnoise\nSBGO00ff\n",
        f"{CHECKS}{CLEAN_AM}SBAMX00ff:0\nSBGO00ff\n",
        f"{CHECKS}{CLEAN_AM}SBOK00ff:awake\nSBAMX00ff:0\n{FOCUS}SBGO00ff\n",
        f"SBROLE00ff:0:0:a.b\n{CHECKS}{CLEAN_AM}SBAMX00ff:0\n{FOCUS}SBGO00ff\n",
    ],
)
async def test_garbled_markers_are_unknown(monkeypatch: pytest.MonkeyPatch, output: str) -> None:
    """Repeated, missing or misplaced markers are garbled output: OutcomeUnknown, never NotSent."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    with pytest.raises(OutcomeUnknown):
        await _send(_send_step(output, 0))


async def test_clean_reply_gives_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean reply yields the watermark, its date and the clock read before the send."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    evidence = await _send(_send_step(f"{CHECKS}{CLEAN_AM}SBAMX00ff:0\n{FOCUS}SBGO00ff\n", 0))
    expected = (7, 1000, True, 1764420000123, 3, CLEAN_AM)
    assert expected == (
        evidence.watermark_id,
        evidence.watermark_date_ms,
        evidence.watermark_proven,
        evidence.device_clock_ms,
        evidence.mms_watermark_id,
        evidence.am_output,
    )


@pytest.mark.parametrize(
    ("before_am", "after_am", "reason"),
    [
        ("SBROLE00ff:0:0:\n", "", r"no default SMS app .*read with cmd role"),
        ("SBROLE00ff:255:0:\n", "", r"no default SMS app .*read with dumpsys role"),
        ("SBROLE00ff:255:1:\n", "", "could not be read: cmd role get-role-holders exited 255"),
        ("SBROLE00ff:0:0:a.b;c.d\n", "", "could not be read: cmd role gave 'a.b;c.d'"),
        ("SBROLE00ff:Unknown command: x\n", "", "could not be read"),
        ("SBROLE00ff:0:0:com.example\nSBOK00ff:role\n", "", "not awake"),
        ("SBROLE00ff:0:0:com.example\nSBOK00ff:role\nSBOK00ff:awake\n", "", "keyguard"),
        (f"{CHECKS}{CLEAN_AM}", "", "did not have focus"),
    ],
)
async def test_each_failed_check_is_named_and_rejected(
    monkeypatch: pytest.MonkeyPatch, before_am: str, after_am: str, reason: str
) -> None:
    """A check that stopped the script before the keys is CommandRejected naming that check."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    status = "0" if CLEAN_AM in before_am else "1"
    answer = _send_step(f"{before_am}SBAMX00ff:{status}\n{after_am}", 1)
    with pytest.raises(CommandRejected, match=reason) as caught:
        await _send(answer)
    assert "no key was pressed" in str(caught.value)


async def test_configured_package_that_is_not_the_holder_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A configured package that is not the default SMS app is rejected with both names."""
    monkeypatch.setattr("secrets.token_hex", lambda _n: "00ff")
    device = ScriptedDevice(_send_step("SBROLE00ff:255:0:com.other.sms\nSBAMX00ff:1\n", 1))
    dispatcher = SmsDispatcher(device, app=MessagingApp(package="com.example.sms"))  # type: ignore[arg-type]
    expected = re.escape("com.other.sms, not the configured com.example.sms (read with dumpsys")
    with pytest.raises(CommandRejected, match=expected):
        await dispatcher.send("+12025550143", "hi")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"checks": ("role", "screen")}, "unknown send checks"),
        ({"checks": ("awake", "focus")}, "focus check needs"),
        ({"package": "not a package"}, "not an Android package"),
        ({"package": "single"}, "not an Android package"),
    ],
)
def test_messaging_app_refuses_bad_checks(kwargs: dict[str, object], message: str) -> None:
    """Unknown checks, a focus check with no package to look for, or a bad package are refused."""
    with pytest.raises(ValueError, match=message):
        MessagingApp(**kwargs)  # type: ignore[arg-type]
