"""The phone's files under /data/local/tmp, through the real ADB protocol: what the fence on the
phone relies on (atomic claims, telling a symlink from a directory, survival, permissions)."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
from datetime import timedelta
from pathlib import Path

import pytest
from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from adb_shell.exceptions import TcpTimeoutException

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._files import ROOT, FileTree, FsError
from android_bridge.simulator._shell import STDOUT_IS_TERMINAL, Shell
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

RELEASES = [10, 11, 12, 13, 14, 15]
ROOT_DIR = "/data/local/tmp/starebrain"
EPOCH = f"{ROOT_DIR}/.epoch-0123abcd"
CLAIM = f"{ROOT_DIR}/d-1"
_STATUS = re.compile(r"__X:(\d+)\n\Z")


async def run(device: AdbDeviceTcpAsync, script: str) -> tuple[str, int]:
    """Run ``script`` on a legacy ``shell:`` stream; return its output and exit status."""
    output = await device.shell(f'{script}; echo "__X:$?"')
    assert isinstance(output, str)
    match = _STATUS.search(output)
    assert match is not None, output
    return output[: match.start()], int(match.group(1))


async def fence_phone(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, **kwargs: object
) -> tuple[SimulatedPhone, AdbDeviceTcpAsync]:
    """A started phone with the fence's folder and epoch made, and a connection to it."""
    phone = await phone_factory(**kwargs)
    device = await connect(phone, adb_signer)
    assert ("", 0) == await run(device, f"mkdir -p {ROOT_DIR} && mkdir {EPOCH}")
    return phone, device


# -- what the phone starts with ------------------------------------------------------------


