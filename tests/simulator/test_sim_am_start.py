"""``am start``: when the compose window takes the keys, what ``-W`` prints, and exit statuses."""

from __future__ import annotations

import re

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

RELEASES = [10, 11, 12, 13, 14, 15]
SENDTO = "am start -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hello"
SENDTO_W = "am start -W -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hello"
STARTING = (
    "Starting: Intent { act=android.intent.action.SENDTO dat=smsto:xxxxxxxxx (has extras) }\n"
)
GOOGLE_COMPOSE = "com.google.android.apps.messaging/.ui.conversation.ConversationActivity"
KEYS = "input keyevent 22; input keyevent 66"


@pytest.mark.parametrize("android", RELEASES)
async def test_keys_right_after_am_without_wait_go_to_the_launcher(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Without -W am returns before the window has focus, so chained keys send nothing
    (ActivityManagerShellCommand.runStartActivity, frameworks/base android-10.0.0_r30 to 15)."""
    phone = await phone_factory(android=android, focus_delay_ms=2000)
    device = await connect(phone, adb_signer)
    assert STARTING == await device.shell(f"{SENDTO}; {KEYS}")
    await device.close()
    assert [] == phone.store.rows()
    await phone.radio_idle()
    assert [] == phone.transmissions
    assert phone.compose is not None
    assert ("hello", "text") == (phone.compose.body, phone.compose.focus)


async def test_keys_after_the_focus_delay_reach_the_compose_window(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Keys that come once the window has taken focus send (the window then has input focus)."""
    phone = await phone_factory(focus_delay_ms=50)
    device = await connect(phone, adb_signer)
    await device.shell(f"{SENDTO}; sleep 0.2; {KEYS}")
    await device.close()
    assert [("+15550100", "hello", 2)] == [(r.address, r.body, r.type) for r in phone.store.rows()]


@pytest.mark.parametrize("android", RELEASES)
async def test_wait_prints_the_wait_result_and_the_keys_send(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """-W waits until the window is displayed and prints Status, LaunchState, Activity, TotalTime,
    WaitTime, Complete (ActivityManagerShellCommand.runStartActivity, frameworks/base
    android-10.0.0_r30 to 15)."""
    phone = await phone_factory(android=android, focus_delay_ms=120)
    device = await connect(phone, adb_signer)
    first = await device.shell(f"{SENDTO_W}; {KEYS}")
    second = await device.shell(SENDTO_W.replace("+15550100", "+15550101"))
    await device.close()
    match = re.fullmatch(
        re.escape(STARTING + "Status: ok\nLaunchState: COLD\n")
        + re.escape(f"Activity: {GOOGLE_COMPOSE}\n")
        + r"TotalTime: (\d+)\nWaitTime: (\d+)\nComplete\n",
        first,
    )
    assert match is not None, first
    total, wait = int(match.group(1)), int(match.group(2))
    assert 120 <= total <= wait
    assert "LaunchState: WARM\n" in second
    assert [("+15550100", "hello", 2)] == [(r.address, r.body, r.type) for r in phone.store.rows()]


@pytest.mark.parametrize(
    ("android", "status"), [(10, 0), (11, 0), (12, 0), (13, 0), (14, 0), (15, 1)]
)
async def test_unresolved_intent_exit_status_by_release(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, status: int
) -> None:
    """An intent nothing handles prints 'unable to resolve Intent' and exits 0 up to 14, 1 on 15
    (ActivityManagerShellCommand.runStartActivity, frameworks/base android-10.0.0_r30 and
    android-15)."""
    phone = await phone_factory(android=android)
    device = await connect(phone, adb_signer)
    output = await device.shell(
        'am start -a android.intent.action.FROB -d smsto:+15550100 --es sms_body hi; echo "rc=$?"'
    )
    await device.close()
    intent = "Intent { act=android.intent.action.FROB dat=smsto:xxxxxxxxx (has extras) }"
    assert (
        f"Starting: {intent}\nError: Activity not started, unable to resolve {intent}\n"
        f"rc={status}\n"
    ) == output


@pytest.mark.parametrize(("android", "override"), [(10, 1), (15, 0)])
async def test_unresolved_exit_status_can_be_overridden(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, override: int
) -> None:
    """am_unresolved_exit= models the builds that differ from their release's source
    (ActivityManagerShellCommand, frameworks/base android-10.0.0_r30 and android-15)."""
    phone = await phone_factory(android=android, am_unresolved_exit=override)
    device = await connect(phone, adb_signer)
    output = await device.shell(
        "am start -a android.intent.action.SENDTO -d smsto:+15550100 -p org.example.none;"
        ' echo "rc=$?"'
    )
    await device.close()
    assert "Error: Activity not started, unable to resolve Intent {" in output
    assert output.endswith(f"rc={override}\n")


async def test_missing_component_is_error_type_3(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """An explicit component nobody has prints 'Error type 3' and 'does not exist' (ActivityStarter
    START_CLASS_NOT_FOUND, ActivityManagerShellCommand android-15)."""
    phone = await phone_factory()
    device = await connect(phone, adb_signer)
    output = await device.shell(
        "am start -n com.google.android.apps.messaging/.Nope -a android.intent.action.SENDTO"
        ' -d smsto:+15550100; echo "rc=$?"'
    )
    await device.close()
    assert output.endswith(
        "Error type 3\nError: Activity class"
        " {com.google.android.apps.messaging/com.google.android.apps.messaging.Nope}"
        " does not exist.\nrc=1\n"
    )


async def test_explicit_component_starts_the_compose_window(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """-n naming the app's SENDTO activity starts it like the implicit intent
    (Intent.parseCommandArgs, frameworks/base android-15)."""
    phone = await phone_factory(focus_delay_ms=20)
    device = await connect(phone, adb_signer)
    output = await device.shell(
        "am start -W -n"
        " com.google.android.apps.messaging/.ui.conversation.LaunchConversationActivity"
        f" -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hello; {KEYS}"
    )
    await device.close()
    assert (
        "cmp=com.google.android.apps.messaging/.ui.conversation.LaunchConversationActivity"
        in output
    )
    assert ["hello"] == [row.body for row in phone.store.rows()]


async def test_activity_new_task_is_not_an_option(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """--activity-new-task does not exist: Intent.parseCommandArgs throws 'Unknown option'
    (frameworks/base Intent.java android-10 to 15)."""
    phone = await phone_factory()
    device = await connect(phone, adb_signer)
    output = await device.shell(f'{SENDTO} --activity-new-task; echo "rc=$?"')
    await device.close()
    assert output.startswith(
        "Exception occurred while executing 'start':\n"
        "java.lang.IllegalArgumentException: Unknown option: --activity-new-task\n"
    )
    assert output.endswith("rc=255\n")
    assert phone.compose is None


async def test_flags_are_decoded_like_integer_decode(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """-f takes Integer.decode forms (hex, octal) and replaces earlier flags
    (Intent.parseCommandArgs, frameworks/base android-15)."""
    phone = await phone_factory()
    device = await connect(phone, adb_signer)
    hexadecimal = await device.shell(f"{SENDTO} -f 0x10008000")
    octal = await device.shell(f"{SENDTO} --activity-clear-top -f 0100000")
    await device.close()
    assert "flg=0x10008000" in hexadecimal
    assert "flg=0x8000 " in octal
