"""/system/framework/framework.jar on the simulated phone, read over the real ADB protocol
with toybox ``stat -c %s`` and ``base64``: a real zip whose DEX carries the transaction codes
the phone's own ``isms`` service answers to, and the configurations that make it unreadable.

Sources the simulator follows (its ``_framework_jar`` docstring has the detail): toybox
``toys/other/stat.c`` and ``toys/other/base64.c`` (0.8.0, LineageOS ``lineage-17.1``, and
``lineage-18.1``); system/core ``libcutils/fs_config.cpp`` (``system/framework/*`` 0644
root, read at a recent commit only); build/soong ``java.go`` ``shouldUncompressDex`` (boot
jars keep their DEX, android-10.0.0_r31 to 14.0.0_r11); frameworks/base ``ISms.aidl``
(read at android-12.1.0_r4) for the order the codes follow."""

from __future__ import annotations

import asyncio
import base64
import shlex
import signal
from pathlib import Path

import pytest
from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge._dex import DexUnreadable, jar_static_ints
from android_bridge.simulator._framework_jar import (
    FRAMEWORK_JAR,
    ISMS_STUB,
    framework_jar,
)
from tests.conftest import PhoneFactory
from tests.simulator.test_sim_cli import _LISTENING, _spawn
from tests.simulator.test_sim_isms import OK, call, shell

RELEASES = [10, 11, 12, 13, 14, 15]


async def _pull(phone_factory: PhoneFactory, signer: PythonRSASigner, **kwargs: object) -> str:
    phone = await phone_factory(**kwargs)
    return await shell(phone, signer, f"base64 {FRAMEWORK_JAR}; echo status=$?")


