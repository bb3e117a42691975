"""When, after a send, a read first finds the message: ``SendTimer``, learnt per phone from
its sends and seeded from the ledger's history, so that a sender reads the phone when its row
can be there (and then 50 ms apart, the wait doubling up to the poll interval).
"""

from __future__ import annotations

import attrs

#: After a read that did not find a dispatched message, the next read comes this long after it
#: (at once, the first time, when the phone's send time is known), and each further one twice
#: as long after the last, up to the poll interval.
FIRST_RETRY_S = 0.05
#: A phone's learnt send time is exact enough once the earliest offset known to find a message
#: and the latest known not to are this close (or this share of the send time, if larger).
SEND_TIME_TOLERANCE_S = 0.01
SEND_TIME_TOLERANCE_SHARE = 0.05
#: After this many sends found at the first read, the lower bound is loosened by one
#: tolerance, so that a phone that got faster is noticed (one probe read, rarely a miss).
SEND_TIME_RECHECK_AFTER = 32
#: Confirmed attempts of the phone whose timing seeds the send time of a new agent (the
#: smallest is taken: a window this long drifts up by a scheduling slip at most per window).
SEND_TIME_HISTORY = 16
#: Before its own first send, an agent reads first this share earlier than the quickest
#: confirmation the ledger holds for the phone, so that agents that each send once (the CLI)
#: still bring the seed down towards the phone's real send time.
SEED_PROBE_SHARE = 0.1
#: A send time seeded from the ledger is used only up to this (older confirmations may come
#: from a later reconcile pass, not from the sender's own read).
SEND_TIME_SEED_MAX_S = 5.0


@attrs.define
class SendTimer:
    """When, after its send command returns, a read first finds a message a phone sent, learnt
    from this phone's sends (offsets in seconds from the end of the send command, which the
    keys or the framework call end: a slow command moves the message's time with it).

    A read finds the message only once the phone has written it as sent (the restricted view
    never shows the outbox; the radio takes the phone's send time). ``found_s`` is the earliest
    offset at which a read recently found it, ``missed_s`` the latest at which one did not: the
    first read of the next send comes at ``found_s`` when the two are close, or halfway between
    them to narrow them (a probe: when it misses, the next read comes at ``found_s``). A read at
    or past ``found_s`` that misses (the phone got slower) starts the bounds over. Before any
    send of its own, an agent starts from the ledger: the quickest confirmations of the phone's
    last attempts (``seed``).
    """

    #: earliest offset at which a read found a message (None: nothing learnt yet)
    found_s: float | None = None
    #: latest offset below ``found_s`` at which a read did not
    missed_s: float | None = None
    #: sends found at their first read since the bounds last moved
    quiet: int = 0
    #: sends learnt from
    sends: int = 0
    #: before any send of its own: the quickest confirmation in the ledger's history of the
    #: phone, in seconds from the start of the send command (the attempt's receipt)
    seed_s: float | None = None

    def tolerance(self) -> float:
        """How close the bounds must be for the first read to stop probing."""
        return max(SEND_TIME_TOLERANCE_S, SEND_TIME_TOLERANCE_SHARE * (self.found_s or 0.0))

    def due(self, command_s: float = 0.0) -> float | None:
        """The offset at which a read is expected to find the message of a send whose command
        took ``command_s``: ``found_s``, or before any send of its own the ledger's quickest
        confirmation (counted from the command's start); None: nothing known."""
        if self.found_s is not None:
            return self.found_s
        if self.seed_s is not None:
            return max(0.0, self.seed_s - command_s)
        return None

    def first_read(self, command_s: float = 0.0) -> float:
        """The offset of the first read after a send whose command took ``command_s`` (0: as
        soon as the command returns)."""
        if self.found_s is None:
            if self.seed_s is None:
                return 0.0
            # a share below the ledger's figure: each confirmation recorded lower lowers the
            # next agent's seed (a miss there is followed by a read at once)
            return max(0.0, (1 - SEED_PROBE_SHARE) * self.seed_s - command_s)
        if self.missed_s is None:
            # probe halfway down (a miss there costs no time when the next read, at found_s,
            # is still a round trip away)
            return self.found_s / 2
        if self.found_s - self.missed_s > self.tolerance():
            return (self.missed_s + self.found_s) / 2
        return self.found_s

    def next_read(
        self, missed_at: float, now: float, retry_s: float, cap_s: float, due: float | None
    ) -> tuple[float, float]:
        """After a read at ``missed_at`` that missed, ``now`` being the offset when it
        returned: the offset of the next read and the retry wait after that one. Below
        ``due`` (a probe), the next read comes at ``due``; otherwise ``retry_s`` after this
        one, and the wait doubles (from ``FIRST_RETRY_S`` if it was 0) up to ``cap_s``."""
        if due is not None and missed_at < due:
            return max(now, due), retry_s
        return now + retry_s, min(cap_s, max(FIRST_RETRY_S, 2 * retry_s))

    def first_retry(self, cap_s: float) -> float:
        """The wait after a send's first read at or past its due time, if it misses: none when
        a send time is known (the message is due; a read takes a round trip anyway), else
        ``FIRST_RETRY_S``; never more than ``cap_s``."""
        known = self.found_s is not None or self.seed_s is not None
        return 0.0 if known else min(FIRST_RETRY_S, cap_s)

    def seed(self, delays: list[float]) -> None:
        """Start from the ledger's history of this phone: seconds from attempts' receipts to
        their confirmations (upper bounds; the smallest is taken, ignored above a cap: a
        later pass, not the sender's read, confirmed those)."""
        usable = [delay for delay in delays if 0.0 <= delay <= SEND_TIME_SEED_MAX_S]
        if usable:
            self.seed_s = min(usable)

    def learn(self, missed: list[float], found: float, *, caught_sending: bool = False) -> None:
        """One send's reads: those at the offsets ``missed`` did not find its message, the
        one at ``found`` did. ``caught_sending``: that read saw the rows change while it ran
        and read again (the message was sent during it, which cost a round trip): it counts
        as a miss, and as found one tolerance later."""
        if caught_sending:
            missed, found = [*missed, found], found + self.tolerance()
        self.sends += 1
        last_miss = max(missed) if missed else None
        if self.found_s is None or (last_miss is not None and last_miss >= self.found_s):
            # the first send learnt, or the phone got slower than the bounds: start over
            self.found_s, self.missed_s, self.quiet = found, last_miss, 0
            return
        self.found_s = min(self.found_s, found)
        if last_miss is not None:
            self.missed_s = last_miss if self.missed_s is None else max(self.missed_s, last_miss)
            self.quiet = 0
            return
        self.quiet += 1
        if self.quiet >= SEND_TIME_RECHECK_AFTER and self.missed_s is not None:
            self.quiet = 0
            self.missed_s -= self.tolerance()
