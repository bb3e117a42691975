"""``starebrain reconcile`` and ``starebrain nightly``: read the phones and settle what they
prove, once by hand or every night from cron (``run_nightly_command`` also runs the nightly
job's own command, ``main.nightly_main``)."""

from __future__ import annotations

import itertools
import shutil
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starebrain_actions.cli.context import (
    DB_ENV,
    EXIT_ERROR,
    CliError,
    CliUsageError,
    Settings,
    ledger_path,
    open_ledger,
    run,
    settings_of,
    warn_if_readable,
)
from starebrain_actions.cli.db import LedgerTarget, is_url
from starebrain_actions.cli.options import (
    DEVICE_ENV,
    Seconds,
    device_option,
    json_option,
    key_option,
    policy_file_option,
    share_phone_option,
    typed_command_gate,
)
from starebrain_actions.core.convert import to_jsonable
from starebrain_actions.core.exceptions import (
    CorruptRecord,
    LedgerUnavailable,
    SchemaTooNew,
)
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render import output as _render

T = TypeVar("T")

if TYPE_CHECKING:
    from starebrain_actions.orchestration.agent import ReconcilePass
    from starebrain_actions.orchestration.nightly.report import NightlyReport


@contextmanager
def _progress(enabled: bool, label: str) -> Iterator[Callable[[str, int, int], None] | None]:
    """A rich progress bar on stderr when it is a TTY; ``None`` (no callback) otherwise."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(device: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{label} {device}")

        yield update


def _reply_keywords() -> Any:
    """The default policy file's rules (for their ``[replies]`` keywords), or None.

    Raises:
        CliUsageError: the file cannot be read.
    """
    from starebrain_actions.cli.options import policy_for
    from starebrain_actions.core.exceptions import InvalidInput

    try:
        return policy_for(None, approve="never", short_codes="allow")
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc


@click.command("reconcile")
@device_option(
    "devices",
    multiple=True,
    help="A device to read (HOST:PORT or usb:SERIAL); repeatable. Also read from"
    f" ${DEVICE_ENV} (several separated by spaces). [default: every device with attempts"
    " in flight]",
)
@key_option
@json_option
@click.pass_context
def reconcile(
    ctx: click.Context, devices: tuple[str, ...], key_path: Path | None, as_json: bool
) -> None:
    """Read the phones once and settle what they prove; never sends. Prints what changed.

    Exit status: 0 when every device was read, 1 when one could not be (it is reported and
    nothing of it changes but the error noted).
    """
    from starebrain_actions.orchestration.agent import reconcile_pending

    path = ledger_path(settings_of(ctx), create=False)
    show_bar = sys.stderr.isatty() and not as_json

    keywords = _reply_keywords()

    async def work() -> ReconcilePass | list[str]:
        async with open_ledger(path, create=False) as ledger:
            # the replies the reads see are judged by the default policy file's keywords
            # ([replies]; CTIA's without one): reconcile never sends, so nothing else of
            # the policy applies here
            ledger.gate = keywords
            targets = list(devices) or await ledger.devices_in_flight()
            if not targets:
                # no phone to read; the deadlines passed with nothing sent are recorded still
                return await ledger.expire_due()
            with _progress(show_bar, "reconciling") as progress:
                return await reconcile_pending(
                    ledger,
                    targets,
                    key_path=str(key_path) if key_path is not None else None,
                    progress=progress,
                    read_as_system=settings_of(ctx).read_as_system,
                )

    result = run(work())
    if isinstance(result, list):
        if as_json:
            _render_json.emit_json(
                {
                    "started_at": None,
                    "finished_at": None,
                    "devices": [],
                    "changes": [],
                    "expired": result,
                }
            )
        else:
            click.echo("nothing in flight: no device to read")
            _say_expired(result)
        return
    if as_json:
        data = to_jsonable(result)
        data["changes"] = to_jsonable(list(result.changes))
        _render_json.emit_json(data)
    else:
        render_pass(_render.Output(), result)
        _say_expired(list(result.expired))
    if result.unreachable:
        ctx.exit(EXIT_ERROR)


def _say_expired(expired: list[str]) -> None:
    """Name the actions whose expiry the pass recorded, if any."""
    if expired:
        click.echo(f"expired (deadline passed, nothing sent; never sent): {', '.join(expired)}")


def render_pass(out: _render.Output, result: ReconcilePass) -> None:
    """Print a reconcile pass: one line per device, then every change."""
    out.table(
        ["device", "read", "mode", "round trips", "changes", "duplicates", "in flight", "error"],
        (
            [
                report.device,
                "yes" if report.reachable else "NO",
                report.mode or "-",
                str(report.round_trips),
                str(len(report.changes)),
                str(report.duplicates_recorded),
                str(report.in_flight),
                report.error or "-",
            ]
            for report in result.devices
        ),
        title="devices",
    )
    changes = result.changes
    if not changes:
        out.line("no changes")
        return
    out.table(
        ["action", "dispatch id", "event", "from", "to"],
        (
            [
                change.action_id,
                change.dispatch_id,
                change.event.value,
                change.from_status.value,
                change.to_status.value,
            ]
            for change in changes
        ),
        title="changes",
    )


def _check_report_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Any:
    """``--report``'s directory must exist: it is not created (a typo in a cron line should
    fail, not scatter directories)."""
    if value is not None and not (value.parent if str(value.parent) else Path()).is_dir():
        raise click.BadParameter(
            f"directory {value.parent} does not exist (it is not created)", ctx=ctx, param=param
        )
    return value


def nightly_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        device_option(
            "devices",
            multiple=True,
            help="Also read this device (HOST:PORT or usb:SERIAL) even with nothing in flight;"
            f" repeatable. Also read from ${DEVICE_ENV} (several separated by spaces).",
        ),
        click.option(
            "--report",
            "report_path",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            callback=_check_report_path,
            help="Write the JSON report here (atomically: a temporary file, then a rename);"
            " its directory must exist.",
        ),
        click.option(
            "--archive",
            "archive_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Keep a Markdown copy as DIR/YYYY-MM-DD.md (-2, -3... for later runs that"
            " day); committed when DIR is in a git repository.",
        ),
        click.option(
            "--resume",
            is_flag=True,
            help="After the read, finish what was started (as `starebrain resume`): send the"
            " actions that FAILED with attempts left on their own phones, the PLANNED ones on"
            " the phone their sender named, and PLANNED ones that name none on the phones"
            " given with --device. Without it they are attention items once idle past"
            " --unsent-after.",
        ),
        click.option(
            "--unsent-after",
            type=Seconds(maximum=30 * 86_400),
            default=3600.0,
            show_default=True,
            help="An action PLANNED this long, or FAILED with attempts left and idle this long,"
            " is one nothing is sending: it needs a person (exit 1).",
        ),
        policy_file_option,
        share_phone_option,
        click.option(
            "--resume-wait",
            type=Seconds(maximum=3600),
            default=30.0,
            show_default=True,
            help="With --resume: seconds each action may wait for proof of its outcome.",
        ),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Report the ledger as it stands: read no phone, write nothing to the ledger"
            " and take no lock (the ledger is opened read-only: works on a read-only copy).",
        ),
        key_option,
        json_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


def run_nightly_command(
    *,
    settings: Settings,
    devices: Sequence[str],
    report_path: Path | None,
    archive_dir: Path | None,
    key_path: Path | None,
    as_json: bool,
    dry_run: bool = False,
    resume: bool = False,
    unsent_after: float = 3600.0,
    resume_wait: float = 30.0,
    share_phone: bool = False,
    policy_path: Path | None = None,
) -> int:
    """The nightly job behind both ``starebrain nightly`` and ``scripts/nightly_reconcile.py``.

    Returns the exit status: 0 nothing needs a person (or another run holds the lock), 1
    something does, 2 usage error (including a missing or unusable ledger). ``dry_run``: no
    phone read, no lock, the ledger opened read-only.
    """

    from starebrain_actions.orchestration.nightly import archive as _nightly_archive
    from starebrain_actions.orchestration.nightly import lock as _nightly_lock
    from starebrain_actions.orchestration.nightly import report as _nightly_report
    from starebrain_actions.orchestration.nightly import run as _nightly_run

    # --resume sends as `starebrain resume` does: through the policy gate
    gate = typed_command_gate(policy_path) if resume else None
    path = _nightly_ledger(settings.db)
    try:
        # on PostgreSQL ``run_nightly`` takes the lock, an advisory lock in the database
        with nullcontext() if dry_run or is_url(path) else _nightly_lock.nightly_lock(Path(path)):
            report = _run_returning(
                _nightly_run.run_nightly(
                    path,
                    devices=devices,
                    key_path=key_path,
                    read_as_system=settings.read_as_system,
                    dry_run=dry_run,
                    resume=resume,
                    resume_wait_s=resume_wait,
                    share_phone=share_phone,
                    unsent_after=timedelta(seconds=unsent_after),
                    gate=gate,
                )
            )
    except _nightly_lock.NightlyBusy as exc:
        if as_json:
            _render_json.emit_json({"skipped": str(exc), "exit_code": _nightly_report.EXIT_OK})
        else:
            click.echo(f"starebrain nightly: {exc}")
        return _nightly_report.EXIT_OK
    except (LedgerUnavailable, SchemaTooNew, CorruptRecord) as exc:
        raise CliUsageError(f"cannot use the ledger: {exc}") from exc
    code = report.exit_code
    # the JSON is written a line of the report at a time (report_json_chunks), never held
    # whole: a backlog's report lists every unresolved attempt
    extra = {"dry_run": True} if dry_run else {}
    if report_path is not None:
        try:
            _nightly_archive.write_text_atomic(
                report_path,
                itertools.chain(_nightly_report.report_json_chunks(report, extra), ("\n",)),
            )
        except OSError as exc:
            raise CliError(f"cannot write the report to {report_path}: {exc}") from exc
    notes: list[str] = []
    if archive_dir is not None:
        note, committed = _archive(archive_dir, report)
        notes.append(note)
        if not committed:
            code = _nightly_report.EXIT_NEEDS_PERSON
    _print_nightly(report, extra, notes, as_json=as_json, dry_run=dry_run, written=report_path)
    return code


def _run_returning(work: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(work)``, its result handed back outside the event loop's task: on
    Python 3.11, ``asyncio.run`` builds the repr of its main task (result included) when it
    restores the SIGINT handler, and a backlog's report (a line per unresolved attempt) made
    that a transient string of hundreds of megabytes."""
    import asyncio

    kept: list[T] = []

    async def main() -> None:
        kept.append(await work)

    asyncio.run(main())
    return kept[0]


