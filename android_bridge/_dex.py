"""Reading a class's static constants out of a DEX file, or out of the jar that holds it.

A phone's framework carries facts that cannot be read at an AOSP tag here: the transaction
codes of ``com.android.internal.telephony.ISms$Stub`` (``TRANSACTION_sendTextForSubscriber``
and the rest) are ``static final int`` fields of the AIDL stub, and d8 writes a class's
primitive constants into the DEX as its ``static_values`` array. This module reads exactly
that, and nothing it cannot read exactly: any file it does not understand (another version,
a truncated or altered file, an offset out of range, a value of another type) is refused
with :class:`DexUnreadable` and the reason, never guessed around. Pure: bytes in, values
out; pulling the jar from the phone is the caller's business.

The format is the DEX format as documented by AOSP ("Dalvik executable format",
source.android.com/docs/core/runtime/dex-format): the ``header_item`` (its magic, the
Adler-32 ``checksum`` of everything after it, ``file_size``, ``endian_tag`` and the sizes
and offsets of the id tables), ``string_id_item`` / ``string_data_item`` (a ``uleb128``
UTF-16 length and MUTF-8 bytes ending in a NUL), ``type_id_item``, ``field_id_item``
(``class_idx``, ``type_idx``, ``name_idx``), ``class_def_item`` (``class_data_off`` and
``static_values_off``), ``class_data_item`` (``uleb128`` counts, then ``encoded_field``
entries whose ``field_idx_diff`` accumulate), and ``encoded_array_item`` / ``encoded_value``
(a byte ``(value_arg << 5) | value_type``, then ``value_arg + 1`` little-endian bytes,
sign-extended for ``VALUE_BYTE``/``SHORT``/``INT``/``LONG``). Static fields with no entry
in ``static_values`` (the array may be shorter than the fields) hold their type's default,
0 for an ``int``.

Versions 035 to 040 are read. Version 041 (the container format, a header of 0x78 bytes
whose offsets may be relative to a container) is refused rather than read as if it were
the older layout.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping

from android_bridge.exceptions import BridgeError

__all__ = ["DexUnreadable", "jar_static_ints", "static_ints"]

#: The versions whose layout this reader knows (the magic is ``dex\\n`` + version + NUL).
_VERSIONS = frozenset({b"035", b"036", b"037", b"038", b"039", b"040"})
_HEADER_SIZE = 0x70
_ENDIAN_CONSTANT = 0x12345678
_NO_INDEX = 0xFFFFFFFF
_ACC_STATIC = 0x0008

# encoded_value types (value_type, the low five bits)
_VALUE_BYTE = 0x00
_VALUE_SHORT = 0x02
_VALUE_CHAR = 0x03
_VALUE_INT = 0x04
_VALUE_LONG = 0x06
_VALUE_FLOAT = 0x10
_VALUE_DOUBLE = 0x11
_VALUE_METHOD_TYPE = 0x15
_VALUE_METHOD_HANDLE = 0x16
_VALUE_STRING = 0x17
_VALUE_TYPE = 0x18
_VALUE_FIELD = 0x19
_VALUE_METHOD = 0x1A
_VALUE_ENUM = 0x1B
_VALUE_ARRAY = 0x1C
_VALUE_ANNOTATION = 0x1D
_VALUE_NULL = 0x1E
_VALUE_BOOLEAN = 0x1F

#: Types whose value is ``value_arg + 1`` bytes after the type byte, with the largest size.
_SIZED = {
    _VALUE_BYTE: 1,
    _VALUE_SHORT: 2,
    _VALUE_CHAR: 2,
    _VALUE_INT: 4,
    _VALUE_LONG: 8,
    _VALUE_FLOAT: 4,
    _VALUE_DOUBLE: 8,
    _VALUE_METHOD_TYPE: 4,
    _VALUE_METHOD_HANDLE: 4,
    _VALUE_STRING: 4,
    _VALUE_TYPE: 4,
    _VALUE_FIELD: 4,
    _VALUE_METHOD: 4,
    _VALUE_ENUM: 4,
}
#: The sized types whose value is a signed integer.
_SIGNED = frozenset({_VALUE_BYTE, _VALUE_SHORT, _VALUE_INT, _VALUE_LONG})

#: Jars bigger than this are not read (a framework jar is tens of MB; this bounds memory).
MAX_JAR_BYTES = 256 * 1024 * 1024


class DexUnreadable(BridgeError):
    """A DEX file (or a jar) this reader cannot read exactly; the message says why."""


class _Reader:
    """Bounds-checked little-endian reads over one DEX file's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def need(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise DexUnreadable(
                f"{what} at offset {offset} (+{size}) lies outside the file"
                f" ({len(self.data)} bytes)"
            )

    def u16(self, offset: int, what: str) -> int:
        self.need(offset, 2, what)
        return int(struct.unpack_from("<H", self.data, offset)[0])

    def u32(self, offset: int, what: str) -> int:
        self.need(offset, 4, what)
        return int(struct.unpack_from("<I", self.data, offset)[0])

    def uleb128(self, offset: int, what: str) -> tuple[int, int]:
        """The value at ``offset`` and the offset after it (at most five bytes, 32 bits)."""
        value = 0
        for index in range(5):
            self.need(offset + index, 1, what)
            byte = self.data[offset + index]
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    raise DexUnreadable(f"{what} at offset {offset}: a uleb128 over 32 bits")
                return value, offset + index + 1
        raise DexUnreadable(f"{what} at offset {offset}: a uleb128 longer than five bytes")


