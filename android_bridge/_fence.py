"""A fence on the phone: proof that a send script has not run, and never will.

An ordinary read cannot see a queued or failed SMS, nor an RCS chat, so the absence of a
message proves nothing. The fence proves absence on the phone itself, with the one thing the
phone makes atomic for the shell user: creating a name in a directory it owns.

* ``/data/local/tmp`` belongs to the shell user (``0771 shell:shell``, created by ``init.rc``)
  and survives reboots. The fence lives in :data:`FENCE_ROOT` below it.
* Every name is a **symlink** whose target says who made it: ``symlink(2)`` creates the name
  and its content in one step, and fails with ``EEXIST`` whatever already holds the name
  (a symlink to a target that is not a directory is never followed into by ``ln``). So two
  parties racing for one name cannot both win, and the winner can always be told apart
  (``readlink``). (A directory would not do: ``ln -s X DIR`` creates ``DIR/X`` and succeeds.)
* The send script **claims** ``$FENCE_ROOT/<dispatch_id>`` first (``ln -s script/.``) and runs
  everything else only if that succeeded. Once ``am`` reported a clean launch it records
  ``<dispatch_id>.am`` (target: the phone's clock in ms), then claims ``<dispatch_id>.go``
  (``ln -s script/.``) right before the first key, and records ``<dispatch_id>.keys`` once the
  keys were pressed. The keys run only if the ``go`` claim succeeded.
* To **void** an attempt, the reconciler claims the same names first (``ln -s void/.``): the
  attempt's name, or, if the script already holds that, its ``go``. Either success means no
  key was or can ever be pressed for it: nothing was or can still be sent. If the script
  holds ``go``, the keys may have been pressed: the stage markers say how far it got, and the
  attempt stays unresolved.
* An **epoch** directory ``$FENCE_ROOT/.epoch-<hex>``, noted in the ledger when the attempt is
  created, must exist for the script to claim and for the reconciler to void: if the folder
  was cleared (``rm -rf /data/local/tmp/*``, a factory reset), a missing claim proves nothing,
  and neither side acts on it.
* **Which ledger** (:func:`read_ledgers`): with the ledger's own id (32 hex digits), the
  script, once its claim succeeded, creates ``<dispatch_id>.ledger-<id>`` (an empty file:
  ``touch``) and writes the id into ``$FENCE_ROOT/.ledger`` (the ledger whose script ran
  last). So another ledger driving the same phone finds out, in one listing, before it
  sends: whose attempts still hold marks here, and who sent last. The ledger that marked an
  attempt removes the mark once it holds the attempt resolved (:func:`forget_ledger_marks`);
  the attempt's other names stay for a week. Advisory, never a lock: two ledgers checking
  at the same instant both pass. (Files, not symlinks: the marks are no claims, and the
  script's ``ln`` calls stay the claim, ``go`` and the stage markers. ``touch``, ``ls -1a``
  and ``cat`` are toybox's, ``touch.c``, ``ls.c`` and ``cat.c`` from 0.8.0, Android 10, to
  0.8.11; ``echo`` with ``>`` is mksh's own.)
* A **dropped connection cannot cut a send script short** (:func:`run_to_the_end`): the
  script ignores SIGHUP and writes its output to ``$FENCE_ROOT/.out-<dispatch_id>``, printed
  back and removed at its end, so once it claimed ``go`` it presses its keys and records
  ``keys`` whatever happens to the link. Only adbd restarting or a reboot can still stop it there.
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Sequence
from typing import Final, NoReturn

import attrs

from android_bridge._device import IDENTITY_READS, Device
from android_bridge.exceptions import (
    BridgeError,
    CommandRejected,
    DeviceUnreachable,
    FenceLost,
    UnparseableOutput,
)

#: Where the fence's names live on the phone (the shell user's own directory).
FENCE_ROOT = "/data/local/tmp/starebrain"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_EPOCH = re.compile(r"[0-9a-f]{8,32}")
_MS = re.compile(r"(\d{1,19})/\.")
_LEDGER_ID = re.compile(r"[0-9a-f]{32}")
#: The file holding the id of the ledger whose send script claimed a fence last.
LEDGER_MARK = f"{FENCE_ROOT}/.ledger"
#: An attempt's mark of its ledger: ``<dispatch_id>.ledger-<ledger id>``.
_LEDGER_NAME = re.compile(r"(.+)\.ledger-([0-9a-f]{32})")
#: Symlink targets end in ``/.``: were a name ever a directory (or a link to one), ``ln -s
#: X/. NAME`` would try ``NAME/.``, which always exists, so it can never succeed by creating
#: a link *inside* it (as ``ln -s X DIR`` does: it makes ``DIR/X`` and exits 0; toybox
#: ``ln.c`` 0.8.0 to 0.8.11).
SCRIPT = "script/."
VOID = "void/."


def check_name(dispatch_id: str) -> str:
    """The dispatch id as a fence name: letters, digits, ``.``, ``_``, ``-`` (a UUID fits).

    Raises:
        CommandRejected: any other character, which could not be used as one file name.
    """
    if not _NAME.fullmatch(dispatch_id):
        raise CommandRejected(f"not usable as a fence name on the phone: {dispatch_id!r}")
    return dispatch_id


def check_epoch(epoch: str) -> str:
    """An epoch as created by :func:`epoch_script` (hex).

    Raises:
        CommandRejected: anything else.
    """
    if not _EPOCH.fullmatch(epoch):
        raise CommandRejected(f"not a fence epoch: {epoch!r}")
    return epoch


def check_ledger_id(ledger_id: str) -> str:
    """A ledger's own id as the ledger creates it (32 lowercase hex digits).

    Raises:
        CommandRejected: anything else.
    """
    if not _LEDGER_ID.fullmatch(ledger_id):
        raise CommandRejected(f"not a ledger id: {ledger_id!r}")
    return ledger_id


def ledger_mark_path(dispatch_id: str, ledger_id: str) -> str:
    """The file marking an attempt with the ledger whose script claimed its fence."""
    return f"{fence_path(dispatch_id)}.ledger-{check_ledger_id(ledger_id)}"


def fence_path(dispatch_id: str) -> str:
    """The name an attempt's send script claims."""
    return f"{FENCE_ROOT}/{check_name(dispatch_id)}"


