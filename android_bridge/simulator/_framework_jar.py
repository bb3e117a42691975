"""``/system/framework/framework.jar``: the jar whose DEX defines ``ISms$Stub``, and the two
toybox tools the bridge reads it with (``stat -c %s`` and ``base64``).

What is modelled, and where it comes from:

* **Which jar.** ``ISms.aidl`` lives in frameworks/base ``telephony/java``, compiled into
  the boot jar installed as ``/system/framework/framework.jar`` on Android 10 to 15: the
  ``framework`` module on 10 (build/make ``target/product/base_system.mk``
  ``PRODUCT_BOOT_JARS``, android-10.0.0_r1), ``framework-minus-apex`` with ``stem:
  "framework"`` from 11 (``base_system.mk`` at android-11.0.0_r1; ``default_art_config.mk``
  at 12.0.0_r1, 13.0.0_r1, 14.0.0_r1, 15.0.0_r1; frameworks/base ``Android.bp`` read at
  android-12.1.0_r4 only). No telephony APEX carries it at these tags.
* **Its DEX is there, stored.** build/soong ``java/java.go`` ``shouldUncompressDex``:
  "Store uncompressed (and do not strip) dex files from boot class path jars" (read at the
  soong commits of android-10.0.0_r31, 11.0.0_r32, 12.0.0_r18, 13.0.0_r11, 14.0.0_r11, and
  LineageOS lineage-22.0 for 15). An OEM build may still strip it (the classes then live
  only in an odex/vdex beside it): the ``stripped`` configuration.
* **Readable by the shell.** system/core ``libcutils/fs_config.cpp``: ``system/framework/*``
  is 00644 root root (read at a recent commit, not at each tag; SELinux normally lets the
  shell read ``system_file``, not verified): the ``no-read-permission`` configuration makes
  it 0600, as a stricter vendor policy would refuse it.
* **The constants.** The AIDL compiler writes ``static final int TRANSACTION_<method> =
  (android.os.IBinder.FIRST_CALL_TRANSACTION + n)`` (n the 0-based declaration order,
  ``FIRST_CALL_TRANSACTION`` 1), which d8 stores in the class's ``static_values``. The
  order of the first methods of ``ISms.aidl``: read at android-12.1.0_r4 (11 to 15, the
  same first nine in ``ISmsImplBase`` of the 13, 14 and 15 SDK jars and the decompiled
  Android 14 Beta 1 framework: ``sendTextForSubscriber`` 5, ``sendMultipartTextForSubscriber``
  8); for Android 10, ``sendTextForSubscriber`` 6 as ``_isms`` read it at
  android-10.0.0_r1, ``sendMultipartTextForSubscriber`` 10 inferred, not read at its tag
  (the two ``…WithSelfPermissions`` methods before them), which is why the phone's own jar,
  not this table, is what the bridge trusts. The constants are
  built from :func:`android_bridge.simulator._isms.send_text_layout`, so the jar always
  proves the codes the simulated ``isms`` service answers to; ``vendor-reordered`` inserts
  one method before them in both (an OEM's ``ISms``: the AOSP table is then wrong).
* **The DEX version**: 039 (d8 at min-api 29 to 35; see ``_dexwriter``). ``dex041`` is a
  jar whose DEX has the container format of Android 16, which the reader refuses.
* **toybox** (``toys/other/stat.c`` and ``toys/other/base64.c``, LineageOS
  ``android_external_toybox`` ``lineage-17.1`` (0.8.0) and ``lineage-18.1``, both in
  Android's toybox symlinks; built ``-funsigned-char``, so bytes over 0x7f encode right):
  ``stat [-L] -c FORMAT FILE`` (``-L``: ``stat``, not ``lstat``) prints the format with
  ``%s`` (size), ``%n`` (the name), ``%a`` (octal mode), ``%u``/``%g`` and ``%%``, then a
  newline; a file it cannot ``lstat`` (``stat``) prints
  ``stat: 'FILE': <strerror>``, status 1 (``perror_msg("'%s'")``). ``base64 [-w N] FILE``
  prints the encoding wrapped every N columns (76 by default), then a newline unless the
  last line was just ended; with ``-w 0`` no wrapping and no final newline (``wraputchar``
  counts columns only when wrapping). A file it cannot open prints ``base64: FILE:
  <strerror>``, status 1 (``loopfiles``' ``perror_msg_raw``). Both are refused with a
  "not modelled" error for any other option.

Nothing else of ``/system`` is modelled: ``stat`` and ``base64`` of other paths go to the
phone's file tree (``_files``), where ``/system`` does not exist.
"""

from __future__ import annotations

import base64 as base64_codec
import functools
import io
import posixpath
import zipfile
from collections.abc import Callable
from typing import Final, Literal, get_args

from android_bridge.simulator._dexwriter import build_dex
from android_bridge.simulator._files import (
    EACCES,
    ENOENT,
    STRERROR,
    FileCommands,
    FsError,
)
from android_bridge.simulator._isms import send_text_layout
from android_bridge.simulator._shell import CommandFn, Output