@pytest.mark.parametrize("android", RELEASES)
async def test_data_local_tmp_belongs_to_the_shell_user(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """/data/local/tmp is 0771 shell:shell under /data/local 0751 root:root (system/core
    rootdir/init.rc ``mkdir /data/local/tmp 0771 shell shell``, android-10.0.0_r1 to 15)."""
    phone = await phone_factory(android=android)
    device = await connect(phone, adb_signer)
    output, status = await run(device, "ls -ld /data/local/tmp /data/local /data")
    await device.close()
    modes = [line.split()[:4] for line in output.splitlines()]
    assert [
        ["drwxrwx--x", "3", "system", "system"],
        ["drwxr-x--x", "3", "root", "root"],
        ["drwxrwx--x", "2", "shell", "shell"],
    ] == modes
    assert 0 == status


async def test_the_system_image_is_read_only(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Creating a name at / fails with EROFS even for root, and /data refuses the shell user
    (``chmod 0771 /data``, ``chown system system /data``, init.rc; bionic strerror texts)."""
    phone = await phone_factory(root=True)
    device = await connect(phone, adb_signer)
    assert ("mkdir: '/x': Read-only file system\n", 1) == await run(device, "mkdir /x")
    await device.close()
    shell_phone = await phone_factory()
    device = await connect(shell_phone, adb_signer)
    assert ("mkdir: '/data/x': Permission denied\n", 1) == await run(device, "mkdir /data/x")
    await device.close()


# -- mkdir claims --------------------------------------------------------------------------


@pytest.mark.parametrize("android", RELEASES)
async def test_mkdir_claims_a_name_once(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """mkdir without -p fails with File exists, exit 1, when the name exists, except on Android
    12 whose toybox (2021 snapshot) has mkpathat's regression: an existing directory is fine
    (toybox lib/lib.c mkpathat, 2021-02-08 to 2021-10-18; toys/posix/mkdir.c)."""
    phone, device = await fence_phone(phone_factory, adb_signer, android=android)
    assert ("", 0) == await run(device, f"mkdir {CLAIM}")
    second = await run(device, f"mkdir {CLAIM}")
    await device.close()
    if android == 12:
        assert ("", 0) == second
    else:
        assert (f"mkdir: '{CLAIM}': File exists\n", 1) == second
    assert phone.files.is_dir(CLAIM)


@pytest.mark.parametrize("android", [11, 12])
async def test_many_connections_race_for_one_claim(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Twelve connections mkdir the same name at once: exactly one wins, the rest see File
    exists; on Android 12 every one "wins" (mkdir(2) is atomic, toybox 0.8.5's mkpathat
    ignores EEXIST for a directory; toybox lib/lib.c)."""
    phone, device = await fence_phone(phone_factory, adb_signer, android=android)
    await device.close()
    devices = await asyncio.gather(*(connect(phone, adb_signer) for _ in range(12)))
    script = f"mkdir {CLAIM} 2>/dev/null && echo WON"
    results = await asyncio.gather(*(run(each, script) for each in devices))
    for each in devices:
        await each.close()
    winners = [output for output, status in results if status == 0]
    assert (12 if android == 12 else 1) == len(winners)
    assert all("WON\n" == output for output in winners)


def _race_worker(store: str, barrier: object, results: object) -> None:
    tree = FileTree(Path(store), clock_ns=lambda: 0)
    barrier.wait()  # type: ignore[attr-defined]
    try:
        tree.mkdir(ROOT, "/", CLAIM, 0o777)
    except FsError:
        results.put(False)  # type: ignore[attr-defined]
    else:
        results.put(True)  # type: ignore[attr-defined]
    finally:
        tree.close()


def test_mkdir_is_atomic_across_processes(tmp_path: Path) -> None:
    """Six processes call mkdir(2) on one name in the same store file: exactly one creates it
    (the kernel's mkdir is atomic; here one SQLite BEGIN IMMEDIATE transaction per call)."""
    store = tmp_path / "sms.db"
    tree = FileTree(store, clock_ns=lambda: 0)
    tree.boot()
    tree.mkdir(ROOT, "/", ROOT_DIR, 0o777)
    tree.close()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(6)
    results = context.Queue()
    workers = [
        context.Process(target=_race_worker, args=(str(store), barrier, results)) for _ in range(6)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert [True] == [outcome for outcome in outcomes if outcome]
    assert 6 == len(outcomes)


# -- symlinks against directories ------------------------------------------------------------


@pytest.mark.parametrize("android", RELEASES)
async def test_a_void_symlink_blocks_a_later_mkdir(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """mkdir of a name held by a dangling symlink fails with File exists on every release, 12
    included (mkpathat's stat fails, mkdirat then says EEXIST; toybox lib/lib.c, ln.c)."""
    phone, device = await fence_phone(phone_factory, adb_signer, android=android)
    assert ("", 0) == await run(device, f"ln -s void {CLAIM}")
    assert (f"mkdir: '{CLAIM}': File exists\n", 1) == await run(device, f"mkdir {CLAIM}")
    assert (f"mkdir: '{CLAIM}/go': No such file or directory\n", 1) == await run(
        device, f"mkdir {CLAIM}/go"
    )
    await device.close()
    assert "void" == phone.files.readlink(CLAIM)


@pytest.mark.parametrize("android", RELEASES)
async def test_ln_s_into_an_existing_directory_succeeds(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """ln -s void DIR, when DIR is a directory, makes DIR/void and exits 0: ln stat()s the
    destination first and links inside a directory (toybox toys/posix/ln.c, 0.8.0 to 0.8.11)."""
    phone, device = await fence_phone(phone_factory, adb_signer, android=android)
    assert ("", 0) == await run(device, f"mkdir {CLAIM}")
    assert ("", 0) == await run(device, f"ln -s void {CLAIM}")
    assert ("", 1) == await run(device, f"readlink {CLAIM}")
    await device.close()
    assert (True, "void") == (phone.files.is_dir(CLAIM), phone.files.readlink(f"{CLAIM}/void"))


@pytest.mark.parametrize("android", RELEASES)
async def test_a_symlink_whose_target_ends_in_dot_refuses_a_directory(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """ln -s void/. NAME tries NAME/. when NAME is a directory, which exists: EEXIST, exit 1;
    -T exists from Android 11 only (toybox ln.c; "<1vnfs" in lineage-17.1, "<1rt:Tvnfs" later)."""
    phone, device = await fence_phone(phone_factory, adb_signer, android=android)
    assert ("", 0) == await run(device, f"mkdir {CLAIM}")
    assert (
        f"ln: cannot create symbolic link from 'void/.' to '{CLAIM}/.': File exists\n",
        1,
    ) == await run(device, f"ln -s void/. {CLAIM}")
    dash_t = await run(device, f"ln -sT void {CLAIM}")
    await device.close()
    if android == 10:
        assert ('ln: Unknown option T (see "ln --help")\n', 1) == dash_t
    else:
        assert (f"ln: '{CLAIM}' is a directory\n", 1) == dash_t
    assert [] == phone.files.listdir(CLAIM)


@pytest.mark.parametrize("first", ["mkdir", "ln"])
@pytest.mark.parametrize("android", [10, 12, 15])
async def test_mkdir_and_a_dot_symlink_exclude_each_other(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, first: str
) -> None:
    """Whichever of mkdir NAME and ln -s void/. NAME comes first holds the name; the other
    fails, on every release (symlink(2) and mkdir(2) EEXIST; toybox ln.c, lib/lib.c)."""
    phone, device = await fence_phone(phone_factory, adb_signer, android=android)
    claims = {"mkdir": f"mkdir {CLAIM}", "ln": f"ln -s void/. {CLAIM}"}
    order = [first, "ln" if first == "mkdir" else "mkdir"]
    statuses = [(await run(device, claims[name]))[1] for name in order]
    await device.close()
    assert [0, 1] == statuses
    assert (first == "mkdir") == phone.files.is_dir(CLAIM)


async def test_racing_void_and_claim_have_one_winner(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Concurrent claims by mkdir and by ln -s void/. on many names: each name has exactly one
    winner, and what holds it says which (toybox mkdir.c, ln.c; readlink.c)."""
    phone, device = await fence_phone(phone_factory, adb_signer)
    await device.close()
    devices = await asyncio.gather(*(connect(phone, adb_signer) for _ in range(8)))
    scripts = []
    for index in range(8):
        name = f"{ROOT_DIR}/race-{index % 4}"
        if index < 4:
            scripts.append(f"mkdir {name} 2>/dev/null && echo M")
        else:
            scripts.append(f"ln -s void/. {name} 2>/dev/null && echo L")
    results = await asyncio.gather(
        *(run(each, script) for each, script in zip(devices, scripts, strict=True))
    )
    for each in devices:
        await each.close()
    for index in range(4):
        name = f"{ROOT_DIR}/race-{index}"
        wins = [results[index][1] == 0, results[index + 4][1] == 0]
        assert 1 == sum(wins)
        assert wins[0] == phone.files.is_dir(name)
        assert (None if wins[0] else "void/.") == phone.files.readlink(name)


@pytest.mark.parametrize("android", RELEASES)
async def test_readlink_and_ls_tell_a_void_from_a_claim(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """readlink prints a symlink's target and fails silently on a directory; ls -1 DIR/ lists
    stage markers; ls of a dangling symlink fails on Android 10 and shows it from 11 (toybox
    readlink.c, ls.c, dirtree_add_node: 0.8.0 vs lineage-18.1)."""
    _, device = await fence_phone(phone_factory, adb_signer, android=android)
    void = f"{ROOT_DIR}/d-void"
    script = f'mkdir {CLAIM} && mkdir {CLAIM}/am-"$(date +%s%3N)" && ln -s void {void}'
    assert ("", 0) == await run(device, script)
    assert ("void\n", 0) == await run(device, f"readlink {void}")
    assert ("", 1) == await run(device, f"readlink {CLAIM}")
    listing, status = await run(device, f"ls -1 {CLAIM}/")
    assert (0, True) == (status, bool(re.fullmatch(r"am-\d{13}\n", listing)))
    assert (f"{void}\n", 0) == await run(device, f"ls -d {void}")
    assert ("", 1) == await run(device, f"ls -1 {void}/ 2>/dev/null")
    plain = await run(device, f"ls {void}")
    long_form, _ = await run(device, f"ls -l {void}")
    await device.close()
    if android == 10:
        assert (f"ls: {void}: No such file or directory\n", 1) == plain
    else:
        assert (f"{void}\n", 0) == plain
    assert long_form.startswith("lrwxrwxrwx 1 shell shell 4 ")
    assert long_form.endswith(f" {void} -> void\n")


@pytest.mark.parametrize("android", [10, 15])
async def test_test_builtin_sees_the_tree(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """mksh's test and [ answer -e, -d, -L, -f and ! from the tree (external/mksh funcs.c
    c_test, R59c): a dangling symlink is -L but not -e."""
    _, device = await fence_phone(phone_factory, adb_signer, android=android)
    void = f"{ROOT_DIR}/v"
    await run(device, f"ln -s void {void}; mkdir {CLAIM}; touch {ROOT_DIR}/f")
    checks = (
        f"[ -d {CLAIM} ]; echo $?; test -L {void}; echo $?; test -e {void}; echo $?;"
        f" [ ! -e {void} ]; echo $?; [ -f {ROOT_DIR}/f ]; echo $?; test -d {void}; echo $?;"
        " [ 1 -eq 1 -a x != y ]; echo $?; [ -d"
    )
    output, status = await run(device, checks)
    await device.close()
    assert ("0\n0\n1\n0\n0\n1\n0\n/system/bin/sh: [: missing ]\n", 2) == (output, status)


# -- survival, clearing, wiping ----------------------------------------------------------------


async def test_the_fence_survives_a_reboot_and_is_usable_before_unlock(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Nothing empties /data/local/tmp at boot, and /data/local is under the device key, so it
    is there before the first unlock (init.rc ``encryption=Require``, init/README.md ``ref``:
    the systemwide DE key; android-11.0.0_r1 to 15)."""
    phone, device = await fence_phone(phone_factory, adb_signer, tcpip_survives_reboot=True)
    await run(device, f"mkdir {CLAIM} && ln -s void {ROOT_DIR}/d-2")
    await device.close()
    await phone.reboot()
    assert not phone.user_unlocked
    device = await connect(phone, adb_signer)
    assert (f"{ROOT_DIR}/.epoch-0123abcd\n", 0) == await run(device, f"ls -d {EPOCH}")
    assert ("void\n", 0) == await run(device, f"readlink {ROOT_DIR}/d-2")
    assert ("", 0) == await run(device, f"mkdir {ROOT_DIR}/d-3")
    await device.close()
    assert phone.files.is_dir(CLAIM)


async def test_the_fence_survives_a_restart_of_the_simulator(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, tmp_path: Path
) -> None:
    """The tree lives in the store file: a new simulator on the same file sees it (a phone's
    /data persists; the table is the ground truth)."""
    store = tmp_path / "fence.db"
    phone, device = await fence_phone(phone_factory, adb_signer, store_path=store)
    await run(device, f"mkdir {CLAIM}")
    await device.close()
    await phone.stop()
    again = await phone_factory(store_path=store)
    device = await connect(again, adb_signer)
    assert (f"mkdir: '{CLAIM}': File exists\n", 1) == await run(device, f"mkdir {CLAIM}")
    await device.close()


async def test_init_recreates_data_local_tmp_at_boot(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Root may remove /data/local/tmp itself; init makes it again, 0771 shell:shell, at the next
    boot (init.rc ``mkdir`` on post-fs-data, android-10.0.0_r1 to 15)."""
    phone = await phone_factory(root=True, tcpip_survives_reboot=True)
    device = await connect(phone, adb_signer)
    assert ("", 0) == await run(device, "rm -rf /data/local/tmp")
    assert ("", 1) == await run(device, "ls -d /data/local/tmp 2>/dev/null")
    await device.close()
    await phone.reboot()
    info = phone.files.stat("/data/local/tmp")
    assert info is not None
    assert (0o771, 2000, 2000) == (info.mode, info.uid, info.gid)


async def test_clear_tmp_empties_the_folder_and_loses_the_epoch(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """rm -rf /data/local/tmp/* leaves the directory (0771 shell) and nothing in it: the epoch
    check fails, so a missing claim is no proof (init.rc; toybox ls.c)."""
    phone, device = await fence_phone(phone_factory, adb_signer)
    await run(device, f"mkdir {CLAIM}")
    phone.clear_tmp()
    script = f"ls -d {EPOCH} >/dev/null 2>&1; echo $?; [ -d {ROOT_DIR} ]; echo $?"
    assert ("1\n1\n", 0) == await run(device, script)
    await device.close()
    assert [] == phone.files.listdir("/data/local/tmp")


async def test_wipe_data_forgets_messages_files_and_keys(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, authorized_keys_path: Path
) -> None:
    """A factory reset formats /data: the SMS store, /data/local/tmp and
    /data/misc/adb/adb_keys are gone (system/core adb/daemon/auth.cpp key_paths,
    android-10.0.0_r1), and adb tcpip with it (daemon/main.cpp)."""
    phone, device = await fence_phone(phone_factory, adb_signer)
    phone.store.insert_incoming("+15550100", "hello", date_ms=phone.now_ms())
    await device.close()
    await phone.wipe_data()
    assert ([], [], False) == (
        phone.store.rows(),
        phone.files.listdir("/data/local/tmp"),
        phone.tcpip_enabled,
    )
    assert "" == authorized_keys_path.read_text(encoding="utf-8")
    await phone.enable_tcpip()
    with pytest.raises(TcpTimeoutException):
        await connect(phone, adb_signer, auth_timeout_s=0.2)


# -- who may write ------------------------------------------------------------------------------


@pytest.mark.parametrize("android", [10, 15])
async def test_the_system_uid_cannot_create_or_list_in_data_local_tmp(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """su 1000 is neither shell nor in its group: 0771 gives it search only, so it can check a
    known name but not create or list (DAC; init.rc; su.cpp keeps adbd's groups, not shell)."""
    phone, device = await fence_phone(
        phone_factory, adb_signer, android=android, build_type="userdebug"
    )
    assert (
        "mkdir: '/data/local/tmp/x': Permission denied\n",
        1,
    ) == await run(device, "su 1000 mkdir /data/local/tmp/x")
    assert (
        "ln: cannot create symbolic link from 'void' to '/data/local/tmp/x': Permission denied\n",
        1,
    ) == await run(device, "su 1000 ln -s void /data/local/tmp/x")
    assert ("ls: /data/local/tmp: Permission denied\n", 1) == await run(
        device, "su 1000 ls /data/local/tmp"
    )
    assert (f"{EPOCH}\n", 0) == await run(device, f"su 1000 ls -d {EPOCH}")
    assert ("", 0) == await run(device, "su 0 mkdir /data/local/tmp/by-root")
    await device.close()
    info = phone.files.stat("/data/local/tmp/by-root")
    assert info is not None
    assert (0, 0o777) == (info.uid, info.mode)


@pytest.mark.parametrize("android", [10, 15])
async def test_redirections_write_files_the_shell_user_owns(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """``>FILE`` creates a regular file 0666 owned by the caller (adbd's ``umask(0)``:
    system/core ``adb/daemon/main.cpp`` android-10.0.0_r1), ``>>`` appends, ``cat`` prints
    it (toybox ``cat.c``, 0.8.0 at android-10 to 0.8.11 at 15) and ``rm -f`` removes it; the
    system uid may not create one in /data/local/tmp (mksh ``exec.c`` ``iosetup``: ``can't
    create``, R57 to R59c; bionic ``strerror``), nor read one it has no permission for; a
    file keeps its contents across a reboot."""
    phone, device = await fence_phone(
        phone_factory, adb_signer, android=android, build_type="userdebug"
    )
    out = f"{ROOT_DIR}/.out"
    assert ("one\ntwo\n", 0) == await run(
        device, f"echo one >{out}; {{ echo two; }} >>{out} 2>&1; cat {out}"
    )
    info = phone.files.stat(out)
    assert info is not None
    assert ("file", 2000, 0o666, 8) == (info.kind, info.uid, info.mode, info.size)
    assert (
        "/system/bin/sh: can't create /data/local/tmp/x: Permission denied\n",
        1,
    ) == await run(device, "su 1000 sh -c 'echo x >/data/local/tmp/x'")
    await phone.reboot()
    await phone.enable_tcpip()
    fresh = await connect(phone, adb_signer)
    assert ("one\ntwo\n", 0) == await run(fresh, f"cat {out}")
    assert ("", 0) == await run(fresh, f"rm -f {out}")
    assert (f"cat: {out}: No such file or directory\n", 1) == await run(fresh, f"cat {out}")
    await fresh.close()
    await device.close()


async def test_names_carry_the_phone_clock(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A new name's mtime, and its directory's, is the phone's clock (advance_time included),
    shown by ls -l in the phone's time zone (toybox ls.c, " %F %H:%M")."""
    phone, device = await fence_phone(phone_factory, adb_signer, region="US")
    phone.advance_time(timedelta(days=400))
    before = phone.now_ms()
    await run(device, f"mkdir {CLAIM}")
    output, _ = await run(device, f"ls -ld {CLAIM}")
    await device.close()
    info = phone.files.stat(CLAIM)
    parent = phone.files.stat(ROOT_DIR)
    assert info is not None and parent is not None
    assert before * 1_000_000 <= info.mtime_ns <= phone.now_ms() * 1_000_000
    assert info.mtime_ns == parent.mtime_ns
    assert re.fullmatch(
        rf"drwxrwxrwx 2 shell shell 4096 \d{{4}}-\d\d-\d\d \d\d:\d\d {CLAIM}\n", output
    )


async def test_ls_on_a_terminal_prints_columns_and_escapes(
    phone_factory: PhoneFactory,
) -> None:
    """When stdout is a terminal (adbd's PTY for a legacy shell: stream) ls prints columns 80
    wide and escapes spaces, one per line in a $(...) (toybox ls.c: isatty(1) implies -C -b)."""
    phone = await phone_factory()
    commands = phone._commands()
    shell = Shell(commands)
    await shell.run("mkdir /data/local/tmp/s")
    for name in ("a b", "c", "d"):
        await shell.run(f"touch '/data/local/tmp/s/{name}'")
    token = STDOUT_IS_TERMINAL.set(True)
    try:
        terminal, _ = await Shell(commands).run(
            "ls /data/local/tmp/s; echo $(ls /data/local/tmp/s)"
        )
    finally:
        STDOUT_IS_TERMINAL.reset(token)
    assert "a\\ b  c  d\na b c d\n" == terminal
