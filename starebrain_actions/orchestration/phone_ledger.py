"""One phone, one ledger: what the fence on the phone says about the other ledgers that use it.

Each ledger has an id of its own (``Ledger.ledger_id``), and each send script, once its fence
claim succeeded, records it on the phone: beside the attempt's fence name, and as the ledger
that sent last (``android_bridge._fence``, "Which ledger"). Before anything is recorded,
:func:`check_phone_ledger` reads those marks (the connection's first round trip lists them:
``AndroidPhone.connect``) and:

* refuses the phone (:class:`~starebrain_actions.core.exceptions.PhoneHeldByAnotherLedger`)
  when another ledger still has attempts marked open there: neither ledger's lease holds the
  other back, and each could attribute the other's messages, or send what the other sent;
* otherwise, when another ledger sent from the phone last, returns a :class:`SharedPhone`,
  logged as a warning once (the next send of this ledger makes it the last, so a phone
  handed from one ledger to the other warns once per hand-over);
* with ``share_phone``, goes on in both cases (the caller knows), logging what it found.

A ledger removes its own marks once it finds their attempts resolved (here, and after each
send, :func:`forget_resolved_marks`). Advisory: the marks are read once per connection, two
ledgers checking at the same moment both pass, and a phone whose marks cannot be read is not
refused (the fence itself still works).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core.exceptions import PhoneError, PhoneHeldByAnotherLedger
from starebrain_actions.core.model import ActionRecord
from starebrain_actions.core.ports import LedgerMarks, MarksLedgers
from starebrain_actions.ledger.store import Ledger

__all__ = ["SharedPhone", "check_phone_ledger", "forget_resolved_marks"]

_log = get_logger("starebrain.agent")

#: How many of the other ledger's open attempts a message names.
_SHOWN = 5


@attrs.frozen(kw_only=True)
class SharedPhone:
    """Another ledger the fence on a phone names (:func:`check_phone_ledger`)."""

    #: the phone, as the ledger names it
    device: str
    #: this ledger's own id, and where it is (a file, or a URL without its password)
    ledger_id: str
    ledger_where: str
    #: the other ledger's id, as the phone names it
    other_ledger_id: str
    #: the other ledger's attempts still marked open on the phone (empty: none)
    open_attempts: tuple[str, ...] = ()
    #: True when the caller allowed it (``share_phone``)
    allowed: bool = False

    def message(self) -> str:
        """One paragraph naming both ledgers, and what follows."""
        ours = f"this ledger is {self.ledger_id} ({self.ledger_where})"
        if self.open_attempts:
            shown = ", ".join(self.open_attempts[:_SHOWN])
            more = len(self.open_attempts) - _SHOWN
            found = (
                f"the fence on phone {self.device} names another ledger, {self.other_ledger_id},"
                f" with {len(self.open_attempts)} attempt(s) still open there ({shown}"
                + (f" and {more} more" if more > 0 else "")
                + f"); {ours}"
            )
        else:
            found = (
                f"phone {self.device} was last sent from by another ledger,"
                f" {self.other_ledger_id}; {ours}"
            )
        return found + (
            ". Two ledgers on one phone each see only their own sends: both may send the"
            " same message, and neither's lease holds the other back"
        )


async def check_phone_ledger(
    ledger: Ledger, phone: MarksLedgers, device: str, *, share_phone: bool = False
) -> SharedPhone | None:
    """Read which ledgers the fence on ``phone`` names, tidy this ledger's own marks of
    resolved attempts, and refuse, warn or go on (see the module docstring). None: no other
    ledger is named (or the marks could not be read: logged).

    Raises:
        PhoneHeldByAnotherLedger: another ledger's attempts are still marked open on the
            phone, and ``share_phone`` is False (nothing was recorded or sent).
    """
    ours = await ledger.ledger_id()
    try:
        marks = await phone.ledger_marks()
    except PhoneError as exc:
        _log.warning("phone_ledger_unchecked", device=device, error=str(exc))
        return None
    await _tidy(ledger, phone, device, ours, marks)
    foreign = sorted(
        (ledger_id, dispatch_id)
        for dispatch_id, ledger_id in marks.attempts.items()
        if ledger_id != ours
    )
    if foreign:
        # the ledger of the most open attempts is named (two other ledgers: a rare case,
        # whose second one the next check names)
        counts: dict[str, int] = {}
        for ledger_id, _dispatch_id in foreign:
            counts[ledger_id] = counts.get(ledger_id, 0) + 1
        other = max(sorted(counts), key=lambda ledger_id: counts[ledger_id])
        held = tuple(dispatch_id for ledger_id, dispatch_id in foreign if ledger_id == other)
    elif marks.last is not None and marks.last != ours:
        other, held = marks.last, ()
    else:
        return None
    shared = SharedPhone(
        device=device,
        ledger_id=ours,
        ledger_where=str(ledger.path),
        other_ledger_id=other,
        open_attempts=held,
        allowed=share_phone,
    )
    if held and not share_phone:
        _log.warning(
            "phone_held_by_another_ledger", device=device, other_ledger=other, open=len(held)
        )
        raise PhoneHeldByAnotherLedger(
            shared.message() + ". Nothing was recorded or sent. Let that ledger finish"
            " (`starebrain resume` or `starebrain reconcile` with it settles its attempts and"
            " removes their marks), or send knowingly with --share-phone"
            " (SmsAgent.open(share_phone=True))",
            ledger_id=ours,
            other_ledger_id=other,
            open_attempts=held,
        )
    if share_phone:
        _log.info("phone_shared_knowingly", device=device, other_ledger=other, open=len(held))
    else:
        _log.warning("phone_used_by_another_ledger", device=device, other_ledger=other)
    return shared


async def forget_resolved_marks(
    ledger: Ledger,
    phone: MarksLedgers,
    dispatch_ids: Collection[str],
    *,
    known: Iterable[ActionRecord] = (),
) -> set[str]:
    """Remove from the phone the marks of those of ``dispatch_ids`` (this ledger's attempts
    whose send scripts marked them) that the ledger holds resolved now (one round trip, none
    when there are none); the ids removed. A phone that cannot be asked removes nothing (a
    later check does it). ``known``: records the caller read from the ledger; those final
    are not read again (a final state is never left: DESIGN.md invariant 6), the others are.
    """
    if not dispatch_ids:
        return set()
    ledger_id = await ledger.ledger_id()
    final = {record.dispatch_id for record in known if record.is_final}
    unknown = sorted(dispatch_id for dispatch_id in dispatch_ids if dispatch_id not in final)
    records = await ledger.attempts_by_id(unknown) if unknown else {}
    done = sorted(
        dispatch_id
        for dispatch_id in dispatch_ids
        if dispatch_id in final
        or ((record := records.get(dispatch_id)) is not None and record.is_final)
    )
    if not done:
        return set()
    try:
        await phone.forget_ledger_marks(ledger_id, done)
    except PhoneError as exc:
        _log.info("ledger_marks_kept", error=str(exc), attempts=len(done))
        return set()
    return set(done)


async def _tidy(
    ledger: Ledger, phone: MarksLedgers, device: str, ours: str, marks: LedgerMarks
) -> None:
    """This ledger's marks of attempts it holds resolved, removed from the phone."""
    mine = [dispatch_id for dispatch_id, ledger_id in marks.attempts.items() if ledger_id == ours]
    removed = await forget_resolved_marks(ledger, phone, mine)
    if removed:
        _log.info("ledger_marks_removed", device=device, attempts=len(removed))
