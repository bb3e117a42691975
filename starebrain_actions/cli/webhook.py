"""``starebrain webhook add|list|remove|enable|test`` (the endpoints the ledger's events are
sent to, signed per Standard Webhooks) and ``starebrain deliver`` (sending what is due).

The secret is printed once, by ``add``; ``list`` and every JSON shape leave it out. Exit
statuses: 0 done; 1 the ledger cannot be used or no such endpoint; 2 bad input (a URL that is
not http(s), an unknown event type, a private host without ``--allow-private``); 4 (``test``)
the endpoint did not answer 2xx, (``deliver``) a try failed or an endpoint was turned off.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from starebrain_actions.cli.context import (
    EXIT_FAILED,
    EXIT_SUCCEEDED,
    CliUsageError,
    ledger_path,
    open_ledger,
    run,
    settings_of,
    stop_on_signals,
)
from starebrain_actions.cli.options import Seconds, json_option

if TYPE_CHECKING:
    from starebrain_actions.ledger.webhooks import WebhookEndpoint
    from starebrain_actions.orchestration.webhooks import DeliveryPass, DeliveryResult


@click.group("webhook")
def webhook_command() -> None:
    """Webhook endpoints: the ledger's events POSTed to an HTTP(S) URL as they are written,
    signed per Standard Webhooks (headers webhook-id, webhook-timestamp, webhook-signature),
    at least once and in order per endpoint. `starebrain deliver`, `worker`, `mcp` and
    `nightly` send them (docs/events.md#webhooks)."""


@webhook_command.command("add")
@click.argument("url")
@click.option(
    "--event",
    "types",
    multiple=True,
    metavar="TYPE",
    help="An event type it receives (action.sent, or a family: action.*); repeatable."
    " [default: every type]",
)
@click.option(
    "--allow-private",
    is_flag=True,
    help="Let the URL's host be or resolve to a private, loopback or link-local address"
    " (refused by default: SSRF); checked again before every request.",
)
@click.option(
    "--show-private",
    is_flag=True,
    help="Send phone numbers and message bodies in clear (redacted by default).",
)
@click.option(
    "--from-start",
    is_flag=True,
    help="Send every event the ledger holds, oldest first. [default: events from now on]",
)
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=None,
    metavar="POSITION",
    help="Send the events after this position (an event's `position`).",
)
@json_option
@click.pass_context
def add_command(
    ctx: click.Context,
    url: str,
    types: tuple[str, ...],
    allow_private: bool,
    show_private: bool,
    from_start: bool,
    after: int | None,
    as_json: bool,
) -> None:
    """Add an endpoint at URL (http:// or https://) and print its id and its signing secret
    (whsec_…), which is shown this once only: give it to the receiver, which verifies each
    request with it (e.g. standardwebhooks' Webhook(secret).verify). It receives the events
    written from now on, unless --from-start or --after says otherwise."""
    from starebrain_actions.core.events import check_types
    from starebrain_actions.core.exceptions import InvalidInput
    from starebrain_actions.core.webhooks import check_url
    from starebrain_actions.orchestration.webhooks import UnsafeAddress, check_destination
    from starebrain_actions.render import json_output as _render_json

    if from_start and after is not None:
        raise CliUsageError("give --from-start or --after, not both")
    start = 0 if from_start else after
    path = ledger_path(settings_of(ctx), create=True)

    try:  # the form first, then the address (which resolves the name)
        check_types(types)
        check_url(url)
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc

    async def work() -> WebhookEndpoint:
        try:
            await check_destination(url, allow_private=allow_private)
        except (InvalidInput, UnsafeAddress) as exc:
            raise CliUsageError(str(exc)) from exc
        async with open_ledger(path) as ledger:
            return await ledger.add_webhook(
                url,
                types=types,
                allow_private=allow_private,
                show_private=show_private,
                after=start,
            )

    endpoint = run(work())
    if as_json:
        _render_json.emit_json({**endpoint.public(), "secret": endpoint.secret})
        return
    click.echo(f"added webhook endpoint {endpoint.endpoint_id} -> {endpoint.url}")
    click.echo(
        f"events: {', '.join(endpoint.types) or 'every type'}, after position {endpoint.cursor}"
    )
    click.echo(f"secret (shown this once only): {endpoint.secret}")


