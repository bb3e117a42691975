"""A send step runs to its end on the phone when the connection drops under it, on both send
paths: it ignores SIGHUP and keeps its output in a file (``android_bridge._fence``
``run_to_the_end``), so its ``keys`` stage marker is on the phone whatever became of the reply.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

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
from android_bridge._dispatcher import send_command, send_round_trip_steps
from android_bridge._fence import cleanup_command, output_path, run_to_the_end
from android_bridge._framework import framework_send_command
from android_bridge._shell import frame_script
from tests.bridge.conftest import PhoneFactory
from tests.simulator.sim_helpers import run_until_dropped

TO = "+12025550143"
BODY = "Your code is 4821"
#: Where the probe after the send script notes how the script ended.
PROBE = "/data/local/tmp/after"


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


@pytest.mark.parametrize("service", ["shell:", "shell,v2,raw:"])
@pytest.mark.parametrize(
    ("path", "command", "nth"), [("ui", "input", 2), ("framework", "service", 1)]
)
async def test_the_send_round_trip_runs_to_its_end_under_either_shell_service(
    make_phone: PhoneFactory, bridge_key: Path, path: str, command: str, nth: int, service: str
) -> None:
    """The product's send round trip (framed reads, then the send step) cut off right after
    it sent, on adb-shell's legacy ``shell:`` (a PTY: adbd signals nothing, the kernel's
    hang-up SIGHUPs the ``sh``, writes fail with EIO) and on the shell protocol (adbd's own
    ``kill(pid, SIGHUP)``, then its sockets closed: a write raises SIGPIPE;
    ``PassDataStreams``, system/core ``adb/daemon/shell_service.cpp`` android-10.0.0_r30 and
    11.0.0_r1, packages/modules/adb to 15-qpr2). Either way the ``sh`` ignores the SIGHUP and
    every write of the step goes to its file: the fence holds ``am`` and ``keys``, one SMS
    left, and the file is gone (the ``cat`` that prints it back dies alone of SIGPIPE, then
    ``rm`` runs). Only where it ends differs: on the PTY the last frame's ``echo`` fails and
    the script ends; on the socket that builtin ``echo`` takes SIGPIPE and the ``sh`` dies
    there, with nothing left to do (the probe after it never runs)."""
    phone = await make_phone()
    async with await connect(phone.serial, bridge_key) as device:
        epoch = await ensure_epoch(device)
        sdk = (await device.facts()).sdk
    assert sdk is not None
    fence = ("d-1", epoch.epoch)
    nonce = "00112233aabbccdd"
    if path == "ui":
        step = send_command(TO, BODY, MessagingApp(), nonce, fence=fence)
    else:
        step = framework_send_command(sdk, 1, TO, BODY, nonce, fence=fence)
    script = frame_script(send_round_trip_steps(step, "")).command
    phone.drop_after_command(command, nth=nth)
    signer = PythonRSASigner.FromRSAKeyPath(str(bridge_key))
    await run_until_dropped(phone, signer, service, f'{script}; echo "after=$?" >>{PROBE}')
    async with await connect(phone.serial, bridge_key) as device:
        (report,) = await void_fences(device, [fence])
    assert FenceState.CLAIMED == report.state
    assert ["am", "keys"] == [stage for stage, _ms in report.stages]
    assert [BODY] == [message.body for message in phone.transmissions]
    assert [".epoch-" + epoch.epoch, "d-1", "d-1.am", "d-1.go", "d-1.keys"] == (
        phone.files.listdir(FENCE_ROOT)
    )
    probe = (phone.files.read_bytes(PROBE) or b"").decode()
    assert ("after=1\n" if service == "shell:" else "") == probe


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