def _mutf8(data: bytes, what: str) -> str:
    """MUTF-8 (Java's modified UTF-8: NUL as C0 80, supplementary characters as surrogate
    pairs) decoded; descriptors and names in practice are ASCII."""
    try:
        return data.replace(b"\xc0\x80", b"\x00").decode("utf-8", errors="surrogatepass")
    except UnicodeDecodeError as exc:
        raise DexUnreadable(f"{what}: not MUTF-8 ({exc.reason})") from exc


class _Dex:
    """One DEX file's header and id tables, read on demand."""

    def __init__(self, data: bytes) -> None:
        self.read = _Reader(data)
        self._check_header(data)
        header = struct.unpack_from("<14I", data, 0x38)
        (
            self.string_ids_size,
            self.string_ids_off,
            self.type_ids_size,
            self.type_ids_off,
            _proto_ids_size,
            _proto_ids_off,
            self.field_ids_size,
            self.field_ids_off,
            _method_ids_size,
            _method_ids_off,
            self.class_defs_size,
            self.class_defs_off,
        ) = header[:12]
        self.read.need(self.string_ids_off, 4 * self.string_ids_size, "string_ids")
        self.read.need(self.type_ids_off, 4 * self.type_ids_size, "type_ids")
        self.read.need(self.field_ids_off, 8 * self.field_ids_size, "field_ids")
        self.read.need(self.class_defs_off, 32 * self.class_defs_size, "class_defs")

    @staticmethod
    def _check_header(data: bytes) -> None:
        if len(data) < _HEADER_SIZE:
            raise DexUnreadable(f"{len(data)} bytes: shorter than a DEX header")
        magic = data[:8]
        if magic[:4] != b"dex\n" or magic[7:8] != b"\x00":
            raise DexUnreadable("not a DEX file (no dex magic)")
        if magic[4:7] not in _VERSIONS:
            version = magic[4:7].decode("ascii", errors="replace")
            raise DexUnreadable(f"DEX version {version} is not one this reader knows (035-040)")
        checksum, file_size, header_size, endian = (
            struct.unpack_from("<I", data, 8)[0],
            *struct.unpack_from("<III", data, 32),
        )
        if endian != _ENDIAN_CONSTANT:
            raise DexUnreadable(f"endian_tag {endian:#x}: not a little-endian DEX file")
        if header_size != _HEADER_SIZE:
            raise DexUnreadable(f"header_size {header_size:#x}, not {_HEADER_SIZE:#x}")
        if file_size != len(data):
            raise DexUnreadable(f"file_size says {file_size} bytes; the file has {len(data)}")
        if zlib.adler32(data[12:]) != checksum:
            raise DexUnreadable("the checksum does not match: the file is damaged or altered")

    def string(self, index: int) -> str:
        if not 0 <= index < self.string_ids_size:
            raise DexUnreadable(f"string index {index} out of range ({self.string_ids_size})")
        offset = self.read.u32(self.string_ids_off + 4 * index, "string_id_item")
        _utf16_size, start = self.read.uleb128(offset, "string_data_item")
        end = self.read.data.find(b"\x00", start)
        if end < 0:
            raise DexUnreadable(f"string_data_item at offset {offset} has no terminating NUL")
        return _mutf8(self.read.data[start:end], f"string {index}")

    def type_descriptor(self, index: int) -> str:
        if not 0 <= index < self.type_ids_size:
            raise DexUnreadable(f"type index {index} out of range ({self.type_ids_size})")
        return self.string(self.read.u32(self.type_ids_off + 4 * index, "type_id_item"))

    def field(self, index: int) -> tuple[int, str, str]:
        """The field's class type index, its type descriptor and its name."""
        if not 0 <= index < self.field_ids_size:
            raise DexUnreadable(f"field index {index} out of range ({self.field_ids_size})")
        offset = self.field_ids_off + 8 * index
        class_idx = self.read.u16(offset, "field_id_item")
        type_idx = self.read.u16(offset + 2, "field_id_item")
        name_idx = self.read.u32(offset + 4, "field_id_item")
        return class_idx, self.type_descriptor(type_idx), self.string(name_idx)

    def class_defs(self) -> Iterator[tuple[int, int, int]]:
        """Each class: its type index, ``class_data_off`` and ``static_values_off``."""
        for number in range(self.class_defs_size):
            offset = self.class_defs_off + 32 * number
            yield (
                self.read.u32(offset, "class_def_item"),
                self.read.u32(offset + 24, "class_def_item"),
                self.read.u32(offset + 28, "class_def_item"),
            )

    def static_fields(self, class_data_off: int) -> list[int]:
        """The field indices of a class's static fields, in ``class_data_item`` order."""
        static_size, at = self.read.uleb128(class_data_off, "class_data_item")
        for _ in range(3):  # instance_fields_size, direct_methods_size, virtual_methods_size
            _count, at = self.read.uleb128(at, "class_data_item")
        indices = []
        field_idx = 0
        for _ in range(static_size):
            diff, at = self.read.uleb128(at, "encoded_field")
            flags, at = self.read.uleb128(at, "encoded_field")
            field_idx += diff
            if not flags & _ACC_STATIC:
                raise DexUnreadable(f"static field {field_idx} lacks ACC_STATIC ({flags:#x})")
            indices.append(field_idx)
        return indices

    def encoded_array(self, offset: int) -> list[tuple[int, int | None]]:
        """Each value of an ``encoded_array``: its type and, for the integer types, its value
        (None for the others, which this reader skips over without reading)."""
        size, at = self.read.uleb128(offset, "encoded_array")
        values = []
        for _ in range(size):
            value, at = self._encoded_value(at)
            values.append(value)
        return values

    def _encoded_value(self, at: int) -> tuple[tuple[int, int | None], int]:
        self.read.need(at, 1, "encoded_value")
        head = self.read.data[at]
        value_type, value_arg = head & 0x1F, head >> 5
        at += 1
        if value_type in _SIZED:
            width = value_arg + 1
            if width > _SIZED[value_type]:
                raise DexUnreadable(f"encoded_value type {value_type:#x} of {width} bytes")
            self.read.need(at, width, "encoded_value")
            raw = self.read.data[at : at + width]
            number: int | None = None
            if value_type in _SIGNED:
                number = int.from_bytes(raw, "little", signed=True)
            elif value_type == _VALUE_CHAR:
                number = int.from_bytes(raw, "little")
            return (value_type, number), at + width
        if value_type in (_VALUE_NULL, _VALUE_BOOLEAN):
            if value_type == _VALUE_NULL and value_arg:
                raise DexUnreadable(f"VALUE_NULL with value_arg {value_arg}")
            if value_arg > 1:
                raise DexUnreadable(f"VALUE_BOOLEAN with value_arg {value_arg}")
            return (value_type, value_arg if value_type == _VALUE_BOOLEAN else None), at
        if value_arg:
            raise DexUnreadable(f"encoded_value type {value_type:#x} with value_arg {value_arg}")
        if value_type == _VALUE_ARRAY:
            size, at = self.read.uleb128(at, "encoded_array")
            for _ in range(size):
                _value, at = self._encoded_value(at)
            return (value_type, None), at
        if value_type == _VALUE_ANNOTATION:
            _type_idx, at = self.read.uleb128(at, "encoded_annotation")
            size, at = self.read.uleb128(at, "encoded_annotation")
            for _ in range(size):
                _name_idx, at = self.read.uleb128(at, "annotation_element")
                _value, at = self._encoded_value(at)
            return (value_type, None), at
        raise DexUnreadable(f"encoded_value type {value_type:#x} is not in the DEX format")


