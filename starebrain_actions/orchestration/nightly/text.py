"""The nightly report for people: the summary printed on stdout and the Markdown copy for
the archive. Neither holds a phone number or a body; ids are whole, and every value is
cleaned (``clean_text``) or, in Markdown, literal text (``md_text``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Final

from starebrain_actions.core.convert import age, format_time
from starebrain_actions.orchestration.nightly.report import ActionLine, NightlyReport
from starebrain_actions.render.sanitize import clean_text, md_code, md_table, md_text
from starebrain_actions.render.values import status_counts_text

_BUCKET_LABELS: Final[Mapping[str, str]] = {
    "under_1h": "< 1h",
    "1h_to_24h": "1h-24h",
    "1d_to_7d": "1d-7d",
    "over_7d": "> 7d",
}


# --------------------------------------------------------------------------- stdout


def summary_lines(report: NightlyReport) -> list[str]:
    """The human summary printed on stdout (no numbers, no bodies; ids whole; every value
    through ``clean_text``)."""
    return list(iter_summary_lines(report))


def iter_summary_lines(report: NightlyReport) -> Iterator[str]:
    """The lines of :func:`summary_lines`, one at a time (a backlog's report has a line per
    unresolved attempt and per action for review: they are printed, not held)."""
    t = clean_text
    yield (
        f"starebrain nightly {format_time(report.generated_at)}"
        f"  ledger {t(report.ledger)}  ({report.duration_s:.1f}s)"
    )
    yield from _summary_devices(report)
    yield f"status: {status_counts_text(report.status_counts)}"
    yield from _summary_unresolved(report)
    yield from _summary_findings(report)
    yield from _summary_approvals(report)
    yield from _summary_resumed_and_unsent(report)
    yield from _summary_webhooks(report)
    if report.needs_person:
        yield "NEEDS A PERSON: " + t("; ".join(report.attention))
    else:
        yield "nothing needs a person"


def _summary_devices(report: NightlyReport) -> list[str]:
    """A line per device the pass read, then a line per change it made there."""
    t = clean_text
    lines = []
    if not report.devices:
        lines.append("devices: none with attempts in flight")
    for device in report.devices:
        if device.reachable:
            lines.append(
                f"device {t(device.device)}: reachable ({t(device.mode or '?')} mode,"
                f" {device.round_trips} round trip(s), {len(device.changes)} change(s),"
                f" {device.duplicates_recorded} duplicate(s) recorded,"
                f" {device.in_flight_after} still in flight)"
            )
        else:
            lines.append(
                f"device {t(device.device)}: UNREACHABLE ({t(device.error or 'no detail')});"
                f" {device.in_flight_after} attempt(s) in flight, left untouched"
            )
        for change in device.changes:
            lines.append(
                f"  {t(change.action_id)} {t(change.dispatch_id)} {t(change.event)}:"
                f" {change.from_status} -> {change.to_status}"
            )
    return lines


def _summary_unresolved(report: NightlyReport) -> Iterator[str]:
    """The unresolved attempts by age, then one line each."""
    t = clean_text
    buckets = ", ".join(
        f"{_BUCKET_LABELS[key]} {count}" for key, count in report.unresolved_by_age.items()
    )
    yield f"unresolved attempts by age: {buckets}"
    for attempt in report.unresolved:
        yield (
            f"  {t(attempt.action_id)} {t(attempt.dispatch_id)} on {t(attempt.device)}:"
            f" {attempt.status}, {age(timedelta(seconds=attempt.age_seconds))} old"
        )


def _summary_findings(report: NightlyReport) -> Iterator[str]:
    """Mismatches, duplicates, spent budgets, unreachable devices and the review queue."""
    t = clean_text
    yield f"mismatches: {len(report.mismatches)}"
    for item in report.mismatches:
        yield f"  {t(item.action_id)} ({item.status}) on {t(item.device or '-')}"
    yield (
        f"duplicates seen on phones: {len(report.duplicates)} open,"
        f" {report.duplicates_total} ever recorded"
    )
    for duplicate in report.duplicates:
        yield (
            f"  {t(duplicate.action_id)}: {t(duplicate.row_text)} on"
            f" {t(duplicate.device)} repeats attempt {t(duplicate.dispatch_id)}"
        )
    yield f"budget exhausted: {len(report.budget_exhausted)}"
    for item in report.budget_exhausted:
        yield f"  {t(item.action_id)}: {item.attempts}/{item.maximum_attempts} attempts"
    yield "unreachable devices: " + (", ".join(map(t, report.unreachable_devices)) or "none")
    yield f"review: {len(report.review)}"
    for item in report.review:
        yield f"  {t(item.action_id)} ({item.status}): {t(_reasons(item))}"


def _summary_approvals(report: NightlyReport) -> Iterator[str]:
    """The actions the policy gate holds for a person's approval, each with its rule, since
    when, and the commands that rule on it (as ``starebrain review`` names them)."""
    t = clean_text
    yield f"waiting for a person's approval: {len(report.awaiting_approval)}"
    for held in report.awaiting_approval:
        commands = " or ".join(f"`{t(command)}`" for command in held.commands)
        yield (
            f"  {t(held.action_id)}: held by {t(held.rule)} since {format_time(held.since)}"
            f" ({t(held.detail)}); {commands}"
        )


def _summary_resumed_and_unsent(report: NightlyReport) -> list[str]:
    """What ``--resume`` did (when it ran), then the actions nothing is sending."""
    t = clean_text
    lines = []
    if report.resumed or report.resume_errors:
        lines.append(f"resumed: {len(report.resumed)}")
        for done in report.resumed:
            moved = done.before if done.before == done.after else f"{done.before} -> {done.after}"
            lines.append(f"  {t(done.action_id)} on {t(done.device)}: {moved}; {t(done.note)}")
        for error in report.resume_errors:
            lines.append(f"  not resumed: {t(error)}")
    lines.append(f"not sent: {len(report.unsent)}")
    for unsent in report.unsent:
        where = f" on {t(unsent.device)}" if unsent.device else ""
        ready = f"; phone not ready: {t(unsent.not_ready)}" if unsent.not_ready else ""
        lines.append(
            f"  {t(unsent.action_id)} ({unsent.status}){where}, idle since"
            f" {format_time(unsent.idle_since)}{ready}"
        )
    return lines


def _summary_webhooks(report: NightlyReport) -> Iterator[str]:
    t = clean_text
    if report.webhooks_delivered or report.webhooks_failed or report.webhooks_off:
        yield (
            f"webhooks: {report.webhooks_delivered} delivered, {report.webhooks_failed} failed"
            f" (tried again on their schedule), {len(report.webhooks_off)} endpoint(s) turned off"
        )
    for line in report.webhooks_off:
        yield (
            f"  {t(line.endpoint_id)} {t(line.url)} off since {format_time(line.disabled_at)}"
            if line.disabled_at is not None
            else f"  {t(line.endpoint_id)} {t(line.url)} off"
        ) + f", {line.pending} event(s) waiting: {t(line.reason)} ({t(line.command)})"


def _reasons(item: ActionLine) -> str:
    """Review reasons, then superseded ones, or ``-``."""
    return ", ".join([*item.reasons, *(f"{r} (superseded)" for r in item.superseded)]) or "-"


# --------------------------------------------------------------------------- Markdown


def report_markdown(report: NightlyReport) -> str:
    """The report as a Markdown document, for the archive (no numbers, no bodies). Ids are
    whole; every value is literal text (``md_text``: cleaned, Markdown syntax escaped)."""
    lines = [
        *_markdown_head(report),
        *_markdown_devices(report),
        *_markdown_unresolved(report),
        *_markdown_findings(report),
        *_markdown_approvals(report),
        *_markdown_unsent(report),
        *_markdown_resumed(report),
        *_markdown_webhooks(report),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _markdown_webhooks(report: NightlyReport) -> list[str]:
    if not (report.webhooks_delivered or report.webhooks_failed or report.webhooks_off):
        return []
    lines = [
        "## Webhooks",
        "",
        f"{report.webhooks_delivered} delivered, {report.webhooks_failed} failed (tried again on"
        f" their schedule), {len(report.webhooks_off)} endpoint(s) turned off.",
        "",
    ]
    lines += [
        f"- {md_text(line.endpoint_id)} ({md_text(line.url)}): {md_text(line.reason)};"
        f" {line.pending} event(s) waiting; `{md_text(line.command)}`"
        for line in report.webhooks_off
    ]
    return [*lines, ""]


def _markdown_head(report: NightlyReport) -> list[str]:
    """The title, when and on what the job ran, its exit status and its verdict."""
    verdict = (
        "**Needs a person:** " + md_text("; ".join(report.attention))
        if report.needs_person
        else "Nothing needs a person."
    )
    return [
        f"# starebrain nightly report {report.generated_at.date().isoformat()}",
        "",
        f"- generated: {md_code(format_time(report.generated_at))}",
        f"- ledger: {md_code(report.ledger)}",
        f"- duration: {report.duration_s:.1f}s",
        f"- exit status: {report.exit_code}",
        "",
        verdict,
        "",
    ]


def _markdown_devices(report: NightlyReport) -> list[str]:
    """The devices the pass read, then every change it made."""
    lines = ["## Devices", ""]
    lines += md_table(
        [
            "device",
            "reachable",
            "mode",
            "round trips",
            "changes",
            "duplicates",
            "in flight",
            "error",
        ],
        [
            [
                device.device,
                "yes" if device.reachable else "NO",
                device.mode or "-",
                str(device.round_trips),
                str(len(device.changes)),
                str(device.duplicates_recorded),
                str(device.in_flight_after),
                device.error or "-",
            ]
            for device in report.devices
        ],
    )
    changes = [(device.device, change) for device in report.devices for change in device.changes]
    lines += ["## Changes in this pass", ""]
    lines += md_table(
        ["device", "action", "dispatch id", "event", "from", "to"],
        [
            [device, c.action_id, c.dispatch_id, c.event, c.from_status, c.to_status]
            for device, c in changes
        ],
    )
    return lines


def _markdown_unresolved(report: NightlyReport) -> list[str]:
    """The actions by status, the unresolved attempts by age, then each of them."""
    lines = ["## Actions by status", ""]
    lines += md_table(
        ["status", "actions"],
        [[status, str(count)] for status, count in report.status_counts.items()],
    )
    lines += ["## Unresolved attempts by age", ""]
    lines += md_table(
        ["age", "attempts"],
        [[_BUCKET_LABELS[key], str(count)] for key, count in report.unresolved_by_age.items()],
    )
    lines += md_table(
        ["action", "dispatch id", "device", "status", "dispatched", "age", "review", "last error"],
        [
            [
                a.action_id,
                a.dispatch_id,
                a.device,
                a.status,
                format_time(a.dispatched_at),
                age(timedelta(seconds=a.age_seconds)),
                a.review_reason or "-",
                a.last_error or "-",
            ]
            for a in report.unresolved
        ],
    )
    return lines


#: The columns of the Markdown tables of actions (mismatches, spent budgets, review).
_ACTION_COLUMNS: Final = ("action", "status", "reasons", "attempts", "duplicates", "device")


def _action_rows(items: Sequence[ActionLine]) -> list[list[str]]:
    """The rows of ``_ACTION_COLUMNS``."""
    return [
        [
            item.action_id,
            item.status,
            _reasons(item),
            f"{item.attempts}/{item.maximum_attempts}",
            str(item.duplicates),
            item.device or "-",
        ]
        for item in items
    ]


def _markdown_findings(report: NightlyReport) -> list[str]:
    """Mismatches, duplicates, spent budgets, unreachable devices and the review queue."""
    lines = ["## Mismatches", "", *md_table(_ACTION_COLUMNS, _action_rows(report.mismatches))]
    lines += [
        "## Duplicates seen on phones",
        "",
        f"{report.duplicates_total} provider row(s) ever recorded as duplicates; open ones below.",
        "",
    ]
    lines += md_table(
        ["action", "dispatch id", "device", "provider row", "seen"],
        [[d.action_id, d.dispatch_id, d.device, d.row_text, d.seen_at] for d in report.duplicates],
    )
    lines += ["## Budget exhausted", ""]
    lines += md_table(_ACTION_COLUMNS, _action_rows(report.budget_exhausted))
    lines += ["## Unreachable devices", ""]
    lines += [
        f"- {md_text(device, block_start=True)}" for device in report.unreachable_devices
    ] or ["_none_"]
    lines += ["", "## For review", ""]
    lines += md_table(_ACTION_COLUMNS, _action_rows(report.review))
    return lines


def _markdown_approvals(report: NightlyReport) -> list[str]:
    """The actions the policy gate holds for a person's approval, with the commands."""
    lines = ["## Waiting for a person's approval", ""]
    lines += md_table(
        ["action", "rule", "why", "held since", "commands"],
        [
            [h.action_id, h.rule, h.detail, format_time(h.since), " or ".join(h.commands)]
            for h in report.awaiting_approval
        ],
    )
    return lines


def _markdown_unsent(report: NightlyReport) -> list[str]:
    """The actions nothing is sending."""
    lines = ["## Not sent (nothing is sending them)", ""]
    lines += md_table(
        ["action", "status", "device", "idle since", "attempts", "phone not ready"],
        [
            [
                u.action_id,
                u.status,
                u.device or "-",
                format_time(u.idle_since),
                f"{u.attempts}/{u.maximum_attempts}",
                u.not_ready or "-",
            ]
            for u in report.unsent
        ],
    )
    return lines


def _markdown_resumed(report: NightlyReport) -> list[str]:
    """What ``--resume`` did and the phones it could not use (nothing when it did not run)."""
    if not (report.resumed or report.resume_errors):
        return []
    lines = ["## Resumed", ""]
    lines += md_table(
        ["device", "action", "before", "after", "attempts started", "note"],
        [
            [r.device, r.action_id, r.before, r.after, str(r.attempts_started), r.note]
            for r in report.resumed
        ],
    )
    lines += [f"- {md_text(error, block_start=True)}" for error in report.resume_errors]
    return lines
