"""One "host" of the multi-host test: an OS process of its own with its own PostgreSQL
connections, driving every phone it is given through ``SmsAgent`` until its actions are
settled.

``python -m tests.multihost._host SPEC.json`` (the test writes the spec). It runs one task per
phone, each sending that phone's actions in turn, again and again until each is settled (see
:func:`tests.chaos.harness.settled`). The test kills it with ``kill -9`` and restarts it with
the same action ids, terminates its backends, and restarts the server under it: whatever a
call raises (the ledger unreachable, a connection cut mid-transaction, the phone) is reported
as an ``error`` line and the call is tried again, with the agent opened afresh if it was the
opening that failed. Each outcome is a JSON line on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from starebrain_actions import RetryPolicy
from starebrain_actions._logging import configure_logging
from starebrain_actions.core.exceptions import LedgerUnavailable
from starebrain_actions.orchestration.agent import SmsAgent
from tests.chaos.harness import settled


def emit(**data: Any) -> None:
    """One JSON line for the test."""
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def policy_of(spec: dict[str, Any]) -> RetryPolicy:
    """The retry policy every host gives every action (one fingerprint for all)."""
    return RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=int(spec["maximum_attempts"]),
        initial_interval=timedelta(seconds=spec["initial_interval_s"]),
        maximum_interval=timedelta(seconds=1),
        grace_window=timedelta(seconds=spec["grace_s"]),
        unverified_after=timedelta(seconds=spec["unverified_after_s"]),
    )


def failure(exc: BaseException) -> str:
    """The exception and the one it came from, by class, for the test's tally; one that is
    not the ledger's ``LedgerUnavailable`` gets its traceback in the host's log (stderr)."""
    if not isinstance(exc, LedgerUnavailable):
        traceback.print_exception(exc, file=sys.stderr)
    cause = exc.__cause__ or exc.__context__
    name = type(exc).__name__
    return f"{name} <- {type(cause).__name__}" if cause is not None else name


async def drive_phone(spec: dict[str, Any], phone: dict[str, Any], actions: list[Any]) -> bool:
    """Send ``actions`` through one phone until each is settled or the deadline; True when
    every one is."""
    deadline = float(spec["deadline"])
    pending = list(actions)
    while pending and time.time() < deadline:
        try:
            async with SmsAgent.open(
                db=spec["db"],
                device=phone["serial"],
                policy=policy_of(spec),
                key_path=spec["key"],
                poll_interval_s=0.2,
                connect_timeout_s=1.0,
                command_timeout_s=spec["command_timeout_s"],
                read_as_system=True,
                void_after=timedelta(seconds=spec["void_after_s"]),
                rate_limit=1000,
            ) as agent:
                while pending and time.time() < deadline:
                    for action in list(pending):
                        left = deadline - time.time()
                        if left <= 0:
                            break
                        try:
                            outcome = await agent.send(
                                action["action_id"],
                                action["to"],
                                action["body"],
                                wait=min(spec["send_wait_s"], left),
                            )
                        except Exception as exc:
                            emit(event="error", action_id=action["action_id"], error=failure(exc))
                            await asyncio.sleep(0.2)
                            continue
                        done = settled(outcome.summary)
                        emit(
                            event="outcome",
                            action_id=action["action_id"],
                            status=outcome.status.value,
                            done=done,
                        )
                        if done:
                            pending.remove(action)
        except Exception as exc:  # opening the ledger or the phone; or closing after a cut
            emit(event="error", action_id=None, error=f"open: {failure(exc)}")
            await asyncio.sleep(0.3)
    return not pending


async def main(spec: dict[str, Any]) -> int:
    """Every phone's actions at once, one task per phone; 0 when all are settled."""
    by_phone: dict[int, list[Any]] = {}
    for action in spec["actions"]:
        by_phone.setdefault(action["phone"], []).append(action)
    results = await asyncio.gather(
        *(
            drive_phone(spec, spec["phones"][index], actions)
            for index, actions in sorted(by_phone.items())
        )
    )
    return 0 if all(results) else 3


if __name__ == "__main__":
    configure_logging(level=logging.CRITICAL, json=True)
    loaded = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(asyncio.run(main(loaded)))