__all__ = [
    "FRAMEWORK_JAR",
    "FRAMEWORK_JAR_KINDS",
    "ISMS_STUB",
    "FrameworkJarKind",
    "SystemImage",
    "framework_jar",
    "isms_stub_constants",
]

#: Where the boot jar holding ``ISms$Stub`` is installed on 10 to 15.
FRAMEWORK_JAR: Final = "/system/framework/framework.jar"
#: The AIDL stub's DEX type descriptor.
ISMS_STUB: Final = "Lcom/android/internal/telephony/ISms$Stub;"

#: How the simulated phone's framework jar is built (see the module docstring).
FrameworkJarKind = Literal[
    "aosp", "vendor-reordered", "stripped", "dex041", "no-stub", "no-read-permission", "missing"
]
FRAMEWORK_JAR_KINDS: Final = frozenset(get_args(FrameworkJarKind))

#: The first methods of ``ISms.aidl`` in declaration order (see the module docstring).
_ISMS_11_TO_15: Final = (
    "getAllMessagesFromIccEfForSubscriber",
    "updateMessageOnIccEfForSubscriber",
    "copyMessageToIccEfForSubscriber",
    "sendDataForSubscriber",
    "sendTextForSubscriber",
    "sendTextForSubscriberWithOptions",
    "injectSmsPduForSubscriber",
    "sendMultipartTextForSubscriber",
    "sendMultipartTextForSubscriberWithOptions",
)
_ISMS_10: Final = (
    "getAllMessagesFromIccEfForSubscriber",
    "updateMessageOnIccEfForSubscriber",
    "copyMessageToIccEfForSubscriber",
    "sendDataForSubscriber",
    "sendDataForSubscriberWithSelfPermissions",
    "sendTextForSubscriber",
    "sendTextForSubscriberWithSelfPermissions",
    "sendTextForSubscriberWithOptions",
    "injectSmsPduForSubscriber",
    "sendMultipartTextForSubscriber",
    "sendMultipartTextForSubscriberWithOptions",
)
#: The method an OEM's ``vendor-reordered`` ``ISms`` declares first.
_VENDOR_METHOD: Final = "getVendorSmsCapability"
_FILE_MODE: Final = 0o644


def isms_methods(version: int, kind: FrameworkJarKind = "aosp") -> tuple[str, ...]:
    """The first methods of the ``ISms`` of Android ``version``, in declaration order."""
    methods = _ISMS_10 if version == 10 else _ISMS_11_TO_15
    return (_VENDOR_METHOD, *methods) if kind == "vendor-reordered" else methods


def isms_stub_constants(version: int, kind: FrameworkJarKind = "aosp") -> dict[str, int]:
    """``ISms$Stub``'s ``TRANSACTION_*`` constants on Android ``version`` (``kind``: an
    AOSP build or a ``vendor-reordered`` one), checked against what the simulated ``isms``
    service answers to."""
    constants = {
        f"TRANSACTION_{method}": index + 1
        for index, method in enumerate(isms_methods(version, kind))
    }
    layout = send_text_layout(version)
    shift = 1 if kind == "vendor-reordered" else 0
    assert constants["TRANSACTION_sendTextForSubscriber"] == layout.code + shift
    assert constants["TRANSACTION_sendTextForSubscriberWithOptions"] == (
        layout.options_code + shift
    )
    return constants


