"""The bridge's ``settings`` reads name no user: they read user 0's values, the phone's own."""

from __future__ import annotations

from pathlib import Path

from android_bridge import Device
from tests.bridge.conftest import PhoneFactory


async def test_the_identity_read_is_user_0s_android_id_beside_other_users(
    make_phone: PhoneFactory, bridge_key: Path
) -> None:
    """On a phone with a work profile and a secondary user (each with its own
    ``android_id``), the identity the bridge reads is user 0's (``settings get`` without
    ``--user`` is ``USER_SYSTEM``), the same on every connection."""
    phone = await make_phone(work_profile=True, secondary_user_sms_app="com.example.sms")
    identities = []
    for _ in range(2):
        async with await Device.connect(phone.serial, key_path=bridge_key) as device:
            identities.append((await device.facts()).android_id)
    assert [phone.android_id, phone.android_id] == identities
    assert phone.store.android_id(10) != phone.android_id != phone.store.android_id(11)