@pytest.mark.parametrize("version", RELEASES)
async def test_jar_pulled_with_base64_proves_the_codes_isms_answers(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """base64 of the jar decodes to a zip whose ISms$Stub constants are the release's
    sendTextForSubscriber code (6 on 10, 5 on 11-15) and multipart code (10 on 10, 8 on
    11-15), and the phone's isms service sends with exactly that code."""
    phone = await phone_factory(android=version)
    output = await shell(phone, adb_signer, f"base64 {FRAMEWORK_JAR}; echo status=$?")
    assert output.endswith("status=0\n")
    text = output.removesuffix("status=0\n")
    assert all(len(line) <= 76 for line in text.splitlines())
    jar = base64.b64decode("".join(text.split()), validate=True)
    constants = jar_static_ints(jar, ISMS_STUB)
    assert constants is not None
    expected = (6, 10) if version == 10 else (5, 8)
    assert expected == (
        constants["TRANSACTION_sendTextForSubscriber"],
        constants["TRANSACTION_sendMultipartTextForSubscriber"],
    )
    code = constants["TRANSACTION_sendTextForSubscriber"]
    assert OK == await shell(phone, adb_signer, call(version, "hi", code=code))
    assert 1 == len(await phone.wait_transmissions(then_idle=True))


async def test_stat_prints_the_size_and_mode_of_the_jar(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """stat -c '%s %a %u' prints the jar's byte count, 644 and root's uid (fs_config.cpp)."""
    phone = await phone_factory(android=14)
    output = await shell(phone, adb_signer, f"stat -c '%s %a %u' {FRAMEWORK_JAR}")
    jar = framework_jar(14)
    assert jar is not None
    assert f"{len(jar)} 644 0\n" == output


async def test_base64_w0_prints_one_line_without_newline(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """base64 -w 0 does not wrap and ends without a newline (toybox wraputchar counts columns
    only when wrapping)."""
    phone = await phone_factory(android=12)
    output = await shell(phone, adb_signer, f"base64 -w 0 {FRAMEWORK_JAR}; echo ,$?")
    jar = framework_jar(12)
    assert jar is not None
    assert base64.b64encode(jar).decode() + ",0\n" == output


async def test_base64_of_a_file_in_the_tree(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """base64 and stat of a file the shell wrote in /data/local/tmp read the phone's tree,
    and the wrap leaves no empty line when the text ends at a column boundary."""
    phone = await phone_factory(android=13)
    data = "x" * 57  # 76 base64 characters exactly
    command = (
        f"echo -n {shlex.quote(data)} > /data/local/tmp/f; stat -c %s /data/local/tmp/f;"
        " base64 /data/local/tmp/f"
    )
    output = await shell(phone, adb_signer, command)
    assert "57\n" + base64.b64encode(data.encode()).decode() + "\n" == output


async def test_stat_L_follows_a_symlink_and_plain_stat_does_not(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """stat -c %s of a symlink is the link's own size (lstat); with -L, its target's."""
    phone = await phone_factory(android=10)
    tmp = "/data/local/tmp"
    command = (
        f"echo -n 123456789 > {tmp}/f && ln -s f {tmp}/l"
        f" && stat -c %s {tmp}/l && stat -L -c %s {tmp}/l"
    )
    assert "1\n9\n" == await shell(phone, adb_signer, command)


async def test_missing_file_errors_as_toybox(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A jar that is not there: stat: 'FILE': No such file or directory and base64: FILE: …,
    each with status 1 (stat.c perror_msg, loopfiles perror_msg_raw)."""
    phone = await phone_factory(android=11, framework_jar="missing")
    output = await shell(
        phone, adb_signer, f"stat -c %s {FRAMEWORK_JAR}; echo $?; base64 {FRAMEWORK_JAR}; echo $?"
    )
    assert (
        f"stat: '{FRAMEWORK_JAR}': No such file or directory\n1\n"
        f"base64: {FRAMEWORK_JAR}: No such file or directory\n1\n"
    ) == output


async def test_unreadable_jar_can_be_stat_but_not_read(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A jar the shell may not read (mode 0600) still has a size, but base64 fails."""
    phone = await phone_factory(android=15, framework_jar="no-read-permission")
    output = await shell(
        phone, adb_signer, f"stat -c %a {FRAMEWORK_JAR}; base64 {FRAMEWORK_JAR}; echo $?"
    )
    assert f"600\nbase64: {FRAMEWORK_JAR}: Permission denied\n1\n" == output


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("stripped", None), ("no-stub", None), ("dex041", "version")],
)
async def test_jars_the_reader_cannot_prove_codes_from(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, kind: str, reason: str | None
) -> None:
    """A stripped jar and a jar without ISms$Stub define no class (None); a DEX of the
    container format (041) is refused by the reader."""
    output = await _pull(phone_factory, adb_signer, android=14, framework_jar=kind)
    jar = base64.b64decode("".join(output.removesuffix("status=0\n").split()), validate=True)
    if reason is None:
        assert None is jar_static_ints(jar, ISMS_STUB)
    else:
        with pytest.raises(DexUnreadable, match=reason):
            jar_static_ints(jar, ISMS_STUB)


@pytest.mark.parametrize("version", [10, 14])
async def test_vendor_reordered_isms_answers_its_own_codes(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, version: int
) -> None:
    """An OEM ISms with one method more in front: the jar proves code+1 and the isms service
    sends only with it; the AOSP code reaches another method and sends nothing."""
    phone = await phone_factory(android=version, framework_jar="vendor-reordered")
    jar = framework_jar(version, "vendor-reordered")
    assert jar is not None
    constants = jar_static_ints(jar, ISMS_STUB)
    assert constants is not None
    aosp = 6 if version == 10 else 5
    assert aosp + 1 == constants["TRANSACTION_sendTextForSubscriber"]
    assert OK == await shell(phone, adb_signer, call(version, "a", code=aosp))
    await phone.radio_idle()
    assert [] == phone.transmissions
    assert OK == await shell(phone, adb_signer, call(version, "b", code=aosp + 1))
    sent = await phone.wait_transmissions(then_idle=True)
    assert ["b"] == [transmission.body for transmission in sent]


async def test_cli_option_reaches_the_phone(
    tmp_path: Path, authorized_keys_path: Path, adb_signer: PythonRSASigner
) -> None:
    """`starebrain simulator --framework-jar missing` serves no jar: stat says so."""
    process = await _spawn(
        "--port", "0", "--store", str(tmp_path / "cli.db"),
        "--authorized-keys", str(authorized_keys_path), "--framework-jar", "missing",
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(20):
            match = _LISTENING.match((await process.stdout.readline()).decode())
        assert match is not None
        device = AdbDeviceTcpAsync("127.0.0.1", int(match.group(1)), default_transport_timeout_s=5)
        await device.connect(rsa_keys=[adb_signer], auth_timeout_s=5)
        output = await device.shell(f"stat -c %s {FRAMEWORK_JAR}; echo $?")
        await device.close()
        assert f"stat: '{FRAMEWORK_JAR}': No such file or directory\n1\n" == output
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await process.communicate()
