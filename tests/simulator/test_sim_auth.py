"""Android's RSAPublicKey struct, adb's pre-hashed signatures, and keys that expire unused."""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from datetime import timedelta
from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from adb_shell.exceptions import TcpTimeoutException

from android_bridge.simulator._auth import AuthorizedKeys, InvalidPublicKey, decode_public_key
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect


def _public_line(adb_key_path: Path) -> str:
    return Path(f"{adb_key_path}.pub").read_text(encoding="utf-8").strip()


def test_signature_over_raw_token_verifies(adb_key_path: Path, adb_signer: PythonRSASigner) -> None:
    """A PKCS#1 v1.5 SHA-1 signature over the raw 20-byte token verifies; another token does not."""
    key = decode_public_key(_public_line(adb_key_path))
    token = os.urandom(20)
    signature = adb_signer.Sign(token)
    assert key.verify(token, signature)
    assert not key.verify(os.urandom(20), signature)
    assert not key.verify(token, signature[:-1] + bytes([signature[-1] ^ 1]))
    assert 65537 == key.exponent


def test_struct_fields_are_checked(adb_key_path: Path) -> None:
    """A key whose n0inv does not match its modulus is rejected."""
    raw = bytearray(base64.b64decode(_public_line(adb_key_path).split()[0]))
    struct.pack_into("<I", raw, 4, (struct.unpack_from("<I", raw, 4)[0] + 1) & 0xFFFFFFFF)
    with pytest.raises(InvalidPublicKey, match="n0inv"):
        decode_public_key(base64.b64encode(bytes(raw)).decode() + " tampered@host")


@pytest.mark.parametrize("line", ["", "not base64!!", base64.b64encode(b"short").decode()])
def test_malformed_lines_are_rejected(line: str) -> None:
    """Empty, non-base64 and wrong-sized key lines are refused."""
    with pytest.raises(InvalidPublicKey):
        decode_public_key(line)


def test_malformed_lines_in_adb_keys_are_skipped(
    tmp_path: Path, adb_key_path: Path, adb_signer: PythonRSASigner
) -> None:
    """Garbage lines in adb_keys do not stop a good key further down from authorizing."""
    path = tmp_path / "adb_keys"
    path.write_text("# comment\ngarbage line\n\n" + _public_line(adb_key_path) + "\n")
    keys = AuthorizedKeys(path)
    token = os.urandom(20)
    assert keys.verify(token, adb_signer.Sign(token)) is not None
    assert 1 == len(keys.keys())


def test_adding_a_known_key_does_not_duplicate_it(tmp_path: Path, adb_key_path: Path) -> None:
    """Allowing a key twice writes it once."""
    keys = AuthorizedKeys(tmp_path / "adb_keys")
    keys.add(_public_line(adb_key_path))
    keys.add(_public_line(adb_key_path))
    assert [_public_line(adb_key_path)] == (tmp_path / "adb_keys").read_text().splitlines()


@pytest.mark.parametrize("android", [10, 11, 12, 13, 14, 15])
async def test_key_unused_for_seven_days_is_forgotten(
    phone_factory: PhoneFactory,
    adb_signer: PythonRSASigner,
    authorized_keys_path: Path,
    android: int,
) -> None:
    """An allowed key unused for more than ADB_ALLOWED_CONNECTION_TIME (7 days) is deleted from
    adb_keys and the client is asked again (AdbDebuggingManager.AdbKeyStore.filterOutOldKeys,
    frameworks/base android-10 to 15)."""
    phone = await phone_factory(android=android)
    phone.advance_time(timedelta(days=6, hours=23))
    device = await connect(phone, adb_signer)
    await device.close()
    await asyncio.sleep(0.1)  # the phone sees the disconnect
    phone.advance_time(timedelta(days=7, milliseconds=1))
    with pytest.raises(TcpTimeoutException):
        await connect(phone, adb_signer, auth_timeout_s=0.2)
    assert "" == authorized_keys_path.read_text(encoding="utf-8")


async def test_disabled_auth_timeout_keeps_keys(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """ "Disable adb authorization timeout" (ADB_ALLOWED_CONNECTION_TIME 0) keeps a key forever
    (AdbDebuggingManager.AdbKeyStore, frameworks/base android-15)."""
    phone = await phone_factory(disable_adb_auth_timeout=True)
    phone.advance_time(timedelta(days=365))
    device = await connect(phone, adb_signer)
    assert "ok\n" == await device.shell("echo ok")
    await device.close()


async def test_a_connected_key_does_not_expire(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A key with an open connection is in use and is not deleted, however long it stays
    (AdbDebuggingManager MESSAGE_ADB_UPDATE_KEYSTORE, frameworks/base android-15)."""
    phone = await phone_factory()
    held = await connect(phone, adb_signer)
    phone.advance_time(timedelta(days=8))
    second = await connect(phone, adb_signer)
    assert "ok\n" == await second.shell("echo ok")
    await second.close()
    await held.close()


async def test_the_clock_of_a_key_restarts_at_disconnect(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A key's last use is when its connection ends (AdbDebuggingManager MESSAGE_ADB_DISCONNECT,
    frameworks/base android-15)."""
    phone = await phone_factory()
    held = await connect(phone, adb_signer)
    phone.advance_time(timedelta(days=8))
    await held.close()
    await asyncio.sleep(0.1)  # the phone sees the disconnect
    phone.advance_time(timedelta(days=6))
    again = await connect(phone, adb_signer)
    assert "ok\n" == await again.shell("echo ok")
    await again.close()


def test_expiry_keeps_other_lines(tmp_path: Path, adb_key_path: Path) -> None:
    """Deleting an expired key rewrites adb_keys without it and leaves the other lines
    (AdbKeyStore.filterOutOldKeys, frameworks/base android-15)."""
    now = [0]
    path = tmp_path / "adb_keys"
    path.write_text("# comment\n" + _public_line(adb_key_path) + "\n")
    keys = AuthorizedKeys(path, clock=lambda: now[0], allowed_connection_ms=1000)
    keys.start_keystore()
    now[0] = 1000
    assert [] == keys.expire()
    now[0] = 1001
    assert 1 == len(keys.expire())
    assert "# comment\n" == path.read_text()
