"""ADB public-key authentication, as adbd does it.

A key in an ``adb_keys`` file is one line: base64 of Android's ``RSAPublicKey`` struct and
a `` user@host`` comment. The struct is little-endian 32-bit words: the modulus length in
words, ``n0inv`` (-1/n mod 2**32), the modulus, ``rr`` (R**2 mod n) and the exponent.
A client proves it holds the private key by signing the 20-byte random token: a PKCS#1 v1.5
signature whose DigestInfo says SHA-1 but whose digest *is* the raw token (adb pre-hashes).

Keys the user allowed with "Always allow" expire: the framework's ``AdbKeyStore``
(frameworks/base ``services/core/java/com/android/server/adb/AdbDebuggingManager.java``,
from Android 10, the first release with ``com.android.server.adb``, to 15) records each key's
last connection (on connect, on disconnect, and daily while connected) and
``filterOutOldKeys`` deletes from ``adb_keys`` every key unused for longer than
``Settings.Global.ADB_ALLOWED_CONNECTION_TIME`` (``DEFAULT_ADB_ALLOWED_CONNECTION_TIME``
= 604800000 ms, 7 days; 0 turns it off, the developer option "Disable adb authorization
timeout"). Keys already in the file when the store starts count as used at that moment
(``addUserKeysToKeyStore``). An expired key is then unknown to adbd: the phone asks the user
again.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import hmac
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import attrs

from android_bridge._private_files import ensure_private_file, make_private_dirs

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


@attrs.define
class _Session:
    """One ADB connection: the key it authenticated with, once it has."""

    modulus: int | None = None


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "adb_session", default=None
)


class AuthorizedKeys:
    """The phone's ``adb_keys`` file: re-read on every check, appended on "Allow".

    With a ``clock`` (device time in ms) and an ``allowed_connection_ms``, it also keeps
    ``AdbKeyStore``'s last-connection times and deletes expired keys from the file before
    each check. Wrap each connection in :meth:`session` so a connected key counts as in use.
    """

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], int] | None = None,
        allowed_connection_ms: int | None = None,
    ) -> None:
        self.path = path
        self.clock = clock
        #: Unused this long, an allowed key is deleted; None or 0: never.
        self.allowed_connection_ms = allowed_connection_ms
        #: Last connection (device ms) of each tracked key, by modulus.
        self.last_connection: dict[int, int] = {}
        self._connected: Counter[int] = Counter()

    def start_keystore(self) -> None:
        """``AdbKeyStore`` starting (at boot): untracked keys in the file count as used now."""
        if self.clock is None:
            return
        now = self.clock()
        for key in self.keys():
            self.last_connection.setdefault(key.modulus, now)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """One connection's lifetime: its key stays in use until it ends (disconnect time)."""
        session = _Session()
        token = _SESSION.set(session)
        try:
            yield
        finally:
            _SESSION.reset(token)
            if session.modulus is not None:
                self._connected[session.modulus] -= 1
                if self._connected[session.modulus] <= 0:
                    del self._connected[session.modulus]
                self._touch(session.modulus)

    def expire(self) -> list[AndroidPublicKey]:
        """``filterOutOldKeys``: delete from the file every key unused for too long.

        Returns the keys deleted.
        """
        if self.clock is None or not self.allowed_connection_ms:
            return []
        now = self.clock()
        expired = [
            key
            for key in self.keys()
            if key.modulus not in self._connected
            and now > self.last_connection.setdefault(key.modulus, now) + self.allowed_connection_ms
        ]
        if expired:
            gone = {key.modulus for key in expired}
            kept = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    if decode_public_key(line).modulus in gone:
                        continue
                except InvalidPublicKey:
                    pass
                kept.append(line)
            self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
            for modulus in gone:
                self.last_connection.pop(modulus, None)
        return expired

    def _touch(self, modulus: int) -> None:
        if self.clock is not None:
            self.last_connection[modulus] = self.clock()

    def _connect(self, key: AndroidPublicKey) -> None:
        """A connection authenticated with ``key``: it is in use from now on."""
        self._touch(key.modulus)
        session = _SESSION.get()
        if session is not None and session.modulus is None:
            session.modulus = key.modulus
            self._connected[key.modulus] += 1

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
        """Return the authorized key that signed ``token``, or None (expired keys are gone)."""
        self.expire()
        for key in self.keys():
            if key.verify(token, signature):
                self._connect(key)
                return key
        return None

    def add(self, line: str) -> AndroidPublicKey:
        """Validate a public key sent by a client and append it (the user tapped "Allow").

        Raises:
            InvalidPublicKey: the key is malformed; nothing is written.
        """
        key = decode_public_key(line)
        if any(existing.modulus == key.modulus for existing in self.keys()):
            self._connect(key)
            return key
        make_private_dirs(self.path.parent)
        ensure_private_file(self.path)  # the file of authorised keys: 0600, as every file
        existing_text = self.path.read_text(encoding="utf-8")
        separator = "" if not existing_text or existing_text.endswith("\n") else "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(f"{separator}{key.line}\n")
        self._connect(key)
        return key