def claim_prefix(dispatch_id: str, epoch: str, ok_marker: str, ledger_id: str | None = None) -> str:
    """The start of a send script: the epoch must exist and the claim must succeed, else
    nothing after it runs. Ends with ``&&``-able text (no trailing operator). With
    ``ledger_id``, a claim that succeeded marks it (:func:`ledger_mark_path`, and
    :data:`LEDGER_MARK` rewritten); a mark that cannot be made stops nothing."""
    path = fence_path(dispatch_id)
    marks = ""
    if ledger_id is not None:
        marks = (
            f"touch {ledger_mark_path(dispatch_id, ledger_id)} 2>/dev/null;"
            f" echo {ledger_id} >{LEDGER_MARK}; "
        )
    return (
        f"ls -d {FENCE_ROOT}/.epoch-{check_epoch(epoch)} >/dev/null 2>&1"
        f" && ln -s {SCRIPT} {path} 2>/dev/null && {{ {marks}echo {ok_marker}; }}"
    )


async def refused_claim(device: Device, fence: tuple[str, str], what: str) -> NoReturn:
    """A fenced send's claim failed (its script ran nothing: ``what`` says so, e.g. "no key
    was pressed"): why, asked of the phone in one more round trip, before anything is spent on
    it. The phone's identity (as on a reconnect: a reset the link survived would go unseen
    otherwise) and whether the attempt's epoch is still there.

    Raises:
        DeviceUnusable: another phone answers at the address now; the handle refuses it for
            good (:attr:`Device.replaced`).
        FenceLost: the same phone (or one whose identity cannot be told) no longer has the
            epoch: the folder was cleared; the attempt needs the phone's new epoch.
        CommandRejected: the epoch is there: the attempt's name was taken first (voided).
        DeviceUnreachable: the phone stopped answering before it said why (nothing was sent).
    """
    _dispatch_id, epoch = fence
    android_id, serialno = IDENTITY_READS
    try:
        steps = await device.run(
            [android_id, serialno, f"ls -d {FENCE_ROOT}/.epoch-{check_epoch(epoch)}"]
        )
    except BridgeError as exc:
        raise DeviceUnreachable(
            f"{device.serial}: the attempt's fence on the phone could not be claimed, and the"
            f" phone did not say why ({type(exc).__name__}: {exc}); {what}"
        ) from exc
    await device.check_identity(
        steps[0].output if steps[0].exit_status == 0 else "", steps[1].output
    )
    if steps[2].exit_status != 0:
        raise FenceLost(
            f"{device.serial}: the attempt's fence epoch is gone from the phone (its fence"
            f" folder was cleared), so its fence could not be claimed; {what}"
        )
    raise CommandRejected(
        f"the attempt's fence on the phone could not be claimed (it was voided); {what}"
    )


