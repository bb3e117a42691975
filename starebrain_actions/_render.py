"""Rendering for the ``starebrain`` CLI: rich tables on a TTY, plain text elsewhere, JSON.

Phone numbers and bodies are personal data: every renderer here redacts them unless the
operator asked to see them (``--show-private``). JSON goes through the package's one cattrs
converter, so machines read exactly what the records hold (redacted the same way).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

import attrs
import click
from rich.console import Console
from rich.table import Table

from starebrain_actions._convert import converter, format_time
from starebrain_actions._logging import SENSITIVE_KEYS
from starebrain_actions._model import (
    ActionRecord,
    ActionSummary,
    HistoryEntry,
    ProviderKind,
    Status,
    provider_row_name,
)

#: Stand-in for the hidden middle of a phone number (a fixed width: it reveals no length).
_MASK = "•••••"


# --------------------------------------------------------------------------- redaction


def redact_number(number: str) -> str:
    """``+12025550100`` -> ``+1•••••0100``: enough to tell numbers apart, not to dial one."""
    text = number.strip()
    if len(text) <= 6:
        return _MASK
    return text[:2] + _MASK + text[-4:]


def redact_body(body: str) -> str:
    """A body's length and a short hash: two equal bodies look equal, the text stays hidden."""
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:8]
    return f"<{len(body)} chars sha256:{digest}>"


def redact_data(value: Any, *, show_private: bool) -> Any:
    """A copy of JSON-able ``value`` with personal fields (``SENSITIVE_KEYS``) redacted."""
    if show_private:
        return value
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if key in SENSITIVE_KEYS and isinstance(item, str):
                result[key] = (
                    redact_body(item)
                    if key in ("body", "text", "sms_body")
                    else (redact_number(item))
                )
            else:
                result[key] = redact_data(item, show_private=False)
        return result
    if isinstance(value, list | tuple):
        return [redact_data(item, show_private=False) for item in value]
    return value


# --------------------------------------------------------------------------- JSON


def summary_data(summary: ActionSummary, *, show_private: bool) -> dict[str, Any]:
    """An action summary as JSON-able data: the record fields plus what is derived."""
    data: dict[str, Any] = converter.unstructure(summary)
    data["needs_review"] = summary.needs_review
    data["latest"] = data["attempts"][-1] if data["attempts"] else None
    return dict(redact_data(data, show_private=show_private))


def history_data(entries: Sequence[HistoryEntry], *, show_private: bool) -> list[Any]:
    """History entries as JSON-able data."""
    return list(redact_data(converter.unstructure(list(entries)), show_private=show_private))


def emit_json(data: Any) -> None:
    """Print ``data`` (records are unstructured first) as indented, key-sorted JSON."""
    plain = converter.unstructure(data) if attrs.has(type(data)) else data
    click.echo(json.dumps(plain, indent=2, ensure_ascii=False, sort_keys=True, default=str))


# --------------------------------------------------------------------------- text output