def _nightly_ledger(target: LedgerTarget) -> LedgerTarget:
    """The nightly job's ledger: a URL as it is; a file must exist (it is never created
    here), and gets the warning of a file others can read.

    Raises:
        CliUsageError: no file at that path.
    """
    if is_url(target):
        return target
    path = Path(target)
    if not path.exists():
        raise CliUsageError(f"no ledger at {path}; check --db or ${DB_ENV}")
    warn_if_readable(path)
    return path


def _archive(archive_dir: Path, report: NightlyReport) -> tuple[str, bool]:
    """Keep the Markdown copy of ``report`` in ``archive_dir``: the note that says where,
    and False when it was written but could not be committed (a person must look).

    Raises:
        CliError: it could not be written.
    """
    from starebrain_actions.orchestration.nightly import archive as _nightly_archive

    try:
        archived = _nightly_archive.archive_report(archive_dir, report)
    except OSError as exc:
        raise CliError(f"cannot archive the report in {archive_dir}: {exc}") from exc
    if archived.error is not None:
        return f"archive: {archived.path} written but not committed: {archived.error}", False
    if archived.commit is not None:
        return f"archive: {archived.path} committed as {archived.commit[:12]}", True
    return f"archive: {archived.path}", True


def _print_nightly(
    report: NightlyReport,
    extra: dict[str, Any],
    notes: list[str],
    *,
    as_json: bool,
    dry_run: bool,
    written: Path | None = None,
) -> None:
    """The report on stdout, as JSON (``extra``: more top-level fields; the notes then on
    stderr) or as its summary lines, a line of the report at a time. ``written``: the file
    the same JSON was just written to (``--report``), copied out rather than encoded again
    (a backlog's report is most of the run's time to encode)."""
    from starebrain_actions.orchestration.nightly import report as _nightly_report
    from starebrain_actions.orchestration.nightly import text as _nightly_text

    if as_json:
        if written is not None and written.is_file():
            out = sys.stdout
            with written.open(encoding="utf-8") as source:
                shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
        else:
            for chunk in _nightly_report.report_json_chunks(report, extra):
                click.echo(chunk, nl=False)
            click.echo("")
        for note in notes:
            click.echo(note, err=True)
    else:
        if dry_run:
            click.echo("dry run: the ledger as it stands; no phone was read, nothing was written")
        for line in _nightly_text.iter_summary_lines(report):
            click.echo(line)
        for line in notes:
            click.echo(line)