def output_path(name: str) -> str:
    """Where a send step's output waits on the phone until it is printed back: a dot name in
    the fence's folder, which :func:`list_fences` and the epoch listing skip. ``name`` is the
    attempt's dispatch id when it has a fence (one script per dispatch id: the claim lets one
    run; :func:`cleanup_command` removes the file a script stopped by adbd restarting or a
    reboot left behind), else the send's nonce.

    Raises:
        CommandRejected: a name that is not letters, digits, ``.``, ``_`` and ``-``.
    """
    if not _NAME.fullmatch(name):
        raise CommandRejected(f"not a send nonce or dispatch id: {name!r}")
    return f"{FENCE_ROOT}/.out-{name}"


def run_to_the_end(step: str, name: str) -> str:
    """``step`` made to run to its end on the phone even if the connection drops meanwhile::

        trap '' HUP; mkdir -p $FENCE_ROOT 2>/dev/null;
        { <step>; } </dev/null >$FENCE_ROOT/.out-<name> 2>&1; s=$?;
        cat $FENCE_ROOT/.out-<name>; rm -f $FENCE_ROOT/.out-<name>; [ "$s" = 0 ]

    (``name``: see :func:`output_path`.)

    Why, from adbd, the kernel and mksh at the android-10.0.0_r30 to android-15.0.0_r1 tags
    (system/core ``adb/`` on 10, packages/modules/adb from 11, external/mksh, Android common
    kernel ``drivers/tty``; the research report of issue 21, item 3):

    * adbd runs a legacy ``shell:<cmd>`` as ``/system/bin/sh -c <cmd>``, the leader of a new
      session whose controlling terminal is a PTY (``daemon/services.cpp``: a command is
      ``kRaw``; ``shell_service.cpp`` ``StartSubprocess``: raw without the shell protocol
      becomes ``kPty``, "PTYs automatically send SIGHUP to the slave-side process when the
      master side of the PTY closes, which we rely on"). When the connection goes, adbd
      closes the master (``close_all_sockets`` -> ``local_socket_destroy`` ->
      ``deferred_close``) and signals nothing itself.
    * The kernel then hangs the terminal up (``pty_close`` -> ``tty_vhangup``): SIGHUP goes
      to the session leader alone (``tty_signal_session_leader``), and every later write to
      the terminal fails with ``EIO`` (``hung_up_tty_write``), raising no signal.
    * mksh dies of that SIGHUP, killing the command it waits on (``histrap.c``: SIGHUP is
      ``TF_FATAL``; ``jobs.c`` ``j_exit``), unless the script ignores it: ``trap '' HUP``
      sets ``SIG_IGN`` (``settrap``), which its commands inherit across ``fork`` and
      ``execve`` (``cleartraps`` keeps an empty trap, ``restoresigs`` keeps ``SIG_IGN``).
      The same text in R57 (10, 11) and R59 to R59c (12 to 15). So it runs to its end.
    * Its ``&&``-chained markers must not write to the hung-up terminal: an ``echo`` there
      fails (``c_print`` returns 1), which would break the chain before the keys. So every
      write of the step goes to a file (``{ …; }`` runs in the shell itself, its
      redirections in force for each of its commands: ``exec.c`` ``iosetup``), printed back
      by ``cat`` once the step is over, then removed. stdin is ``/dev/null``.
    * That is the legacy ``shell:``, which the product speaks (adb-shell's
      ``AdbDeviceAsync.shell`` opens ``shell:<cmd>``). Under the shell protocol
      (``shell,v2:``, Google's ``adb shell``) adbd itself sends ``kill(pid, SIGHUP)`` to the
      ``sh``, which the trap ignores the same way, then closes its ends of the stdout and
      stderr sockets, so a later write raises SIGPIPE (``PassDataStreams``; ``ForkAndExec``
      restores ``SIG_DFL``; system/core ``adb/daemon/shell_service.cpp`` android-10.0.0_r30
      and 11.0.0_r1, packages/modules/adb unchanged to branch 15-qpr2). The file is enough
      there too: the step writes nothing to them; the ``cat`` that prints it back dies alone
      (141: toybox's ``cat``, since Android builds mksh without its builtin one, ``#if
      !defined(__ANDROID__)`` in ``funcs.c``), ``rm`` still runs, and the
      first builtin that writes after it (``Device.run``'s end frame) kills the ``sh`` with
      nothing left to do.
    * Not ``setsid CMD`` (toybox forks only when the caller leads its process group, which a
      command of a non-interactive mksh does not: on 10 and 12 to 15 it stays mksh's
      foreground job and gets SIGHUP from ``j_exit``), not ``nohup CMD`` (stdout on the PTY:
      it must create ``nohup.out`` in ``/`` or ``$HOME`` = ``/``, cannot, and exits before
      running CMD), not ``CMD &`` or ``( … )`` (still in the session's process group, which
      the kernel SIGHUPs when the shell exits), not ``sh -c '…'`` (quoting the step again
      grows every quote in the body, against ``MAX_ARG_STRLEN``).

    What still stops the script: adbd itself exiting or restarting (``adb root``/``unroot``/
    ``tcpip``/``usb``, a crash, a USB configuration change) or a reboot: init SIGKILLs every
    process adbd started (``init/service.cpp`` ``KillProcessGroup``), whatever it ignores.
    ``mkdir -p`` makes the fence folder for a send without a fence; the step's exit status
    comes back as 0 or 1 (``[ "$s" = 0 ]``).

    Raises:
        CommandRejected: a name :func:`output_path` refuses.
    """
    out = output_path(name)
    return (
        f"trap '' HUP; mkdir -p {FENCE_ROOT} 2>/dev/null;"
        f" {{ {step}; }} </dev/null >{out} 2>&1; s=$?;"
        f' cat {out}; rm -f {out}; [ "$s" = 0 ]'
    )


