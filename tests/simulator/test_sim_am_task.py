"""A SENDTO that lands in the messaging app's open task: old drafts, warnings, and the flags that
help."""

from __future__ import annotations

import asyncio

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import Fault, SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

RELEASES = [10, 11, 12, 13, 14, 15]
KEYS = "input keyevent 22; input keyevent 66"
TO_FRONT = "Warning: Activity not started, its current task has been brought to the front\n"
TO_TOP = (
    "Warning: Activity not started, intent has been delivered to currently running top-most"
    " instance.\n"
)


def sendto(body: str, *, address: str = "+15550100", options: str = "-W") -> str:
    """``am start`` for a SENDTO to ``address`` carrying ``body``."""
    return (
        f"am start {options} -a android.intent.action.SENDTO -d smsto:{address}"
        f" --es sms_body '{body}'"
    )


async def sent(phone: SimulatedPhone, count: int) -> list[tuple[tuple[str, ...], str]]:
    """(recipients, text) of every message that really left the phone, once ``count`` have and
    nothing more is on its way."""
    return [
        (t.addresses, t.body) for t in await phone.wait_transmissions(count=count, then_idle=True)
    ]


@pytest.mark.parametrize("android", RELEASES)
async def test_equal_sendto_to_an_open_window_keeps_the_old_draft(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The compose window in front gets nothing: 'delivered to top-most instance', exit 0, and the
    keys send the old draft (ActivityStarter.recycleTask / setTaskFromIntentActivity,
    frameworks/base android-10.0.0_r30 to 15)."""
    phone = await phone_factory(android=android, focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft")
    device = await connect(phone, adb_signer)
    output = await device.shell(f'{sendto("new text")}; echo "rc=$?"; {KEYS}')
    await device.close()
    assert TO_TOP in output
    assert "LaunchState: UNKNOWN (0)\n" in output
    assert "TotalTime: 0\n" in output
    assert "rc=0\n" in output
    assert [(("+15550100",), "old draft")] == await sent(phone, 1)


@pytest.mark.parametrize("android", RELEASES)
async def test_equal_sendto_brings_a_background_task_to_the_front(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """A task behind the launcher is brought to the front without the new extras (ActivityStarter
    START_TASK_TO_FRONT, frameworks/base android-10.0.0_r30 to 15)."""
    phone = await phone_factory(android=android, focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft", foreground=False)
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('new text')}; {KEYS}")
    await device.close()
    assert TO_FRONT in output
    assert "LaunchState: HOT\n" in output
    assert [(("+15550100",), "old draft")] == await sent(phone, 1)


@pytest.mark.parametrize(
    "options", ["-W --activity-clear-task", "-W -f 0x10008000", "-W --activity-multiple-task"]
)
async def test_flags_that_start_a_new_window_deliver_the_new_text(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, options: str
) -> None:
    """CLEAR_TASK (am adds NEW_TASK itself) or MULTIPLE_TASK starts a fresh window with the new
    extras (ActivityStarter, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft")
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('new text', options=options)}; {KEYS}")
    await device.close()
    assert "Warning" not in output
    assert [(("+15550100",), "new text")] == await sent(phone, 1)


async def test_a_failed_first_attempt_leaves_the_draft_a_retry_then_sends(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Keys lost to the launcher leave the compose window open, and a later SENDTO with other text
    sends the first text (ActivityStarter.recycleTask, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=300)
    device = await connect(phone, adb_signer)
    await device.shell(f"{sendto('first text', options='')}; {KEYS}")
    assert [] == await sent(phone, 0)
    await asyncio.sleep(0.4)
    output = await device.shell(f"{sendto('second text')}; {KEYS}")
    await device.close()
    assert TO_TOP in output
    assert [(("+15550100",), "first text")] == await sent(phone, 1)
    assert ["first text"] == [row.body for row in phone.store.rows()]


async def test_after_a_send_an_equal_sendto_finds_an_empty_window(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The window stays open after sending, so the next equal SENDTO brings no text and the send key
    does nothing (ActivityStarter.recycleTask, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    await device.shell(f"{sendto('one')}; {KEYS}")
    output = await device.shell(f"{sendto('two')}; {KEYS}")
    await device.close()
    assert TO_TOP in output
    assert [(("+15550100",), "one")] == await sent(phone, 1)


async def test_keys_before_focus_go_to_the_previous_compose_window(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A SENDTO to another number opens a new window, but keys sent before it has focus send the
    older window's draft to its recipient (ActivityManagerShellCommand.runStartActivity without -W,
    frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=2000)
    phone.open_compose("+15550177", "draft for someone else")
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('hello', options='')}; {KEYS}")
    await device.close()
    assert "Warning" not in output
    assert [(("+15550177",), "draft for someone else")] == await sent(phone, 1)
    assert phone.compose is not None
    assert ("+15550100", "hello") == (phone.compose.address, phone.compose.body)


async def test_a_package_makes_the_intent_another_filter(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """-p changes Intent.filterEquals, so a window opened without it is not reused
    (Intent.filterEquals, ActivityStarter, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft")
    device = await connect(phone, adb_signer)
    output = await device.shell(
        f"{sendto('new text', options='-W -p com.google.android.apps.messaging')}; {KEYS}"
    )
    await device.close()
    assert "Warning" not in output
    assert [(("+15550100",), "new text")] == await sent(phone, 1)


async def test_force_stop_closes_the_window(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """am force-stop finishes the app's activities, so the next SENDTO starts fresh and COLD
    (ActivityManagerService.forceStopPackage, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft")
    device = await connect(phone, adb_signer)
    await device.shell("am force-stop com.google.android.apps.messaging")
    output = await device.shell(f"{sendto('new text')}; {KEYS}")
    await device.close()
    assert "LaunchState: COLD\n" in output
    assert [(("+15550100",), "new text")] == await sent(phone, 1)


async def test_aosp_messaging_opens_a_fresh_window_for_every_sendto(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """AOSP Messaging's LaunchConversationActivity is documentLaunchMode=always and restarts the
    conversation with a cleared task, so the new text arrives (packages/apps/Messaging
    AndroidManifest.xml, UIIntentsImpl)."""
    phone = await phone_factory(app="aosp", focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft")
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('new text')}; {KEYS}")
    await device.close()
    assert "Warning" not in output
    assert "Activity: com.android.messaging/.ui.conversation.ConversationActivity\n" in output
    assert [(("+15550100",), "new text")] == await sent(phone, 1)


async def test_stale_draft_fault_sends_the_earlier_draft(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """stale-draft: the app's task already holds an unsent draft for the number, which the keys then
    send (ActivityStarter START_TASK_TO_FRONT, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20, faults=[Fault.STALE_DRAFT])
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('new text')}; {KEYS}")
    await device.close()
    assert TO_FRONT in output
    assert [(("+15550100",), "(an earlier draft nobody sent)")] == await sent(phone, 1)


async def test_stop_option_force_stops_the_app_before_starting(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """-S prints 'Stopping: <package>', force-stops the app, then starts it fresh with the new text
    (ActivityManagerShellCommand.runStartActivity, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20)
    phone.open_compose("+15550100", "old draft")
    device = await connect(phone, adb_signer)
    output = await device.shell(f"{sendto('new text', options='-W -S')}; {KEYS}")
    await device.close()
    assert output.startswith("Stopping: com.google.android.apps.messaging\nStarting: ")
    assert "LaunchState: COLD\n" in output
    assert [(("+15550100",), "new text")] == await sent(phone, 1)