def static_ints(dex: bytes, descriptor: str) -> Mapping[str, int] | None:
    """The ``int`` static fields of the class ``descriptor`` (``Lcom/example/Foo$Stub;``)
    defined in ``dex``, by name, with their values (0 for a field ``static_values`` leaves
    out), or None when ``dex`` does not define that class.

    Raises:
        DexUnreadable: ``dex`` is not a DEX file this reader can read exactly (another
            version, a damaged file, an offset out of range, a constant of an ``int`` field
            whose encoded type is not an integer).
    """
    parsed = _Dex(dex)
    for class_idx, class_data_off, static_values_off in parsed.class_defs():
        if parsed.type_descriptor(class_idx) != descriptor:
            continue
        if class_data_off == 0:
            return {}
        fields = parsed.static_fields(class_data_off)
        values = parsed.encoded_array(static_values_off) if static_values_off else []
        if len(values) > len(fields):
            raise DexUnreadable(
                f"{descriptor}: {len(values)} static values for {len(fields)} static fields"
            )
        found: dict[str, int] = {}
        for position, field_idx in enumerate(fields):
            owner, field_type, name = parsed.field(field_idx)
            if owner != class_idx:
                raise DexUnreadable(f"{descriptor}: static field {name} belongs to another class")
            if field_type != "I":
                continue
            if position >= len(values):
                found[name] = 0
                continue
            value_type, number = values[position]
            if value_type not in (_VALUE_BYTE, _VALUE_SHORT, _VALUE_CHAR, _VALUE_INT):
                raise DexUnreadable(
                    f"{descriptor}.{name}: an int field whose value has type {value_type:#x}"
                )
            assert number is not None
            found[name] = number
        return found
    return None