def stage_command(dispatch_id: str, stage: str, clock: str = "$(date +%s%3N)") -> str:
    """A stage marker: a symlink whose target is the phone's clock in ms (``clock``: the
    shell text giving it, e.g. a variable already holding it)."""
    return f'ln -s "{clock}/." {fence_path(dispatch_id)}.{stage}'


def go_command(dispatch_id: str) -> str:
    """The script's claim of the right to press the keys (fails if the attempt was voided)."""
    return f"ln -s {SCRIPT} {fence_path(dispatch_id)}.go 2>/dev/null"


class FenceState(enum.StrEnum):
    """What the fence showed for one attempt."""

    #: The reconciler holds the name: the script never claimed it and never will.
    VOIDED = "voided"
    #: The send script claimed the name: it started; ``stages`` say how far it got.
    CLAIMED = "claimed"
    #: The epoch is gone (the folder was cleared or the phone wiped): no proof either way.
    LOST = "lost"
    #: (A peek only, which claims nothing.) Nobody holds the name yet, or the script holds
    #: it but not yet ``go``: it may not have started, or be on its way.
    OPEN = "open"


@attrs.frozen(kw_only=True)
class FenceReport:
    """The fence of one attempt, as read (and, to void, claimed) on the phone."""

    dispatch_id: str
    state: FenceState
    #: Stage markers the script left, ``(stage, phone clock ms)``, oldest first.
    stages: tuple[tuple[str, int], ...] = ()
    #: True when this very call created the void (False: an earlier one did, or none).
    voided_now: bool = False
    #: For VOIDED: "claim" (the script never claimed the attempt) or "go" (it claimed it,
    #: but never the right to press the keys).
    voided_at: str | None = None