@webhook_command.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """List the endpoints: id, URL, event types, state (on, or turned off: when and why),
    the latest try's status, and the events waiting (how many, after which position).
    Secrets are never shown."""
    from starebrain_actions.render import json_output as _render_json
    from starebrain_actions.render import output as _render

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> list[tuple[WebhookEndpoint, int]]:
        async with open_ledger(path, create=False) as ledger:
            return [(e, await ledger.webhook_pending(e)) for e in await ledger.webhooks()]

    endpoints = run(work())
    if as_json:
        _render_json.emit_json(
            [{**endpoint.public(), "pending": pending} for endpoint, pending in endpoints]
        )
        return
    if not endpoints:
        click.echo("no webhook endpoints (add one: starebrain webhook add URL)")
        return
    out = _render.Output()
    out.table(
        ["id", "url", "events", "state", "last try", "pending"],
        (
            [
                endpoint.endpoint_id,
                endpoint.url,
                ", ".join(endpoint.types) or "all",
                _state_text(endpoint),
                _last_try_text(endpoint),
                f"{pending} after position {endpoint.cursor}",
            ]
            for endpoint, pending in endpoints
        ),
        wrap=["url", "state", "last try"],
    )
    for endpoint, _ in endpoints:
        if not endpoint.enabled:
            click.echo(
                f"{endpoint.endpoint_id} is turned off; turn it back on with: starebrain"
                f" webhook enable {endpoint.endpoint_id}"
            )


def _state_text(endpoint: WebhookEndpoint) -> str:
    from starebrain_actions.render import values as _render_values

    if not endpoint.enabled:
        return f"OFF since {_render_values.when(endpoint.disabled_at)}: {endpoint.disabled_reason}"
    if endpoint.head_position is not None and endpoint.next_try_at is not None:
        return (
            f"on; event {endpoint.head_position} failed {endpoint.failures} time(s), next try"
            f" {_render_values.when(endpoint.next_try_at)}"
        )
    return "on"


def _last_try_text(endpoint: WebhookEndpoint) -> str:
    from starebrain_actions.render import values as _render_values

    if endpoint.last_try_at is None:
        return "-"
    status = str(endpoint.last_status) if endpoint.last_status is not None else "no answer"
    text = f"{status} at {_render_values.when(endpoint.last_try_at)}"
    return f"{text} ({endpoint.last_error})" if endpoint.last_error else text


@webhook_command.command("remove")
@click.argument("endpoint_id")
@json_option
@click.pass_context
def remove_command(ctx: click.Context, endpoint_id: str, as_json: bool) -> None:
    """Remove the endpoint ENDPOINT_ID: nothing more is sent to it (a request already under
    way ends as it ends). Its secret is forgotten."""
    from starebrain_actions.render import json_output as _render_json

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> WebhookEndpoint:
        async with open_ledger(path, create=False) as ledger:
            return await ledger.remove_webhook(endpoint_id)

    endpoint = run(work())
    if as_json:
        _render_json.emit_json({**endpoint.public(), "removed": True})
        return
    click.echo(f"removed webhook endpoint {endpoint.endpoint_id} ({endpoint.url})")


@webhook_command.command("enable")
@click.argument("endpoint_id")
@click.option(
    "--from-now",
    is_flag=True,
    help="Skip the events written while it was off: start after the newest event now."
    " [default: from the event it was stuck on, nothing lost]",
)
@json_option
@click.pass_context
def enable_command(ctx: click.Context, endpoint_id: str, from_now: bool, as_json: bool) -> None:
    """Turn back on an endpoint that was turned off (its retry schedule spent): the event it
    was stuck on is tried again at the next delivery, with a fresh schedule, and every event
    after it follows in order."""
    from starebrain_actions.render import json_output as _render_json

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> WebhookEndpoint:
        async with open_ledger(path, create=False) as ledger:
            return await ledger.enable_webhook(endpoint_id, from_now=from_now)

    endpoint = run(work())
    if as_json:
        _render_json.emit_json(endpoint.public())
        return
    click.echo(
        f"webhook endpoint {endpoint.endpoint_id} is on; next: the events after position"
        f" {endpoint.cursor}"
    )


