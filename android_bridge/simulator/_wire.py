"""The ADB transport packet: a 24-byte little-endian header and an optional payload.

Mirrors AOSP ``protocol.txt``: six 32-bit words (command, arg0, arg1, data length, data
checksum, magic = command XOR 0xffffffff). Peers speaking version 0x01000000 send and expect
a byte-sum checksum of the payload; peers at 0x01000001 or later skip it (the field is 0).
"""

from __future__ import annotations

import struct
from typing import Final

import attrs

HEADER = struct.Struct("<6I")
HEADER_SIZE: Final = HEADER.size

A_SYNC: Final = 0x434E5953
A_CNXN: Final = 0x4E584E43
A_OPEN: Final = 0x4E45504F
A_OKAY: Final = 0x59414B4F
A_CLSE: Final = 0x45534C43
A_WRTE: Final = 0x45545257
A_AUTH: Final = 0x48545541
A_STLS: Final = 0x534C5453

COMMAND_NAMES: Final = {
    A_SYNC: "SYNC",
    A_CNXN: "CNXN",
    A_OPEN: "OPEN",
    A_OKAY: "OKAY",
    A_CLSE: "CLSE",
    A_WRTE: "WRTE",
    A_AUTH: "AUTH",
    A_STLS: "STLS",
}

#: The original protocol version: payloads carry a byte-sum checksum.
VERSION_CHECKSUMMED: Final = 0x01000000
#: From this version on, peers skip the checksum (adbd's ``A_VERSION_SKIP_CHECKSUM``).
VERSION_SKIP_CHECKSUM: Final = 0x01000001
#: The highest version this daemon speaks (sent in its CNXN, as adbd does).
DEVICE_VERSION: Final = VERSION_SKIP_CHECKSUM

#: Before CNXN, payloads are limited to the legacy size (adbd's ``MAX_PAYLOAD_V1``).
MAX_PAYLOAD_V1: Final = 4 * 1024
#: The most this daemon ever accepts in one packet (adbd's ``MAX_PAYLOAD``).
MAX_PAYLOAD: Final = 1024 * 1024

AUTH_TOKEN: Final = 1
AUTH_SIGNATURE: Final = 2
AUTH_RSAPUBLICKEY: Final = 3
TOKEN_SIZE: Final = 20


class MalformedPacket(Exception):
    """A header that no honest peer would send: the connection carrying it is closed."""


def checksum(data: bytes) -> int:
    """Return the legacy byte-sum checksum of ``data``, modulo 2**32."""
    return sum(data) & 0xFFFFFFFF


@attrs.frozen(kw_only=True)
class Header:
    """A decoded, not yet trusted packet header."""

    #: The command word (``A_CNXN``, ``A_OPEN``...).
    command: int
    #: First argument (usually the sender's stream id).
    arg0: int
    #: Second argument (usually the receiver's stream id).
    arg1: int
    #: Length of the payload that follows.
    data_length: int
    #: Byte-sum checksum of the payload (0 when the peer skips checksums).
    data_check: int
    #: ``command ^ 0xffffffff``.
    magic: int

    @property
    def name(self) -> str:
        """The command's four-letter name, or its hex value when unknown."""
        return COMMAND_NAMES.get(self.command, f"0x{self.command:08x}")


def decode_header(raw: bytes, max_payload: int) -> Header:
    """Decode and validate a 24-byte header before any payload is read.

    Raises:
        MalformedPacket: bad magic, unknown command, or a payload longer than ``max_payload``
            (checked here so a hostile length is never allocated).
    """
    command, arg0, arg1, data_length, data_check, magic = HEADER.unpack(raw)
    header = Header(
        command=command,
        arg0=arg0,
        arg1=arg1,
        data_length=data_length,
        data_check=data_check,
        magic=magic,
    )
    if magic != command ^ 0xFFFFFFFF:
        raise MalformedPacket(f"invalid magic 0x{magic:08x} for command 0x{command:08x}")
    if command not in COMMAND_NAMES:
        raise MalformedPacket(f"unknown command 0x{command:08x}")
    if data_length > max_payload:
        raise MalformedPacket(f"payload of {data_length} bytes exceeds max payload {max_payload}")
    return header


def encode_packet(
    command: int, arg0: int, arg1: int, payload: bytes, *, with_checksum: bool
) -> bytes:
    """Return one packet (header and payload) ready for the socket."""
    data_check = checksum(payload) if with_checksum else 0
    header = HEADER.pack(command, arg0, arg1, len(payload), data_check, command ^ 0xFFFFFFFF)
    return header + payload