@attrs.frozen(kw_only=True)
class Epoch:
    """The phone's current fence epoch."""

    epoch: str
    #: True when this call created it (the folder was empty or cleared).
    created: bool


def epoch_script() -> tuple[str, str]:
    """A command that prints the existing epoch, or creates a new one and prints it; and the
    new epoch's name it would create."""
    fresh = secrets.token_hex(8)
    listing = f"ls -1a {FENCE_ROOT} 2>/dev/null | grep -e '^\\.epoch-'"
    return (
        f"mkdir -p {FENCE_ROOT} 2>/dev/null; {listing} >/dev/null"
        f" || mkdir {FENCE_ROOT}/.epoch-{fresh} 2>/dev/null; {listing}",
        fresh,
    )


def _epochs(listing: str) -> list[str]:
    """The epochs a listing of :data:`FENCE_ROOT` names (``.epoch-<hex>``), sorted."""
    return sorted(
        line.removeprefix(".epoch-")
        for line in listing.splitlines()
        if line.startswith(".epoch-") and _EPOCH.fullmatch(line.removeprefix(".epoch-"))
    )


async def ensure_epoch(device: Device) -> Epoch:
    """The phone's fence epoch, created if there is none (one round trip).

    Raises:
        BridgeError: transport failures; UnparseableOutput: an answer that names no epoch.
    """
    command, fresh = epoch_script()
    (step,) = await device.run([command])
    names = _epochs(step.output)
    if not names:
        raise UnparseableOutput(f"the phone named no fence epoch: {step.output.strip()[:200]}")
    return Epoch(epoch=names[0], created=names == [fresh])


def _void_step(dispatch_id: str, epoch: str, *, claim: bool = True) -> str:
    path = fence_path(dispatch_id)
    marker = f"{FENCE_ROOT}/.epoch-{check_epoch(epoch)}"
    epoch_ok = f"ls -d {marker} >/dev/null 2>&1"
    take, take_go = (
        (f"ln -s {VOID} {path} 2>/dev/null", f"ln -s {VOID} {path}.go 2>/dev/null")
        if claim
        else ("false", "false")
    )
    return (
        f'{epoch_ok} && {take}; echo "V:$?";'
        f' readlink {path} 2>/dev/null; echo "L:$?";'
        f" {epoch_ok} && readlink {path} 2>/dev/null | grep -qxF {SCRIPT}"
        f' && {take_go}; echo "G:$?";'
        f' readlink {path}.go 2>/dev/null; echo "R:$?";'
        f' readlink {path}.am 2>/dev/null; echo "A:$?";'
        f' readlink {path}.keys 2>/dev/null; echo "K:$?";'
        f' {epoch_ok}; echo "E:$?"'
    )


_SECTIONS = ("V", "L", "G", "R", "A", "K", "E")