@webhook_command.command("test")
@click.argument("endpoint_id")
@click.option(
    "--timeout",
    type=Seconds(minimum=0.1, maximum=300),
    default=15.0,
    show_default=True,
    help="Seconds the request may take in all (5 of them at most to connect).",
)
@json_option
@click.pass_context
def test_command(ctx: click.Context, endpoint_id: str, timeout: float, as_json: bool) -> None:
    """Send a signed test event (type webhook.test, id evt_test_…, never stored) to the
    endpoint ENDPOINT_ID now, whatever its state, and print the HTTP status it answered.
    Exit 0 on a 2xx, 4 otherwise. Its cursor and tries are left as they are."""
    from starebrain_actions.orchestration.webhooks import WebhookDeliverer
    from starebrain_actions.render import json_output as _render_json

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> DeliveryResult:
        async with (
            open_ledger(path, create=False) as ledger,
            WebhookDeliverer(
                ledger, timeout_s=timeout, connect_timeout_s=min(5.0, timeout)
            ) as sender,
        ):
            return await sender.send_test(endpoint_id)

    result = run(work())
    if as_json:
        _render_json.emit_json(result.data())
    elif result.delivered:
        click.echo(f"{endpoint_id}: HTTP {result.status} in {result.seconds:.2f} s")
    else:
        click.echo(f"{endpoint_id}: failed: {result.error}")
    ctx.exit(EXIT_SUCCEEDED if result.delivered else EXIT_FAILED)


@click.command("deliver")
@click.option("--once", is_flag=True, help="One pass over the due endpoints, then exit.")
@click.option(
    "--follow",
    is_flag=True,
    help="Keep delivering, waking for new events and retries come due, until SIGTERM or"
    " Ctrl-C (exit 0).",
)
@click.option(
    "--poll",
    type=Seconds(minimum=0.05, maximum=3600),
    default=1.0,
    show_default=True,
    help="With --follow: seconds between two looks for new events.",
)
@json_option
@click.pass_context
def deliver_command(
    ctx: click.Context, once: bool, follow: bool, poll: float, as_json: bool
) -> None:
    """Send the ledger's events to the webhook endpoints: what is due now (new events, and
    retries whose time has come), in order per endpoint, then exit; --once: one pass only;
    --follow: keep going. A line per request (--json: one JSON object per line).

    Exit 0 when every request answered 2xx (or nothing was due), 4 when a try failed (it is
    tried again on its schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h) or an endpoint was
    turned off, 1 when the ledger cannot be used. A worker, an MCP server and the nightly job
    deliver too; any number of deliverers may run at once."""
    if once and follow:
        raise CliUsageError("give --once or --follow, not both")
    path = ledger_path(settings_of(ctx), create=False)
    shown = _Shown(as_json=as_json)

    async def work() -> DeliveryPass:
        from starebrain_actions.orchestration.webhooks import DeliveryPass, WebhookDeliverer

        async with open_ledger(path, create=False) as ledger, WebhookDeliverer(ledger) as sender:
            if not follow:
                done = await (sender.deliver_due() if once else sender.drain())
                shown.show(done)
                return done
            with stop_on_signals() as stop:
                await sender.follow(stop, poll_s=poll, on_pass=shown.show)
            return DeliveryPass()

    done = run(work())
    ctx.exit(EXIT_FAILED if done.failed else EXIT_SUCCEEDED)


class _Shown:
    """A line per request (or a JSON object per line)."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json

    def show(self, done: DeliveryPass) -> None:
        from starebrain_actions.render.json_output import json_line

        for result in done.results:
            if self.as_json:
                click.echo(json_line(result.data()))
                continue
            at = datetime.now(UTC).strftime("%H:%M:%S")
            what = f"HTTP {result.status}" if result.delivered else f"failed: {result.error}"
            line = f"{at} {result.endpoint_id} {result.type} {result.event_id}: {what}"
            if result.disabled:
                line += f"; endpoint turned off (starebrain webhook enable {result.endpoint_id})"
            click.echo(line)