@functools.cache
def framework_jar(version: int, kind: FrameworkJarKind = "aosp") -> bytes | None:
    """The bytes of the framework jar of Android ``version`` built as ``kind`` (None for
    ``missing``): a zip with a stored ``META-INF/MANIFEST.MF`` and, unless stripped,
    ``classes.dex`` to ``classes3.dex`` stored uncompressed, ``ISms$Stub`` in the second
    (framework.jar is a multidex jar; which DEX holds the class varies by build)."""
    if kind not in FRAMEWORK_JAR_KINDS:
        raise ValueError(f"not a framework jar configuration: {kind!r}")
    if kind == "missing":
        return None
    stub: dict[str, int | str] = {"DESCRIPTOR": "com.android.internal.telephony.ISms"}
    stub.update(isms_stub_constants(version, kind))
    first = {
        "Landroid/os/IBinder;": {"FIRST_CALL_TRANSACTION": 1, "LAST_CALL_TRANSACTION": 0xFFFFFF}
    }
    second: dict[str, dict[str, int | str]] = {
        "Landroid/telephony/SmsManager;": {"RESULT_ERROR_GENERIC_FAILURE": 1},
    }
    if kind != "no-stub":
        second[ISMS_STUB] = stub
    third = {"Lcom/android/internal/telephony/SmsConstants;": {"MAX_USER_DATA_SEPTETS": 160}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(
            zipfile.ZipInfo("META-INF/MANIFEST.MF", (2008, 1, 1, 0, 0, 0)),
            "Manifest-Version: 1.0\r\nCreated-By: soong_zip\r\n\r\n",
            compress_type=zipfile.ZIP_DEFLATED,
        )
        if kind != "stripped":
            for name, classes in (
                ("classes.dex", first),
                ("classes2.dex", second),
                ("classes3.dex", third),
            ):
                dex = build_dex(classes)
                if kind == "dex041" and name == "classes2.dex":
                    dex = b"dex\n041\0" + dex[8:]
                archive.writestr(zipfile.ZipInfo(name, (2008, 1, 1, 0, 0, 0)), dex)
    return buffer.getvalue()


class SystemImage:
    """The read-only ``/system`` files the simulator models (only the framework jar), and
    ``stat``/``base64`` over them and over the phone's file tree."""

    def __init__(self, version: Callable[[], int], kind: FrameworkJarKind) -> None:
        if kind not in FRAMEWORK_JAR_KINDS:
            raise ValueError(f"not a framework jar configuration: {kind!r}")
        self._version = version
        #: How this phone's framework jar is built.
        self.kind: FrameworkJarKind = kind

    def _file(self, path: str) -> tuple[bytes, int] | None:
        """(bytes, mode) of a modelled ``/system`` file; None when it is not one."""
        if posixpath.normpath(path) != FRAMEWORK_JAR:
            return None
        data = framework_jar(self._version(), self.kind)
        if data is None:
            return None
        return data, 0o600 if self.kind == "no-read-permission" else _FILE_MODE

    def commands(self, files: FileCommands) -> dict[str, CommandFn]:
        """``stat`` and ``base64`` as the process ``files`` describes runs them."""

        async def stat(argv: list[str], stdin: str) -> Output:
            return self._stat(files, argv)

        async def base64(argv: list[str], stdin: str) -> Output:
            return self._base64(files, argv)

        return {"stat": stat, "base64": base64}

    def _on_system(self, path: str) -> bool:
        return posixpath.normpath(path).startswith("/system/") or path.rstrip("/") == "/system"

    def _lookup(self, files: FileCommands, path: str, *, follow: bool) -> tuple[int, int, int, int]:
        """(size, mode, uid, gid) of ``path`` (``stat`` when ``follow``, else ``lstat``).

        Raises:
            FsError: as ``lstat(2)``.
        """
        found = self._file(path)
        if found is not None:
            return len(found[0]), found[1], 0, 0
        if self._on_system(path):
            raise FsError(ENOENT)
        if follow:
            info = files.tree.stat(files.cred, files.cwd, path)
        else:
            info = files.tree.lstat(files.cred, files.cwd, path)
        return info.size, info.mode, info.uid, info.gid

    def _read(self, files: FileCommands, path: str) -> bytes:
        """The bytes of ``path`` as ``open(2)`` and ``read(2)`` give them.

        Raises:
            FsError: as ``open(2)``.
        """
        found = self._file(path)
        if found is not None:
            data, mode = found
            if mode & 0o004 or files.cred.root:
                return data
            raise FsError(EACCES)
        if self._on_system(path):
            raise FsError(ENOENT)
        return files.tree.read(files.tree.open(files.cred, files.cwd, path, write=False))

    def _stat(self, files: FileCommands, argv: list[str]) -> Output:
        follow = argv[1:2] == ["-L"]
        args = argv[2:] if follow else argv[1:]
        if len(args) < 3 or args[0] != "-c":
            return Output.err("stat: only 'stat [-L] -c FORMAT FILE...' is modelled\n")
        fmt, names = args[1], args[2:]
        out: list[tuple[int, str]] = []
        status = 0
        for name in names:
            try:
                size, mode, uid, gid = self._lookup(files, name, follow=follow)
            except FsError as exc:
                out.append((2, f"stat: '{name}': {STRERROR.get(exc.errno, exc.errno)}\n"))
                status = 1
                continue
            fields = {"s": str(size), "n": name, "a": f"{mode:o}", "u": str(uid), "g": str(gid)}
            text, index = "", 0
            while index < len(fmt):
                char = fmt[index]
                if char != "%" or index + 1 >= len(fmt):
                    text += char
                    index += 1
                    continue
                escape = fmt[index + 1]
                if escape == "%":
                    text += "%"
                elif escape in fields:
                    text += fields[escape]
                else:
                    return Output.err(f"stat: %{escape} is not modelled by the simulator\n")
                index += 2
            out.append((1, text + "\n"))
        return Output(tuple(out), status)

    def _base64(self, files: FileCommands, argv: list[str]) -> Output:
        args = argv[1:]
        columns = 76
        if args[:1] == ["-w"] and len(args) >= 2 and args[1].isdigit():
            columns, args = int(args[1]), args[2:]
        elif args and args[0].startswith("-w") and args[0][2:].isdigit():
            columns, args = int(args[0][2:]), args[1:]
        if len(args) != 1 or args[0].startswith("-"):
            return Output.err("base64: only 'base64 [-w N] FILE' is modelled\n")
        name = args[0]
        try:
            data = self._read(files, name)
        except FsError as exc:
            return Output.err(f"base64: {name}: {STRERROR.get(exc.errno, exc.errno)}\n")
        encoded = base64_codec.b64encode(data).decode("ascii")
        if columns == 0:
            return Output.out(encoded)
        lines = [encoded[at : at + columns] for at in range(0, len(encoded), columns)]
        return Output.out("".join(line + "\n" for line in lines))
