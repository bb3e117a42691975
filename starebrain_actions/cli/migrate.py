"""``starebrain migrate --from PATH --to URL``: move a SQLite ledger to PostgreSQL.

The copy itself, and what it checks, is :func:`starebrain_actions.ledger.copy.copy_ledger`;
this module parses the arguments, says what happened, and keeps the URL's password out of
everything it prints.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from starebrain_actions.cli.options import json_option


def _check_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--to`` must be a well-formed PostgreSQL URL (a path here is a mistake: SQLite is the
    source); refused here, shown without its secrets, rather than by the driver."""
    from starebrain_actions.ledger.pg import BadUrl, check_url, is_url

    if value is None:
        return value
    if not is_url(value):
        raise click.BadParameter(
            "expected a postgresql://USER@HOST:PORT/DATABASE?search_path=SCHEMA URL, got"
            f" {shown(value)!r}",
            ctx=ctx,
            param=param,
        )
    try:
        check_url(value)
    except BadUrl as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


def shown(url: str) -> str:
    """The URL fit to print: without its secrets (``ledger.pg.redact``, which never fails)."""
    from starebrain_actions.ledger.pg import redact

    return redact(url)


def pasteable(url: str) -> str:
    """The URL to point agents at: ``url`` without its secrets (``ledger.pg.without_secrets``),
    never ``***`` (a masked URL pasted back fails to log in)."""
    from starebrain_actions.ledger.pg import without_secrets

    return without_secrets(url)


def redact_text(text: str, url: str) -> str:
    """``text`` with the URL's secrets, should they appear anywhere, replaced by ``***``."""
    from starebrain_actions.ledger.pg import redact_text as pg_redact_text

    return pg_redact_text(text, url)


@click.command("migrate")
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="PATH",
    help="The SQLite ledger file to copy (opened read-only; it is never changed).",
)
@click.option(
    "--to",
    "target",
    required=True,
    callback=_check_url,
    metavar="URL",
    help="The PostgreSQL ledger to copy into: postgresql://USER@HOST:PORT/DATABASE, with"
    " ?search_path=SCHEMA to choose the schema. It must be empty or hold an empty ledger.",
)
@json_option
def migrate_command(source: Path, target: str, as_json: bool) -> None:
    """Copy a SQLite ledger, history included, into an empty PostgreSQL ledger.

    Every action, attempt, duplicate and history entry is copied unchanged (the same values,
    the same history sequence numbers) in one PostgreSQL transaction, and checked before it
    commits: row counts, every row's contents, every action's derived status and review
    reasons, and that each attempt's history ends in its current states. If anything is
    refused or differs, nothing is kept and the command exits 1.

    The source is read as one snapshot, but agents still writing to it after the copy
    began are not copied: stop them first, then point them at the new ledger
    (--db URL or STAREBRAIN_DB=URL). The target's schema is created if it is empty; a
    target holding other tables or any action is refused, untouched.

    \b
    Example:
      starebrain migrate --from ~/.local/share/starebrain/ledger.db \\
          --to 'postgresql://starebrain@db.example:5432/sms?search_path=ledger'

    Exit status: 0 copied and verified, 1 refused or failed (nothing kept), 2 usage error.
    """
    from starebrain_actions.cli.context import CliError, CliUsageError
    from starebrain_actions.core.exceptions import StarebrainError
    from starebrain_actions.ledger.copy import MigrationError, copy_ledger
    from starebrain_actions.render import json_output as _render_json

    where = shown(target)
    chatty = not as_json and sys.stderr.isatty()

    def step(text: str) -> None:
        if chatty:
            click.echo(f"starebrain migrate: {text}…", err=True)

    try:
        report = copy_ledger(source, target, on_step=step)
    except MigrationError as exc:
        message = redact_text(str(exc), target)
        raise (CliUsageError if exc.usage else CliError)(message) from None
    except StarebrainError as exc:
        raise CliError(
            f"migrate to {where} failed: {redact_text(str(exc), target)}; nothing was kept"
        ) from None
    data: dict[str, Any] = {
        "source": str(report.source),
        "target": report.target,
        "copied": dict(report.rows),
        "summaries_compared": report.summaries_compared,
        "attempts_checked": report.attempts_checked,
        "last_sequence": report.last_sequence,
        "verified": list(report.checks),
        "copy_seconds": report.copy_seconds,
        "verify_seconds": report.verify_seconds,
    }
    if as_json:
        _render_json.emit_json(data)
        return
    click.echo(f"Copied {report.source} to {report.target}:")
    for table, count in report.rows.items():
        click.echo(f"  {table:<11} {count:>9}")
    click.echo(
        f"Verified before commit ({report.copy_seconds:.1f} s copying,"
        f" {report.verify_seconds:.1f} s checking):"
    )
    for check in report.checks:
        click.echo(f"  ok  {check}")
    click.echo(f"Point agents at it with --db '{pasteable(target)}' or STAREBRAIN_DB.")
    if pasteable(target) != target:
        click.echo(
            "That URL is the one given without its password: give agents the password in"
            " $PGPASSWORD or a ~/.pgpass file (HOST:PORT:DATABASE:USER:PASSWORD, mode 0600),"
            " which the PostgreSQL driver reads, rather than in a URL that is printed."
        )
