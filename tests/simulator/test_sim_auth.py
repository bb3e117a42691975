"""Decoding Android's RSAPublicKey struct and verifying adb's pre-hashed signatures."""

from __future__ import annotations

import base64
import os
import struct
from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator._auth import AuthorizedKeys, InvalidPublicKey, decode_public_key


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
