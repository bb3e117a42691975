"""A send step runs to its end on the phone when the connection drops under it, on both send
paths: it ignores SIGHUP and keeps its output in a file (``android_bridge._fence``
``run_to_the_end``), so its ``keys`` stage marker is on the phone whatever became of the reply.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from android_bridge import (
    FENCE_ROOT,
    CommandRejected,
    Device,
    FenceState,
    FrameworkDispatcher,
    MessagingApp,
    OutcomeUnknown,
    SmsDispatcher,
    ensure_epoch,
    void_fences,
)
from android_bridge._fence import cleanup_command, output_path, run_to_the_end
from tests.bridge.conftest import PhoneFactory

TO = "+12025550143"
BODY = "Your code is 4821"


async def connect(serial: str, key: Path) -> Device:
    """A bridge Device on the simulated phone."""
    return await Device.connect(serial, key_path=key, connect_timeout_s=2, command_timeout_s=5)


@pytest.mark.parametrize("android", [10, 15])
@pytest.mark.parametrize(
    ("path", "command", "nth"), [("ui", "input", 2), ("framework", "service", 1)]
)
async def test_a_send_cut_off_right_after_it_sent_records_its_keys(
    make_phone: PhoneFactory, bridge_key: Path, path: str, command: str, nth: int, android: int
) -> None:
    """The connection drops right after the send key (UI path) or the ``service call``
    (framework path): the dispatcher cannot know the outcome, yet the script ran on to its
    end: its fence holds ``am`` and ``keys``, one SMS left, its output file is gone. The
    phone follows adbd (the PTY closed, system/core ``adb/`` android-10.0.0_r30,
    packages/modules/adb 11.0.0_r1 to 15.0.0_r1), the kernel (SIGHUP to the session leader
    alone, ``tty_signal_session_leader``) and mksh (``trap '' HUP`` is ``SIG_IGN``,
    ``histrap.c`` ``settrap``, R57 to R59c)."""
    phone = await make_phone(android=android)
    async with await connect(phone.serial, bridge_key) as device:
        epoch = await ensure_epoch(device)
        phone.drop_after_command(command, nth=nth)
        dispatcher = SmsDispatcher(device) if path == "ui" else FrameworkDispatcher(device)
        with pytest.raises(OutcomeUnknown):
            await dispatcher.send(TO, BODY, fence=("d-1", epoch.epoch))
    await phone.wait_idle()
    async with await connect(phone.serial, bridge_key) as device:
        (report,) = await void_fences(device, [("d-1", epoch.epoch)])
    assert FenceState.CLAIMED == report.state
    assert ["am", "keys"] == [stage for stage, _ms in report.stages]
    assert [BODY] == [message.body for message in phone.transmissions]
    assert [".epoch-" + epoch.epoch, "d-1", "d-1.am", "d-1.go", "d-1.keys"] == (
        phone.files.listdir(FENCE_ROOT)
    )


async def test_a_send_without_a_fence_makes_the_folder_for_its_output(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """A send without a fence (no epoch, no folder yet) still keeps its output in the fence's
    folder, made on the way, and leaves nothing behind."""
    phone = await make_phone()
    async with await connect(phone.serial, bridge_key) as device:
        evidence = await SmsDispatcher(device, app=MessagingApp()).send(TO, BODY)
    assert "Status: ok" in evidence.am_output
    assert [] == phone.files.listdir(FENCE_ROOT)
    assert 1 == len(await phone.wait_transmissions(then_idle=True))


def test_the_output_file_is_a_dot_name_of_the_nonce_or_the_dispatch_id() -> None:
    """The output file is a dot name (skipped by list_fences and the epoch listing), named by
    a send's nonce or its attempt's dispatch id (so that the cleanup of a resolved attempt's
    fence removes what a script stopped midway left); nothing else names one, and the step
    sits in a group whose output goes there."""
    dispatch_id = "0d452353-1f35-4f15-879f-1a03a22b2f90"
    assert f"{FENCE_ROOT}/.out-00ff" == output_path("00ff")
    assert f"{FENCE_ROOT}/.out-{dispatch_id}" == output_path(dispatch_id)
    assert output_path(dispatch_id) in cleanup_command([dispatch_id]).split()
    script = run_to_the_end("echo hi", "00ff")
    assert script.startswith("trap '' HUP; ")
    assert "{ echo hi; } </dev/null >" + output_path("00ff") + " 2>&1" in script
    for bad in ("../x", "a b", "", "-lead"):
        with pytest.raises(CommandRejected, match="nonce or dispatch id"):
            output_path(bad)