def _parse_void(dispatch_id: str, output: str) -> FenceReport:
    codes: dict[str, int] = {}
    texts: dict[str, list[str]] = {key: [] for key in _SECTIONS}
    pending = list(_SECTIONS)
    for line in output.splitlines():
        match = re.fullmatch(r"([VLGRAKE]):(\d{1,3})", line)
        if match and pending and match.group(1) == pending[0]:
            codes[pending.pop(0)] = int(match.group(2))
            continue
        if pending:
            texts[pending[0]].append(line)
    if pending:
        raise UnparseableOutput("the fence answer is incomplete")
    stages = tuple(
        (stage, int(match.group(1)))
        for stage, key in (("am", "A"), ("keys", "K"))
        if codes[key] == 0 and len(texts[key]) == 1
        for match in [_MS.fullmatch(texts[key][0])]
        if match
    )
    if codes["V"] == 0:
        return FenceReport(
            dispatch_id=dispatch_id, state=FenceState.VOIDED, voided_now=True, voided_at="claim"
        )
    link = texts["L"] if codes["L"] == 0 else None
    if link == [VOID]:
        return FenceReport(dispatch_id=dispatch_id, state=FenceState.VOIDED, voided_at="claim")
    if link == [SCRIPT]:
        if codes["G"] == 0:
            return FenceReport(
                dispatch_id=dispatch_id,
                state=FenceState.VOIDED,
                stages=stages,
                voided_now=True,
                voided_at="go",
            )
        go = texts["R"] if codes["R"] == 0 else None
        if go == [VOID]:
            return FenceReport(
                dispatch_id=dispatch_id, state=FenceState.VOIDED, stages=stages, voided_at="go"
            )
        if go == [SCRIPT]:
            return FenceReport(dispatch_id=dispatch_id, state=FenceState.CLAIMED, stages=stages)
        if go is None and codes["G"] != 0 and codes["E"] == 0:
            # only a peek gets here (a void would have claimed go): the script is on its way
            return FenceReport(dispatch_id=dispatch_id, state=FenceState.OPEN, stages=stages)
    if link is None and codes["E"] != 0:
        return FenceReport(dispatch_id=dispatch_id, state=FenceState.LOST)
    if link is None and codes["V"] != 0 and codes["E"] == 0:
        return FenceReport(dispatch_id=dispatch_id, state=FenceState.OPEN)  # a peek: unclaimed
    raise UnparseableOutput("the fence names hold something neither side wrote")


async def void(device: Device, attempts: Sequence[tuple[str, str]]) -> tuple[FenceReport, ...]:
    """Claim the fence of each ``(dispatch_id, epoch)`` first, or learn that its script did
    (one round trip for all of them).

    Raises:
        BridgeError: transport failures or an unreadable answer (nothing is proven then; a
            void that did succeed is found again, idempotently, by the next call).
    """
    if not attempts:
        return ()
    steps = [_void_step(dispatch_id, epoch) for dispatch_id, epoch in attempts]
    outputs = await device.run(steps)
    return tuple(
        _parse_void(dispatch_id, step.output)
        for (dispatch_id, _epoch), step in zip(attempts, outputs, strict=True)
    )


async def peek(device: Device, attempts: Sequence[tuple[str, str]]) -> tuple[FenceReport, ...]:
    """Read the fence of each ``(dispatch_id, epoch)`` without claiming anything (one round
    trip): for an attempt whose sender may still be running, whose script must not be
    voided yet. OPEN: not claimed, or claimed but not yet ``go``; CLAIMED with its stages;
    VOIDED by an earlier void; LOST.

    Raises:
        BridgeError: transport failures or an unreadable answer.
    """
    if not attempts:
        return ()
    steps = [_void_step(dispatch_id, epoch, claim=False) for dispatch_id, epoch in attempts]
    outputs = await device.run(steps)
    return tuple(
        _parse_void(dispatch_id, step.output)
        for (dispatch_id, _epoch), step in zip(attempts, outputs, strict=True)
    )


def cleanup_command(dispatch_ids: Sequence[str], ledger_id: str | None = None) -> str:
    """``rm -f`` of the fence names of resolved attempts, of the output file a script
    stopped before its end left (:func:`output_path`), and of their marks of ``ledger_id``."""
    names = [
        f"{fence_path(dispatch_id)}{suffix}"
        for dispatch_id in dispatch_ids
        for suffix in ("", ".am", ".go", ".keys")
    ]
    if ledger_id is not None:
        names += [ledger_mark_path(dispatch_id, ledger_id) for dispatch_id in dispatch_ids]
    names += [output_path(dispatch_id) for dispatch_id in dispatch_ids]
    return "rm -f " + " ".join(names)


