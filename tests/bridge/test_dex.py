"""The DEX reader (android_bridge._dex) against DEX files built here (the simulator's
_dexwriter), with Android's own ``dexdump`` (Debian's build of AOSP ART's) as the judge of
what the writer writes: no DEX binary is checked in."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from android_bridge._dex import DexUnreadable, jar_static_ints, static_ints
from android_bridge.simulator._dexwriter import build_dex, uleb128

STUB = "Lcom/android/internal/telephony/ISms$Stub;"
#: The shape of an AIDL stub: the interface descriptor as a String constant and the
#: transaction codes (FIRST_CALL_TRANSACTION + n, FIRST_CALL_TRANSACTION being 1).
STUB_FIELDS: dict[str, int | str] = {
    "DESCRIPTOR": "com.android.internal.telephony.ISms",
    "TRANSACTION_getAllMessagesFromIccEfForSubscriber": 1,
    "TRANSACTION_sendTextForSubscriber": 6,
    "TRANSACTION_sendMultipartTextForSubscriber": 9,
}

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$", min_size=1)
descriptors = st.builds(
    lambda parts: "L" + "/".join(parts) + ";", st.lists(names, min_size=1, max_size=3)
)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
classes = st.dictionaries(
    descriptors,
    st.dictionaries(names, st.one_of(ints, ints, st.text(max_size=8)), max_size=6),
    min_size=1,
    max_size=4,
)


def expected_ints(fields: dict[str, int | str]) -> dict[str, int]:
    return {name: value for name, value in fields.items() if isinstance(value, int)}


def jar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def resealed(dex: bytearray) -> bytes:
    """``dex`` with its checksum made right again (after a deliberate change)."""
    struct.pack_into("<I", dex, 8, zlib.adler32(bytes(dex[12:])))
    return bytes(dex)


def test_the_stub_s_transaction_codes_are_read() -> None:
    dex = build_dex({STUB: STUB_FIELDS, "La/Other;": {"TRANSACTION_sendTextForSubscriber": 99}})
    assert {
        "TRANSACTION_getAllMessagesFromIccEfForSubscriber": 1,
        "TRANSACTION_sendTextForSubscriber": 6,
        "TRANSACTION_sendMultipartTextForSubscriber": 9,
    } == static_ints(dex, STUB)
    assert {"TRANSACTION_sendTextForSubscriber": 99} == static_ints(dex, "La/Other;")
    assert None is static_ints(dex, "Lcom/android/internal/telephony/ISms;")


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(classes, st.booleans(), st.sampled_from(["035", "037", "038", "039"]))
def test_every_class_s_int_constants_come_back(
    built: dict[str, dict[str, int | str]], omit: bool, version: str
) -> None:
    """Whatever the names, values and order, the version, and whether the trailing zeros
    are left out of static_values (as d8 does) or not, each class reads back its int
    constants exactly."""
    dex = build_dex(built, omit_trailing_defaults=omit, version=version)
    for descriptor, fields in built.items():
        assert expected_ints(fields) == static_ints(dex, descriptor)


dexdump = pytest.mark.skipif(
    shutil.which("dexdump") is None, reason="Debian's dexdump (AOSP ART) is not installed"
)


@dexdump
@settings(max_examples=25, deadline=None)
@given(classes)
def test_android_s_dexdump_reads_what_the_writer_writes(
    built: dict[str, dict[str, int | str]],
) -> None:
    """dexdump (which checks the checksum and the structure before it prints) reads each file
    and shows the same values the reader reads."""
    dex = build_dex(built)
    path = Path(f"/tmp/starebrain-dex-{zlib.crc32(dex):08x}.dex")
    path.write_bytes(dex)
    try:
        shown = subprocess.run(
            ["dexdump", "-f", str(path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            check=False,
        )
    finally:
        path.unlink()
    assert 0 == shown.returncode, shown.stderr
    assert "checksum" in shown.stdout
    for descriptor, fields in built.items():
        assert f"Class descriptor  : '{descriptor}'" in shown.stdout
        for name, value in expected_ints(fields).items():
            assert f"name          : '{name}'" in shown.stdout
            if value:
                assert f"value         : {value}\n" in shown.stdout


@dexdump
def test_dexdump_refuses_what_the_reader_refuses(tmp_path: Path) -> None:
    """A file with a wrong checksum: dexdump refuses it, and so does the reader."""
    dex = bytearray(build_dex({STUB: STUB_FIELDS}))
    dex[-1] ^= 0xFF
    path = tmp_path / "damaged.dex"
    path.write_bytes(dex)
    shown = subprocess.run(
        ["dexdump", "-f", str(path)], capture_output=True, text=True, check=False
    )
    assert 0 != shown.returncode
    with pytest.raises(DexUnreadable, match="checksum"):
        static_ints(bytes(dex), STUB)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda dex: dex[:50], "shorter than a DEX header"),
        (lambda dex: b"PK\x03\x04" + dex[4:], "no dex magic"),
        (lambda dex: dex[:4] + b"041" + dex[7:], "version 041"),
        (lambda dex: dex[:4] + b"03x" + dex[7:], "version 03x"),
        (lambda dex: dex + b"\x00", "file_size"),
        (lambda dex: dex[:-1] + bytes([dex[-1] ^ 1]), "checksum"),
    ],
    ids=["short", "magic", "container-041", "version", "size", "checksum"],
)
def test_a_file_it_cannot_read_exactly_is_refused_with_the_reason(change, reason: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DexUnreadable, match=reason):
        static_ints(change(build_dex({STUB: STUB_FIELDS})), STUB)


def test_an_offset_out_of_range_is_refused_not_followed() -> None:
    dex = bytearray(build_dex({STUB: STUB_FIELDS}))
    struct.pack_into("<I", dex, 100, len(dex) + 64)  # class_defs_off past the end
    with pytest.raises(DexUnreadable, match="class_defs"):
        static_ints(resealed(dex), STUB)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_damage_with_a_valid_checksum_is_read_or_refused_never_crashes(
    data: st.DataObject,
) -> None:
    """A byte changed anywhere past the header's checksum, the checksum made right again: the
    reader answers (a dict or None) or raises DexUnreadable, never another exception."""
    dex = bytearray(build_dex({STUB: STUB_FIELDS, "La/B;": {"X": -5, "Y": "y"}}))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(32, len(dex) - 1))
        dex[at] = data.draw(st.integers(0, 255))
    try:
        found = static_ints(resealed(dex), STUB)
    except DexUnreadable:
        return
    assert found is None or all(isinstance(value, int) for value in found.values())


def test_the_jar_s_dex_files_are_read_in_the_runtime_s_order() -> None:
    """classes.dex, then classes2.dex, classes3.dex…: the first that defines the class
    answers (a multidex framework jar); other entries are ignored."""
    first = build_dex({"La/A;": {"X": 1}})
    second = build_dex({STUB: STUB_FIELDS})
    third = build_dex({STUB: {"TRANSACTION_sendTextForSubscriber": 42}})
    archive = jar(
        {
            "META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n",
            "classes3.dex": third,
            "classes2.dex": second,
            "classes.dex": first,
            "classes02.dex": third,  # not a name the runtime loads
        }
    )
    assert 6 == (jar_static_ints(archive, STUB) or {})["TRANSACTION_sendTextForSubscriber"]
    assert {"X": 1} == jar_static_ints(archive, "La/A;")
    assert None is jar_static_ints(archive, "La/Missing;")


def test_a_jar_stripped_of_its_dex_proves_nothing() -> None:
    """A jar whose code lives in an odex/vdex beside it holds no classes.dex: None (the
    caller keeps its rule), not an error and not a guess."""
    assert None is jar_static_ints(jar({"META-INF/MANIFEST.MF": b"x"}), STUB)


def test_a_file_that_is_not_a_jar_is_refused() -> None:
    with pytest.raises(DexUnreadable, match="jar"):
        jar_static_ints(b"not a zip file at all", STUB)


def test_uleb128_matches_the_format_s_examples() -> None:
    """The examples of the DEX format's LEB128 section."""
    assert b"\x00" == uleb128(0)
    assert b"\x01" == uleb128(1)
    assert b"\x7f" == uleb128(127)
    assert b"\x80\x7f" == uleb128(16256)
