"""A fence on the phone: proof that a send script has not run, and never will.

An ordinary read cannot see a queued or failed SMS, nor an RCS chat, so the absence of a
message proves nothing. The fence proves absence on the phone itself, with the one thing the
phone makes atomic for the shell user: creating a name in a directory it owns.

* ``/data/local/tmp`` belongs to the shell user (``0771 shell:shell``, created by ``init.rc``)
  and survives reboots. The fence lives in :data:`FENCE_ROOT` below it.
* The send script **claims** ``$FENCE_ROOT/<dispatch_id>`` first, with toybox ``mkdir``
  (no ``-p``: it fails, exit 1, when the name exists), and runs everything else only after
  that succeeded. It then leaves stage markers in it: ``am-<ms>`` once ``am`` reported a
  clean launch, ``keys-<ms>`` once the send keys were pressed (the phone's clock, ms).
* To **void** an attempt, the reconciler claims the same name first, as a symlink
  (``ln -s void``; ``symlink(2)`` fails with ``EEXIST`` whatever holds the name). If that
  succeeds, the script had not claimed it, and any late or replayed copy fails its own claim
  and stops before ``am``: nothing was or can still be sent. If the name is a directory, the
  script started, and its stage markers say how far it got.
* An **epoch** directory ``$FENCE_ROOT/.epoch-<hex>``, noted in the ledger when the attempt is
  created, must exist for the script to claim and for the reconciler to void: if the folder
  was cleared (``rm -rf /data/local/tmp/*``, a factory reset), a missing claim proves nothing,
  and neither side acts on it.
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Sequence

import attrs

from android_bridge._device import Device
from android_bridge.exceptions import CommandRejected, UnparseableOutput

#: Where the fence's names live on the phone (the shell user's own directory).
FENCE_ROOT = "/data/local/tmp/starebrain"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_EPOCH = re.compile(r"[0-9a-f]{8,32}")
_STAGE = re.compile(r"(am|keys)-(\d{1,19})")


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


def fence_path(dispatch_id: str) -> str:
    """The name an attempt's send script claims."""
    return f"{FENCE_ROOT}/{check_name(dispatch_id)}"


def claim_prefix(dispatch_id: str, epoch: str, ok_marker: str) -> str:
    """The start of a send script: the epoch must exist and the claim must succeed, else
    nothing after it runs. Ends with ``&&``-able text (no trailing operator)."""
    path = fence_path(dispatch_id)
    return (
        f"ls -d {FENCE_ROOT}/.epoch-{check_epoch(epoch)} >/dev/null 2>&1"
        f" && mkdir {path} 2>/dev/null && echo {ok_marker}"
    )


def stage_command(dispatch_id: str, stage: str) -> str:
    """``mkdir`` of a stage marker named after the phone's clock."""
    return f'mkdir {fence_path(dispatch_id)}/{stage}-"$(date +%s%3N)"'


class FenceState(enum.StrEnum):
    """What the fence showed for one attempt."""

    #: The reconciler holds the name: the script never claimed it and never will.
    VOIDED = "voided"
    #: The send script claimed the name: it started; ``stages`` say how far it got.
    CLAIMED = "claimed"
    #: The epoch is gone (the folder was cleared or the phone wiped): no proof either way.
    LOST = "lost"


@attrs.frozen(kw_only=True)
class FenceReport:
    """The fence of one attempt, as read (and, to void, claimed) on the phone."""

    dispatch_id: str
    state: FenceState
    #: Stage markers the script left, ``(stage, phone clock ms)``, oldest first.
    stages: tuple[tuple[str, int], ...] = ()
    #: True when this very call created the void (False: an earlier one did, or none).
    voided_now: bool = False


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


async def ensure_epoch(device: Device) -> Epoch:
    """The phone's fence epoch, created if there is none (one round trip).

    Raises:
        BridgeError: transport failures; UnparseableOutput: an answer that names no epoch.
    """
    command, fresh = epoch_script()
    (step,) = await device.run([command])
    names = sorted(
        line.removeprefix(".epoch-")
        for line in step.output.splitlines()
        if line.startswith(".epoch-") and _EPOCH.fullmatch(line.removeprefix(".epoch-"))
    )
    if not names:
        raise UnparseableOutput(f"the phone named no fence epoch: {step.output.strip()[:200]}")
    return Epoch(epoch=names[0], created=names == [fresh])


def _void_step(dispatch_id: str, epoch: str) -> str:
    path = fence_path(dispatch_id)
    marker = f"{FENCE_ROOT}/.epoch-{check_epoch(epoch)}"
    return (
        f'ls -d {marker} >/dev/null 2>&1 && ln -s void {path} 2>/dev/null; echo "V:$?";'
        f' readlink {path} 2>/dev/null; echo "L:$?";'
        f' ls -1 {path} 2>/dev/null; echo "D:$?";'
        f' ls -d {marker} >/dev/null 2>&1; echo "E:$?"'
    )


def _parse_void(dispatch_id: str, output: str) -> FenceReport:
    lines = output.splitlines()
    codes: dict[str, int] = {}
    listed: list[str] = []
    link: list[str] = []
    section = "V"
    for line in lines:
        match = re.fullmatch(r"([VLDE]):(\d{1,3})", line)
        if match:
            codes[match.group(1)] = int(match.group(2))
            section = {"V": "L", "L": "D", "D": "E", "E": "-"}[match.group(1)]
            continue
        if section == "L":
            link.append(line)
        elif section == "D":
            listed.append(line)
    if set(codes) != {"V", "L", "D", "E"}:
        raise UnparseableOutput("the fence answer is incomplete")
    if codes["V"] == 0:
        return FenceReport(dispatch_id=dispatch_id, state=FenceState.VOIDED, voided_now=True)
    if codes["L"] == 0 and link == ["void"]:
        return FenceReport(dispatch_id=dispatch_id, state=FenceState.VOIDED)
    if codes["D"] == 0 and codes["L"] != 0:
        stages = sorted(
            (match.group(1), int(match.group(2)))
            for name in listed
            for match in [_STAGE.fullmatch(name)]
            if match
        )
        return FenceReport(
            dispatch_id=dispatch_id,
            state=FenceState.CLAIMED,
            stages=tuple(sorted(stages, key=lambda stage: stage[1])),
        )
    if codes["E"] != 0:
        return FenceReport(dispatch_id=dispatch_id, state=FenceState.LOST)
    raise UnparseableOutput("the fence name is neither ours nor the script's")


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


def cleanup_command(dispatch_ids: Sequence[str]) -> str:
    """``rm -rf`` of the fence names of resolved attempts."""
    return "rm -rf " + " ".join(fence_path(dispatch_id) for dispatch_id in dispatch_ids)
