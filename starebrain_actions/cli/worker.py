"""``starebrain worker``: the long-running process beside the phones that sends what agents
queue for its pool (``send --queue``), until SIGTERM (``orchestration.worker.Worker``)."""

from __future__ import annotations

import json
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from starebrain_actions.cli.context import (
    EXIT_SUCCEEDED,
    CliUsageError,
    ledger_path,
    run,
    settings_of,
)
from starebrain_actions.cli.options import (
    DEVICE_ENV,
    Seconds,
    device_option,
    json_option,
    key_option,
    phone_options,
    policy_file_option,
    share_phone_option,
    typed_command_gate,
    wait_option,
)

if TYPE_CHECKING:
    from starebrain_actions.orchestration.worker import Worker, WorkerEvent


@click.command("worker")
@device_option(
    "devices",
    multiple=True,
    required=True,
    help="A phone this worker sends through, as HOST:PORT or usb:SERIAL; repeatable. Also"
    f" read from ${DEVICE_ENV} (several separated by spaces).",
)
@click.option(
    "--pool",
    default="default",
    show_default=True,
    metavar="NAME",
    help="The pool whose queued messages this worker sends (`send --queue --pool NAME`).",
)
@wait_option(
    help="Seconds each message may wait for proof of its outcome on its phone before the"
    " phone takes the next one (the proof is then followed by the phone's reads).",
)
@click.option(
    "--stale-after",
    type=Seconds(),
    default=30.0,
    show_default=True,
    help="A worker silent this long (no heartbeat) loses its phones and its messages in hand"
    " to another worker; a heartbeat comes every sixth of it.",
)
@phone_options
@share_phone_option
@key_option
@policy_file_option
@json_option
@click.pass_context
def worker_command(
    ctx: click.Context,
    devices: tuple[str, ...],
    pool: str,
    wait: float,
    stale_after: float,
    rate_limit: int,
    connect_timeout: float,
    command_timeout: float,
    send_path: str,
    share_phone: bool,
    key_path: Path | None,
    policy_path: Path | None,
    as_json: bool,
) -> None:
    """Send the messages queued for a pool through these phones, until stopped.

    Each phone takes the oldest message due, sends it through send's own path (its receipt
    first; proof only by reading the phone) and takes the next once its proof came or its
    --wait ended, within the phone's --rate-limit; what a phone was left with (an unknown
    outcome, a failed attempt) is finished first. One worker per phone: a phone another
    worker holds is waited for, and taken over once that worker's heartbeat is older than
    --stale-after (at once when it ran on this host and its process is gone).

    SIGTERM or Ctrl-C: each phone finishes the message in hand, then the worker lets go of
    its phones and exits 0; a second Ctrl-C stops at once (what was in hand is in the ledger
    and the next worker settles it by reading). kill -9 loses nothing either.

    Output: a line per message sent and per change of a phone (--json: one JSON object per
    line, for supervisors), and on a terminal a status line of what each phone is doing.
    """
    from starebrain_actions.core.exceptions import InvalidInput
    from starebrain_actions.orchestration.worker import Worker

    settings = settings_of(ctx)
    if stale_after < 3:
        raise CliUsageError("--stale-after must be at least 3 seconds")
    gate = typed_command_gate(policy_path)
    show = _Shown(as_json=as_json)
    try:
        worker = Worker(
            ledger_path(settings, create=True),
            list(devices),
            pool=pool,
            wait=wait,
            gate=gate,
            stale_after=timedelta(seconds=stale_after),
            heartbeat_s=stale_after / 6,
            on_event=show.event,
            key_path=key_path,
            read_as_system=settings.read_as_system,
            rate_limit=rate_limit,
            send_path=send_path,
            share_phone=share_phone,
            connect_timeout_s=connect_timeout,
            command_timeout_s=command_timeout,
        )
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    show.worker = worker
    run(_serve(worker, show))
    ctx.exit(EXIT_SUCCEEDED)


async def _serve(worker: Worker, show: _Shown) -> None:
    """Run the worker with SIGTERM and SIGINT asking it to stop (a second SIGINT cancels),
    and the status line shown on a terminal."""
    import asyncio

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    asked: list[int] = []

    def stop(signum: int) -> None:
        asked.append(signum)
        if len(asked) > 1 and signum == signal.SIGINT and task is not None:
            task.cancel()
            return
        worker.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    status = asyncio.create_task(show.status_line()) if show.live else None
    try:
        await worker.run()
    except asyncio.CancelledError:
        click.echo(
            "starebrain worker: stopped at once; the ledger holds what was in hand", err=True
        )
    finally:
        if status is not None:
            status.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


class _Shown:
    """What the worker prints: its events (a line each, or JSON lines) and, on a terminal,
    a status line of each phone's work, refreshed."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.live = not as_json and sys.stderr.isatty()
        self.worker: Worker | None = None
        self._console: Any = None
        self.started = time.monotonic()

    def event(self, event: WorkerEvent) -> None:
        if self.as_json:
            sys.stdout.write(json.dumps(event.data()) + "\n")
            sys.stdout.flush()
            return
        click.echo(event_line(event))

    async def status_line(self) -> None:
        """The status line on stderr, until cancelled."""
        import asyncio

        from rich.live import Live

        with Live("", transient=True, refresh_per_second=4, redirect_stdout=False) as live:
            while True:
                if self.worker is not None:
                    live.update(" | ".join(f"{d}: {what}" for d, what in self.worker.doing.items()))
                await asyncio.sleep(0.25)


def event_line(event: WorkerEvent) -> str:
    """One event as a line of text: time, phone, what happened."""
    from starebrain_actions.render import values as _render_values

    what = {
        "phone_ready": "ready",
        "phone_unavailable": "not answering",
        "phone_held": "held by another worker; waiting",
        "phone_taken": "taken over",
        "phone_lost": "lost to another worker",
        "phone_replaced": "another phone answers here now; connecting again",
        "phone_other_ledger": "another ledger's attempts are open on it; waiting",
        "phone_shared": "warning: another ledger sent from it last",
        "resumed": "resumed what was left",
        "claimed": "sending",
        "done": "done",
        "resting": "resting",
        "stopping": "stopping after the message in hand",
        "stopped": "stopped",
    }.get(event.event, event.event)
    parts = [_render_values.when(event.at), event.device, what]
    if event.action_id is not None:
        parts.append(event.action_id)
    if event.status is not None:
        parts.append(event.status)
    line = " ".join(parts)
    return f"{line}: {event.detail}" if event.detail else line