async def list_fences(device: Device) -> tuple[str, ...]:
    """The dispatch ids that have fence names on the phone (one round trip).

    Raises:
        BridgeError: transport failures.
    """
    (step,) = await device.run([f"ls -1a {FENCE_ROOT} 2>/dev/null"])
    names = set()
    for line in step.output.splitlines():
        if line.startswith(".") or not line:
            continue
        mark = _LEDGER_NAME.fullmatch(line)
        base = mark.group(1) if mark else line
        for suffix in (".am", ".go", ".keys"):
            base = base.removesuffix(suffix)
        if _NAME.fullmatch(base):
            names.add(base)
    return tuple(sorted(names))


async def remove_fences(
    device: Device, dispatch_ids: Sequence[str], ledger_id: str | None = None
) -> None:
    """``rm -f`` the fence names of these (resolved) attempts, with their marks of
    ``ledger_id``, in one round trip.

    Raises:
        BridgeError: transport failures.
    """
    if dispatch_ids:
        await device.run([cleanup_command(dispatch_ids, ledger_id)])


@attrs.frozen(kw_only=True)
class FenceLedgers:
    """Which ledgers the fence on the phone names (:func:`read_ledgers`)."""

    #: The ledger whose send script claimed a fence last (:data:`LEDGER_MARK`), or None.
    last: str | None = None
    #: ``dispatch_id -> ledger id`` of every attempt whose mark is still there (its ledger
    #: removes it once it holds the attempt resolved).
    attempts: dict[str, str] = attrs.field(factory=dict)


_LAST = "SBLEDGER"


async def read_ledgers(device: Device) -> FenceLedgers:
    """The ledgers the fence's folder names (one round trip: its listing, then the content
    of :data:`LEDGER_MARK`). Names that are not marks are skipped.

    Raises:
        BridgeError: transport failures.
    """
    (step,) = await device.run([LISTING_STEP])
    return parse_listing(step.output)[0]


#: One step that lists :data:`FENCE_ROOT` and prints :data:`LEDGER_MARK`: what
#: :func:`read_ledgers` runs, and what a connection's first round trip can carry
#: (``Device.connect``'s ``also``) so that the marks and the epoch cost no round trip of their
#: own. Reads only: it creates nothing (a phone with no epoch yet gets one from
#: :func:`ensure_epoch`).
LISTING_STEP: Final = (
    f"ls -1a {FENCE_ROOT} 2>/dev/null; echo {_LAST}; cat {LEDGER_MARK} 2>/dev/null"
)


def parse_listing(output: str) -> tuple[FenceLedgers, str | None]:
    """What :data:`LISTING_STEP` printed: the ledgers the fence names, and the phone's epoch
    as :func:`ensure_epoch` would print it when one exists (the first of the epochs the
    folder holds, sorted), else None."""
    names, _sep, last_text = output.partition(f"{_LAST}\n")
    epochs = _epochs(names)
    attempts: dict[str, str] = {}
    for line in names.splitlines():
        mark = _LEDGER_NAME.fullmatch(line.strip())
        if mark is not None and _NAME.fullmatch(mark.group(1)):
            attempts[mark.group(1)] = mark.group(2)
    last = last_text.strip()
    found = FenceLedgers(last=last if _LEDGER_ID.fullmatch(last) else None, attempts=attempts)
    return found, epochs[0] if epochs else None


async def forget_ledger_marks(device: Device, ledger_id: str, dispatch_ids: Sequence[str]) -> None:
    """``rm -f`` the marks of ``ledger_id`` of these resolved attempts (one round trip):
    another ledger no longer counts them as open.

    Raises:
        BridgeError: transport failures.
    """
    if dispatch_ids:
        names = [ledger_mark_path(dispatch_id, ledger_id) for dispatch_id in dispatch_ids]
        await device.run(["rm -f " + " ".join(names)])