class Output:
    """Where human output goes: a rich console on a TTY, aligned plain text otherwise."""

    def __init__(self, *, rich: bool | None = None, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.rich = sys.stdout.isatty() if rich is None else rich

    def _console(self) -> Console:
        # Resolved at print time so click's test runner (which swaps sys.stdout) sees it.
        return Console(file=self._stream or sys.stdout, highlight=False, soft_wrap=False)

    def line(self, text: str = "") -> None:
        """Print one line of plain text (no markup)."""
        if self.rich:
            self._console().print(text, markup=False)
        else:
            click.echo(text, file=self._stream)

    def heading(self, text: str) -> None:
        """Print a section heading."""
        if self.rich:
            self._console().print(f"[bold]{_escape(text)}[/bold]")
        else:
            click.echo(text, file=self._stream)

    def fields(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Print ``name: value`` lines, names aligned."""
        items = list(pairs)
        width = max((len(name) for name, _ in items), default=0)
        if self.rich:
            table = Table.grid(padding=(0, 2))
            table.add_column(style="bold")
            table.add_column()
            for name, value in items:
                table.add_row(name, value)
            self._console().print(table)
            return
        for name, value in items:
            click.echo(f"{name + ':':<{width + 1}} {value}", file=self._stream)

    def table(
        self, columns: Sequence[str], rows: Iterable[Sequence[str]], *, title: str | None = None
    ) -> None:
        """Print a table; in plain text, whitespace-aligned columns with a header line."""
        body = [list(row) for row in rows]
        if self.rich:
            table = Table(title=title, show_lines=False, header_style="bold")
            last = len(columns) - 1
            for index, column in enumerate(columns):
                # ids and times stay whole; only the last (free text) column wraps
                table.add_column(column, no_wrap=index != last, overflow="fold")
            for row in body:
                table.add_row(*row)
            self._console().print(table)
            return
        if title:
            click.echo(title, file=self._stream)
        widths = [len(column) for column in columns]
        for row in body:
            for index, cell in enumerate(row):
                widths[index] = max(widths[index], len(cell))
        for row in [list(columns), *body]:
            text = "  ".join(cell.ljust(widths[index]) for index, cell in enumerate(row))
            click.echo(text.rstrip(), file=self._stream)


def _escape(text: str) -> str:
    return text.replace("[", "\\[")


# --------------------------------------------------------------------------- formatting


def when(value: datetime | None) -> str:
    """A time as the ledger writes it, or ``-``."""
    return format_time(value) if value is not None else "-"


def age(delta: timedelta) -> str:
    """A short human age: ``42s``, ``7m``, ``5h``, ``3d``."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def provider_row_text(provider_object_id: int | None, kind: ProviderKind | str | None) -> str:
    """A provider row for a table cell: an SMS row as its bare ``_id`` (``812``, as always),
    any other with its table named (``mms _id 12``: MMS ``_id``s are another numbering),
    ``-`` for none. ``kind`` may be the stored text (``"mms"``), as ``Ledger.duplicates``
    gives it; None with an ``_id`` is an SMS row."""
    if provider_object_id is None:
        return "-"
    provider_kind = ProviderKind.SMS if kind is None else ProviderKind(kind)
    if provider_kind is ProviderKind.SMS:
        return str(provider_object_id)
    return provider_row_name(provider_kind, provider_object_id)


def recipient_text(summary: ActionSummary, *, show_private: bool) -> str:
    """The action's recipient, redacted unless shown on purpose."""
    recipient = summary.action.intent.recipient
    return recipient if show_private else redact_number(recipient)


def body_text(summary: ActionSummary, *, show_private: bool) -> str:
    """The action's body, redacted unless shown on purpose."""
    body = summary.action.intent.body
    return body if show_private else redact_body(body)


def reasons_text(summary: ActionSummary) -> str:
    """Review reasons, comma-separated, then superseded ones (``MISMATCH (superseded)``: a
    wrong message went out before a good resend), or ``-``."""
    shown = [reason.value for reason in summary.review_reasons]
    shown += [f"{reason.value} (superseded)" for reason in summary.superseded_reasons]
    return ", ".join(shown) or "-"


def evidence_text(evidence: Mapping[str, Any], *, show_private: bool) -> str:
    """Evidence as compact ``key=value`` text (nested values as JSON), redacted by default."""
    data = redact_data(dict(evidence), show_private=show_private)
    parts = []
    for key in sorted(data):
        value = data[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={shown}")
    return " ".join(parts) or "-"


def render_summary(out: Output, summary: ActionSummary, *, show_private: bool) -> None:
    """Print one action: its intent (redacted by default), status, and every attempt."""
    action = summary.action
    out.fields(
        [
            ("action", action.action_id),
            ("status", summary.status.value),
            (
                "needs review",
                ", ".join(reason.value for reason in summary.review_reasons) or "no",
            ),
            *(
                [("superseded", ", ".join(r.value for r in summary.superseded_reasons))]
                if summary.superseded_reasons
                else []
            ),
            ("to", recipient_text(summary, show_private=show_private)),
            ("body", body_text(summary, show_private=show_private)),
            ("fingerprint", action.fingerprint),
            ("created", when(action.created_at)),
            (
                "attempts",
                f"{len(summary.attempts)} of {action.policy.maximum_attempts} allowed",
            ),
            ("duplicates", str(summary.duplicates)),
        ]
    )
    if summary.attempts:
        render_attempts(out, summary.attempts)


def render_attempts(out: Output, attempts: Sequence[ActionRecord]) -> None:
    """Print attempts as a table: both axes, the provider row (``mms _id 12`` for an MMS row),
    the version (what ``resolve --expect`` takes) and the last error."""
    out.table(
        [
            "#",
            "v",
            "dispatch id",
            "device",
            "delivery",
            "acceptance",
            "sms _id",
            "dispatched",
            "review",
            "last error",
        ],
        (
            [
                str(record.attempt),
                str(record.version),
                record.dispatch_id,
                record.device,
                record.delivery.value,
                record.acceptance.value,
                provider_row_text(record.provider_object_id, record.provider_kind),
                when(record.dispatched_at),
                record.review_reason.value if record.review_reason else "-",
                record.last_error or "-",
            ]
            for record in attempts
        ),
        title="attempts",
    )


def render_list(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """Print actions one per line, newest first."""
    if not summaries:
        out.line("no actions match")
        return
    out.table(
        ["action", "status", "to", "attempts", "device", "age", "review"],
        (
            [
                summary.action.action_id,
                summary.status.value,
                recipient_text(summary, show_private=show_private),
                str(len(summary.attempts)),
                summary.latest.device if summary.latest else "-",
                age(now - summary.action.created_at),
                reasons_text(summary),
            ]
            for summary in summaries
        ),
    )


def render_history(out: Output, entries: Sequence[HistoryEntry], *, show_private: bool) -> None:
    """Print every transition: time, attempt, event, both axes before and after, actor, evidence."""
    if not entries:
        out.line("no history (the action has no attempt yet)")
        return
    out.table(
        ["#", "at", "dispatch id", "event", "delivery", "acceptance", "actor", "evidence"],
        (
            [
                str(entry.sequence),
                when(entry.at),
                entry.dispatch_id[:8],
                entry.event.value,
                _arrow(entry.from_delivery, entry.to_delivery),
                _arrow(entry.from_acceptance, entry.to_acceptance),
                entry.actor,
                evidence_text(entry.evidence, show_private=show_private),
            ]
            for entry in entries
        ),
    )


def _arrow(before: Any, after: Any) -> str:
    if before is None:
        return str(after.value)
    if before == after:
        return str(after.value)
    return f"{before.value}->{after.value}"


def render_review(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """Print the actions waiting for a person, with why and what to run next."""
    if not summaries:
        out.line("nothing needs review")
        return
    out.table(
        ["action", "status", "reasons", "to", "attempts", "duplicates", "age"],
        (
            [
                summary.action.action_id,
                summary.status.value,
                reasons_text(summary),
                recipient_text(summary, show_private=show_private),
                f"{len(summary.attempts)}/{summary.action.policy.maximum_attempts}",
                str(summary.duplicates),
                age(now - summary.action.created_at),
            ]
            for summary in summaries
        ),
    )
    out.line(
        f"{len(summaries)} action(s) need a person: inspect with `starebrain history ID`, then"
        " `starebrain resolve ID --as sent|not-sent --reason TEXT`"
    )


def status_counts_text(counts: Mapping[Status, int] | Mapping[str, int]) -> str:
    """``SUCCEEDED=3 FAILED=1``: non-zero counts in the status table's order."""
    lookup = {str(key): value for key, value in counts.items()}
    parts = [f"{status.value}={lookup[status.value]}" for status in Status if lookup.get(status)]
    return " ".join(parts) or "none"
