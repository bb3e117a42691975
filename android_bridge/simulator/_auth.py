"""ADB public-key authentication, as adbd does it.

A key in an ``adb_keys`` file is one line: base64 of Android's ``RSAPublicKey`` struct and
a `` user@host`` comment. The struct is little-endian 32-bit words: the modulus length in
words, ``n0inv`` (-1/n mod 2**32), the modulus, ``rr`` (R**2 mod n) and the exponent.
A client proves it holds the private key by signing the 20-byte random token: a PKCS#1 v1.5
signature whose DigestInfo says SHA-1 but whose digest *is* the raw token (adb pre-hashes).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import struct
from pathlib import Path
from typing import Final

import attrs

MODULUS_BYTES: Final = 2048 // 8
MODULUS_WORDS: Final = MODULUS_BYTES // 4
_STRUCT = struct.Struct(f"<II{MODULUS_BYTES}s{MODULUS_BYTES}sI")
ENCODED_SIZE: Final = _STRUCT.size

#: DER prefix of a SHA-1 DigestInfo (RFC 8017, section 9.2, note 1).
_SHA1_DIGEST_INFO: Final = bytes.fromhex("3021300906052b0e03021a05000414")


class InvalidPublicKey(ValueError):
    """The bytes are not a well-formed Android ``RSAPublicKey``."""


@attrs.frozen(kw_only=True)
class AndroidPublicKey:
    """An RSA public key decoded from Android's binary struct."""

    #: The modulus n.
    modulus: int
    #: The public exponent e (3 or 65537 in practice).
    exponent: int
    #: The ``adb_keys`` line the key came from (base64 and comment).
    line: str

    def verify(self, token: bytes, signature: bytes) -> bool:
        """Return whether ``signature`` is a PKCS#1 v1.5 SHA-1 signature of the raw ``token``."""
        if len(signature) != MODULUS_BYTES:
            return False
        value = int.from_bytes(signature, "big")
        if value >= self.modulus:
            return False
        recovered = pow(value, self.exponent, self.modulus).to_bytes(MODULUS_BYTES, "big")
        suffix = b"\x00" + _SHA1_DIGEST_INFO + token
        padding = MODULUS_BYTES - 2 - len(suffix)
        expected = b"\x00\x01" + b"\xff" * padding + suffix
        return hmac.compare_digest(recovered, expected)


def decode_public_key(line: str) -> AndroidPublicKey:
    """Decode one ``adb_keys`` line (``<base64> [user@host]``).

    Raises:
        InvalidPublicKey: not base64, wrong size, or inconsistent struct fields.
    """
    fields = line.strip().split(maxsplit=1)
    if not fields:
        raise InvalidPublicKey("empty key line")
    try:
        raw = base64.b64decode(fields[0], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidPublicKey("key is not valid base64") from exc
    if len(raw) != ENCODED_SIZE:
        raise InvalidPublicKey(f"key struct is {len(raw)} bytes, expected {ENCODED_SIZE}")
    words, n0inv, modulus_le, rr_le, exponent = _STRUCT.unpack(raw)
    if words != MODULUS_WORDS:
        raise InvalidPublicKey(f"modulus is {words} words, expected {MODULUS_WORDS}")
    modulus = int.from_bytes(modulus_le, "little")
    if modulus % 2 == 0 or modulus.bit_length() < MODULUS_BYTES * 8 - 8:
        raise InvalidPublicKey("modulus is not a plausible RSA modulus")
    if (n0inv * modulus + 1) % (1 << 32) != 0:
        raise InvalidPublicKey("n0inv does not match the modulus")
    if int.from_bytes(rr_le, "little") != pow(1 << (MODULUS_BYTES * 8), 2, modulus):
        raise InvalidPublicKey("rr does not match the modulus")
    if exponent not in (3, 65537):
        raise InvalidPublicKey(f"unsupported exponent {exponent}")
    return AndroidPublicKey(modulus=modulus, exponent=exponent, line=line.strip())


class AuthorizedKeys:
    """The phone's ``adb_keys`` file: re-read on every check, appended on "Allow"."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def keys(self) -> list[AndroidPublicKey]:
        """Return every well-formed key in the file (malformed lines are skipped, as adbd does)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        keys = []
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                keys.append(decode_public_key(line))
            except InvalidPublicKey:
                continue
        return keys

    def verify(self, token: bytes, signature: bytes) -> AndroidPublicKey | None:
        """Return the authorized key that signed ``token``, or None."""
        for key in self.keys():
            if key.verify(token, signature):
                return key
        return None

    def add(self, line: str) -> AndroidPublicKey:
        """Validate a public key sent by a client and append it (the user tapped "Allow").

        Raises:
            InvalidPublicKey: the key is malformed; nothing is written.
        """
        key = decode_public_key(line)
        if any(existing.modulus == key.modulus for existing in self.keys()):
            return key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing_text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        separator = "" if not existing_text or existing_text.endswith("\n") else "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(f"{separator}{key.line}\n")
        return key