def jar_static_ints(jar: bytes, descriptor: str) -> Mapping[str, int] | None:
    """:func:`static_ints` over every ``classes*.dex`` of a jar (a zip file), in the order
    the runtime loads them (``classes.dex``, ``classes2.dex``, …): the first that defines
    the class answers. None when no DEX in the jar defines it (or the jar holds no DEX: a
    jar stripped of its code, whose classes live in an odex/vdex beside it).

    Raises:
        DexUnreadable: the jar is not a zip file this reader can open, is too big, or a DEX
            in it that must be read cannot be read exactly.
    """
    if len(jar) > MAX_JAR_BYTES:
        raise DexUnreadable(f"the jar is {len(jar)} bytes, over {MAX_JAR_BYTES}")
    try:
        with zipfile.ZipFile(io.BytesIO(jar)) as archive:
            names = [name for name in archive.namelist() if _dex_number(name) is not None]
            for name in sorted(names, key=lambda name: _dex_number(name) or 0):
                info = archive.getinfo(name)
                if info.file_size > MAX_JAR_BYTES:
                    raise DexUnreadable(f"{name} is {info.file_size} bytes, over {MAX_JAR_BYTES}")
                found = static_ints(archive.read(name), descriptor)
                if found is not None:
                    return found
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,  # zipfile's answer to a compression method it does not know
        EOFError,
        zlib.error,
    ) as exc:
        raise DexUnreadable(f"not a jar this reader can open: {exc}") from exc
    return None


def _dex_number(name: str) -> int | None:
    """1 for ``classes.dex``, N for ``classesN.dex`` (N ≥ 2), None for any other name."""
    if name == "classes.dex":
        return 1
    middle = name.removeprefix("classes").removesuffix(".dex")
    if name.startswith("classes") and name.endswith(".dex") and middle.isdigit():
        number = int(middle)
        if number >= 2 and str(number) == middle:
            return number
    return None