@click.command("nightly")
@nightly_options
@click.pass_context
def nightly(
    ctx: click.Context,
    devices: tuple[str, ...],
    report_path: Path | None,
    archive_dir: Path | None,
    key_path: Path | None,
    as_json: bool,
    dry_run: bool,
    resume: bool,
    unsent_after: float,
    resume_wait: float,
    share_phone: bool,
    policy_path: Path | None,
) -> None:
    """Reconcile every device with attempts in flight, then report what needs a person;
    with --resume, finish what was started first (as `starebrain resume`).

    For cron. Exit status: 0 nothing needs a person, 1 something does (review items, an
    unreachable device still holding attempts, actions nothing is sending), 2 usage error.
    A second run while one is going prints one line and exits 0 without touching anything.

    The lock is <ledger>.nightly.lock next to a SQLite file; with a postgresql:// URL it is an
    advisory lock in the database (no file), which also keeps runs on other hosts apart.
    --report and --archive name their own places, whatever the ledger; a report names a URL
    ledger without its password.
    """
    ctx.exit(
        run_nightly_command(
            settings=settings_of(ctx),
            dry_run=dry_run,
            devices=devices,
            report_path=report_path,
            archive_dir=archive_dir,
            key_path=key_path,
            as_json=as_json,
            resume=resume,
            unsent_after=unsent_after,
            resume_wait=resume_wait,
            share_phone=share_phone,
            policy_path=policy_path,
        )
    )
