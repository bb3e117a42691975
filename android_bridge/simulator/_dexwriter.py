"""Writing small, valid DEX files: classes with static constants, as d8 writes them.

The simulated phone will serve a framework jar whose DEX defines ``ISms$Stub`` with each
release's transaction codes, and the tests check the bridge's DEX reader against files no
one checked in: both are built here, from the DEX format as AOSP documents it ("Dalvik
executable format", source.android.com/docs/core/runtime/dex-format). What is written:

- the ``header_item`` with its SHA-1 ``signature`` (of everything after it) and Adler-32
  ``checksum`` (of everything after the checksum), ``file_size``, ``endian_tag``;
- ``string_ids`` sorted by the strings' UTF-16 code points, ``type_ids`` sorted by their
  string index, ``field_ids`` sorted by (class, name, type) indices, as the format requires;
- one ``class_def_item`` per class (public, extending ``java.lang.Object``), its
  ``class_data_item`` (static fields only, ``field_idx_diff`` encoded), and its
  ``encoded_array_item`` of static values in field order, the trailing default values left
  out as d8 leaves them out (``omit_trailing_defaults``);
- integers as ``VALUE_INT`` in the fewest bytes that hold them sign-extended, strings as
  ``VALUE_STRING``;
- the ``map_list`` every DEX file ends its data with.

Only what the reader and the simulator need: no methods, no code, no annotations.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Mapping

__all__ = ["PLATFORM_DEX_VERSION", "build_dex", "uleb128"]

_ACC_PUBLIC = 0x0001
_ACC_STATIC = 0x0008
_ACC_FINAL = 0x0010
_NO_INDEX = 0xFFFFFFFF
_OBJECT = "Ljava/lang/Object;"
_STRING = "Ljava/lang/String;"
_VALUE_INT = 0x04
_VALUE_STRING = 0x17

# map_item type codes
_TYPE_HEADER = 0x0000
_TYPE_STRING_ID = 0x0001
_TYPE_TYPE_ID = 0x0002
_TYPE_FIELD_ID = 0x0004
_TYPE_CLASS_DEF = 0x0006
_TYPE_MAP_LIST = 0x1000
_TYPE_CLASS_DATA = 0x2000
_TYPE_STRING_DATA = 0x2002
_TYPE_ENCODED_ARRAY = 0x2005


def uleb128(value: int) -> bytes:
    """``value`` (0 to 2**32 - 1) as unsigned LEB128."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"uleb128 holds 32 bits; got {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _utf16_key(text: str) -> list[int]:
    """The order string_ids must follow: UTF-16 code units."""
    encoded = text.encode("utf-16-le", errors="surrogatepass")
    return [int.from_bytes(encoded[i : i + 2], "little") for i in range(0, len(encoded), 2)]


def _mutf8(text: str) -> bytes:
    """Java's modified UTF-8: NUL as C0 80, characters beyond the BMP as surrogate pairs."""
    units = text.encode("utf-16-le", errors="surrogatepass")
    out = bytearray()
    for i in range(0, len(units), 2):
        unit = int.from_bytes(units[i : i + 2], "little")
        if unit == 0:
            out += b"\xc0\x80"
        elif unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes([0xC0 | unit >> 6, 0x80 | unit & 0x3F])
        else:
            out += bytes([0xE0 | unit >> 12, 0x80 | (unit >> 6) & 0x3F, 0x80 | unit & 0x3F])
    return bytes(out)


def _encoded_int(value: int) -> bytes:
    """``value`` as a ``VALUE_INT`` in the fewest little-endian bytes that hold it."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"an int constant holds 32 bits; got {value}")
    for width in range(1, 5):
        if -(2 ** (8 * width - 1)) <= value < 2 ** (8 * width - 1):
            return bytes([(width - 1) << 5 | _VALUE_INT]) + value.to_bytes(
                width, "little", signed=True
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _encoded_string(index: int) -> bytes:
    width = max(1, (index.bit_length() + 7) // 8)
    return bytes([(width - 1) << 5 | _VALUE_STRING]) + index.to_bytes(width, "little")


#: The DEX version d8 writes for the platform on Android 10 to 15 (API 28 to 35 and the
#: platform's "future" level all map to 039 in d8's DexVersion, read in r8's source; the
#: container format, 041, starts at API 36).
PLATFORM_DEX_VERSION = "039"


def build_dex(
    classes: Mapping[str, Mapping[str, int | str]],
    *,
    omit_trailing_defaults: bool = True,
    version: str = PLATFORM_DEX_VERSION,
) -> bytes:
    """A DEX file (``version``: 035 to 039; the layout is the same) defining each class of
    ``classes`` (descriptor -> its ``static final`` fields, name -> an ``int`` or a
    ``String`` value)."""
    if version not in ("035", "037", "038", "039"):
        raise ValueError(f"this writer writes DEX 035 to 039; got {version!r}")
    strings = {_OBJECT, *classes}
    types = {_OBJECT, *classes}
    for fields in classes.values():
        for name, value in fields.items():
            strings.add(name)
            descriptor = "I" if isinstance(value, int) else _STRING
            strings.add(descriptor)
            types.add(descriptor)
            if isinstance(value, str):
                strings.add(value)
    string_list = sorted(strings, key=_utf16_key)
    string_index = {text: number for number, text in enumerate(string_list)}
    type_list = sorted(types, key=lambda descriptor: string_index[descriptor])
    type_index = {descriptor: number for number, descriptor in enumerate(type_list)}
    field_list = sorted(
        (
            type_index[owner],
            string_index[name],
            type_index["I" if isinstance(value, int) else _STRING],
            value,
        )
        for owner, fields in classes.items()
        for name, value in fields.items()
    )
    class_list = sorted(classes, key=lambda descriptor: type_index[descriptor])

    header_size = 0x70
    string_ids_off = header_size
    type_ids_off = string_ids_off + 4 * len(string_list)
    field_ids_off = type_ids_off + 4 * len(type_list)
    class_defs_off = field_ids_off + 8 * len(field_list)
    data_off = class_defs_off + 32 * len(class_list)

    data = bytearray()
    string_offsets = []
    for text in string_list:
        string_offsets.append(data_off + len(data))
        data += uleb128(len(_utf16_key(text))) + _mutf8(text) + b"\x00"
    class_data_offsets: dict[str, int] = {}
    for descriptor in class_list:
        own = [
            (number, field)
            for number, field in enumerate(field_list)
            if field[0] == type_index[descriptor]
        ]
        if not own:
            continue
        class_data_offsets[descriptor] = data_off + len(data)
        data += uleb128(len(own)) + uleb128(0) + uleb128(0) + uleb128(0)
        previous = 0
        for number, _field in own:
            data += uleb128(number - previous) + uleb128(_ACC_PUBLIC | _ACC_STATIC | _ACC_FINAL)
            previous = number
    array_offsets: dict[str, int] = {}
    for descriptor in class_list:
        values = [field[3] for field in field_list if field[0] == type_index[descriptor]]
        if omit_trailing_defaults:
            while values and values[-1] == 0:
                values.pop()
        if not values:
            continue
        array_offsets[descriptor] = data_off + len(data)
        data += uleb128(len(values))
        for value in values:
            data += (
                _encoded_int(value)
                if isinstance(value, int)
                else _encoded_string(string_index[value])
            )
    while (data_off + len(data)) % 4:
        data += b"\x00"
    map_off = data_off + len(data)
    sections = [
        (_TYPE_HEADER, 1, 0),
        (_TYPE_STRING_ID, len(string_list), string_ids_off),
        (_TYPE_TYPE_ID, len(type_list), type_ids_off),
        (_TYPE_FIELD_ID, len(field_list), field_ids_off),
        (_TYPE_CLASS_DEF, len(class_list), class_defs_off),
        (_TYPE_STRING_DATA, len(string_list), string_offsets[0] if string_offsets else 0),
        (_TYPE_CLASS_DATA, len(class_data_offsets), min(class_data_offsets.values(), default=0)),
        (_TYPE_ENCODED_ARRAY, len(array_offsets), min(array_offsets.values(), default=0)),
        (_TYPE_MAP_LIST, 1, map_off),
    ]
    items = sorted((s for s in sections if s[1]), key=lambda section: section[2])
    data += struct.pack("<I", len(items))
    for section, count, start in items:
        data += struct.pack("<HHII", section, 0, count, start)

    body = bytearray()
    for offset in string_offsets:
        body += struct.pack("<I", offset)
    for descriptor in type_list:
        body += struct.pack("<I", string_index[descriptor])
    for owner, name_idx, type_idx, _value in field_list:
        body += struct.pack("<HHI", owner, type_idx, name_idx)
    for descriptor in class_list:
        body += struct.pack(
            "<8I",
            type_index[descriptor],
            _ACC_PUBLIC,
            type_index[_OBJECT] if descriptor != _OBJECT else _NO_INDEX,
            0,
            _NO_INDEX,
            0,
            class_data_offsets.get(descriptor, 0),
            array_offsets.get(descriptor, 0),
        )
    file_size = header_size + len(body) + len(data)
    tables = struct.pack(
        "<14I",
        len(string_list),
        string_ids_off,
        len(type_list),
        type_ids_off,
        0,
        0,
        len(field_list),
        field_ids_off if field_list else 0,
        0,
        0,
        len(class_list),
        class_defs_off,
        len(data),
        data_off,
    )
    # file_size, header_size, endian_tag, link_size, link_off, map_off: 6 uints, then the tables
    after_signature = struct.pack("<6I", file_size, header_size, 0x12345678, 0, 0, map_off) + tables
    rest = after_signature + bytes(body) + bytes(data)
    signature = hashlib.sha1(rest, usedforsecurity=False).digest()
    checksum = zlib.adler32(signature + rest)
    return b"dex\n" + version.encode() + b"\x00" + struct.pack("<I", checksum) + signature + rest
