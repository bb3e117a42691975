"""Delivering the ledger's events to webhook endpoints, signed per Standard Webhooks.

Each request is a ``POST`` of one event's ``public()`` JSON (redacted unless the endpoint was
added with ``show_private``), with the headers ``webhook-id`` (the event's id: the same on every
try, so a receiver drops repeats by it), ``webhook-timestamp`` (when this try was signed, Unix
seconds) and ``webhook-signature`` (``v1,`` and the base64 HMAC-SHA256 of
``id.timestamp.body`` under the endpoint's ``whsec_`` secret, made by the ``standardwebhooks``
package).

One endpoint's events go in order, one at a time: a deliverer first claims the endpoint in
the ledger (``Ledger.claim_webhook``, a conditional UPDATE with a lease it renews before each
request, longer than any request may last), so two deliverers on one ledger (a worker and an
MCP server) never send to one endpoint at once. Only a 2xx moves the endpoint's cursor past
an event (``webhook_delivered``, conditional on the claim and the cursor); anything else (an
error, a time-out, a 3xx: redirects are not followed, a 4xx, a 5xx) is a failed try, and the
event is tried again on the schedule (``core.webhooks.RetrySchedule``), the events after it
waiting; once the schedule is spent the endpoint is turned off (``webhook.disabled``). A crash
between a 2xx and its record sends that event once more: at least once, never lost.

Every request is bounded: ``connect_timeout_s`` to connect, ``timeout_s`` in all (the response
body is never read). Before each request the URL's host is resolved and every address it
resolves to must be public, unless the endpoint allows private ones (SSRF): a name that
resolves to a private address since it was added fails the try.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import attrs

from starebrain_actions._logging import get_logger
from starebrain_actions.core.convert import format_time
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.webhooks import (
    RetrySchedule,
    check_url,
    literal_address,
    private_address,
)
from starebrain_actions.ledger.webhooks import WebhookEndpoint

if TYPE_CHECKING:
    import httpx2

    from starebrain_actions.core.events import LedgerEvent
    from starebrain_actions.ledger.store import Ledger

_log = get_logger("starebrain.webhooks")

#: Seconds to connect to an endpoint, and for a whole request (the response's headers).
CONNECT_TIMEOUT_S: Final = 5.0
TIMEOUT_S: Final = 15.0
#: A claim on an endpoint lasts this long past each request's start (renewed before each):
#: longer than any request may last, so that it never lapses while one is under way.
LEASE: Final = timedelta(seconds=60)
#: Events one pass sends to one endpoint at most (then the next pass goes on).
BATCH: Final = 100
#: Endpoints one pass sends to at once.
CONCURRENCY: Final = 4
#: Seconds between two passes of a deliverer that follows the ledger.
POLL_S: Final = 1.0
#: The type of the event ``webhook test`` sends (never stored in the ledger).
TEST_EVENT_TYPE: Final = "webhook.test"


class UnsafeAddress(Exception):
    """The endpoint's host is, or resolves to, an address it may not be sent to."""


@attrs.frozen(kw_only=True)
class DeliveryResult:
    """One request to one endpoint."""

    endpoint_id: str
    #: the event's id (the ``webhook-id`` header) and position (None: a test event)
    event_id: str
    position: int | None
    type: str
    #: the HTTP status (None: no answer: refused, timed out, unsafe address...)
    status: int | None
    #: why it failed (None: a 2xx)
    error: str | None
    #: the endpoint was turned off by this failure
    disabled: bool = False
    #: seconds the request took
    seconds: float = 0.0

    @property
    def delivered(self) -> bool:
        return self.error is None

    def data(self) -> dict[str, Any]:
        return {
            "endpoint_id": self.endpoint_id,
            "event_id": self.event_id,
            "position": self.position,
            "type": self.type,
            "status": self.status,
            "delivered": self.delivered,
            "error": self.error,
            "disabled": self.disabled,
            "seconds": round(self.seconds, 3),
        }


@attrs.frozen(kw_only=True)
class DeliveryPass:
    """What one pass over the due endpoints did."""

    results: tuple[DeliveryResult, ...] = ()

    @property
    def delivered(self) -> int:
        return sum(1 for result in self.results if result.delivered)

    @property
    def failed(self) -> int:
        return sum(1 for result in self.results if not result.delivered)

    @property
    def disabled(self) -> tuple[str, ...]:
        return tuple(result.endpoint_id for result in self.results if result.disabled)

    def __add__(self, other: DeliveryPass) -> DeliveryPass:
        return DeliveryPass(results=self.results + other.results)


def deliverer_name() -> str:
    """A name for one deliverer: ``host:pid:random`` (two in one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def body_of(event: LedgerEvent, *, show_private: bool) -> bytes:
    """The request body of ``event``: ``render.values.event_data``'s JSON, compact."""
    from starebrain_actions.render.values import event_data

    public = event_data(event, show_private=show_private)
    return json.dumps(public, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


async def check_destination(url: str, *, allow_private: bool) -> None:
    """Resolve the URL's host; every address must be public unless ``allow_private``.

    Raises:
        InvalidInput: not an http(s) URL.
        UnsafeAddress: a private, loopback, link-local... address, or a name that does not
            resolve.
    """
    scheme, host = check_url(url)
    if allow_private:
        return
    literal = literal_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        port = urlsplit(url).port or (443 if scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise UnsafeAddress(f"cannot resolve {host}: {exc}") from None
        addresses = sorted({str(info[4][0]) for info in infos})
        if not addresses:
            raise UnsafeAddress(f"{host} resolves to no address")
    for address in addresses:
        why = private_address(address)
        if why is not None:
            shown = address if literal is not None else f"{host} resolves to {address}"
            raise UnsafeAddress(
                f"{shown}, a {why} address: refused (SSRF) unless the endpoint was added"
                " with --allow-private"
            )


class WebhookDeliverer:
    """Sends the ledger's events to its endpoints (see the module docstring). Use it as an
    async context manager (it holds one HTTP client), then ``deliver_due`` for one pass,
    ``drain`` until nothing is due now, ``follow`` until stopped, ``send_test``."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        schedule: RetrySchedule | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        timeout_s: float = TIMEOUT_S,
        lease: timedelta = LEASE,
        batch: int = BATCH,
        concurrency: int = CONCURRENCY,
        name: str | None = None,
        draw: Callable[[], float] = random.random,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        if not 0 < connect_timeout_s <= timeout_s:
            raise InvalidInput("connect_timeout_s must be positive and at most timeout_s")
        if lease.total_seconds() <= timeout_s:
            raise InvalidInput("the lease must be longer than a request may last (timeout_s)")
        if batch < 1 or concurrency < 1:
            raise InvalidInput("batch and concurrency are 1 or more")
        self.ledger = ledger
        self.schedule = schedule or RetrySchedule()
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.lease = lease
        self.batch = batch
        self.concurrency = concurrency
        self.name = name or deliverer_name()
        self._draw = draw
        self._transport = transport
        self._client: httpx2.AsyncClient | None = None

    async def __aenter__(self) -> WebhookDeliverer:
        import httpx2

        from starebrain_actions import __name__ as package

        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(self.timeout_s, connect=self.connect_timeout_s),
            follow_redirects=False,
            # no proxy from the environment: the address checked is the one connected to
            trust_env=False,
            headers={"user-agent": f"{package.replace('_', '-')} webhooks"},
            transport=self._transport,
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # ------------------------------------------------------------------ passes

    async def deliver_due(self) -> DeliveryPass:
        """One pass: every endpoint due now (on, its next try due, no other deliverer on it,
        events after its cursor), at most ``batch`` events each, ``concurrency`` at once."""
        now = self.ledger.now()
        if not await self.ledger.due_webhooks(now, below=2**62):
            return DeliveryPass()
        top = await self.ledger.last_event_position()
        due = await self.ledger.due_webhooks(now, below=top)
        if not due:
            return DeliveryPass()
        limit = asyncio.Semaphore(self.concurrency)

        async def one(endpoint_id: str) -> list[DeliveryResult]:
            async with limit:
                return await self._drain_endpoint(endpoint_id, top)

        found = await asyncio.gather(*(one(endpoint_id) for endpoint_id in due))
        return DeliveryPass(results=tuple(result for results in found for result in results))

    async def drain(self, *, max_passes: int = 1000) -> DeliveryPass:
        """Passes until one delivers nothing: what is due now is sent (retries planned for
        later are not waited for)."""
        total = DeliveryPass()
        for _ in range(max_passes):
            done = await self.deliver_due()
            total += done
            if done.delivered == 0:
                break
        return total

    async def follow(
        self,
        stop: asyncio.Event,
        *,
        poll_s: float = POLL_S,
        on_pass: Callable[[DeliveryPass], None] | None = None,
    ) -> None:
        """Pass after pass until ``stop`` is set, waking every ``poll_s`` for new events and
        retries come due. A pass that fails (the ledger unreachable) is logged, not raised."""
        while not stop.is_set():
            try:
                done = await self.deliver_due()
            except Exception as exc:  # never end the loop: log it, try again
                _log.warning("webhook_pass_failed", error=f"{type(exc).__name__}: {exc}")
                done = DeliveryPass()
            if on_pass is not None and done.results:
                on_pass(done)
            if done.delivered:
                continue  # more may wait: go on at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_s)

    # ------------------------------------------------------------------ one endpoint

    async def _drain_endpoint(self, endpoint_id: str, top: int) -> list[DeliveryResult]:
        """Claim the endpoint, send its events in order (at most ``batch``), let it go."""
        results: list[DeliveryResult] = []
        endpoint = await self._claim(endpoint_id)
        if endpoint is None:
            return results  # another deliverer has it, or it was turned off or removed
        try:
            await self._send_events(endpoint, top, results)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.ledger.release_webhook(endpoint_id, self.name))
        return results

    async def _claim(self, endpoint_id: str) -> WebhookEndpoint | None:
        now = self.ledger.now()
        return await self.ledger.claim_webhook(
            endpoint_id, self.name, until=now + self.lease, now=now
        )

    async def _send_events(
        self, endpoint: WebhookEndpoint, top: int, results: list[DeliveryResult]
    ) -> None:
        page = await self.ledger.events(
            after=endpoint.cursor, limit=self.batch, types=endpoint.types
        )
        if not page:
            # nothing of its types up to ``top``: pass over the rest
            if top > endpoint.cursor and endpoint.head_position is None:
                await self.ledger.webhook_passed(
                    endpoint.endpoint_id, self.name, cursor=endpoint.cursor, to=top
                )
            return
        for event in page:
            renewed = await self._claim(endpoint.endpoint_id)
            if renewed is None or renewed.cursor != endpoint.cursor:
                return  # lost it (a stall past the lease), or it moved: stop here
            endpoint = renewed
            result = await self._post(endpoint, event)
            if result.delivered:
                assert result.status is not None
                kept = await self.ledger.webhook_delivered(
                    endpoint.endpoint_id,
                    self.name,
                    cursor=endpoint.cursor,
                    position=event.position,
                    status=result.status,
                    now=self.ledger.now(),
                )
                results.append(result)
                if not kept:
                    return
                endpoint = attrs.evolve(
                    endpoint, cursor=event.position, head_position=None, failures=0
                )
                continue
            results.append(await self._failed(endpoint, event, result))
            return

    async def _failed(
        self, endpoint: WebhookEndpoint, event: LedgerEvent, result: DeliveryResult
    ) -> DeliveryResult:
        """Record a failed try of the head event: its next try, or the endpoint turned off."""
        earlier = endpoint.failures if endpoint.head_position == event.position else 0
        failures = earlier + 1
        wait = self.schedule.next_wait(failures, self._draw)
        now = self.ledger.now()
        error = result.error or "failed"
        await self.ledger.webhook_failed(
            endpoint.endpoint_id,
            self.name,
            cursor=endpoint.cursor,
            position=event.position,
            failures=failures,
            status=result.status,
            error=error,
            now=now,
            next_try_at=now + wait if wait is not None else None,
        )
        _log.warning(
            "webhook_try_failed",
            endpoint_id=endpoint.endpoint_id,
            event_id=event.event_id,
            position=event.position,
            failures=failures,
            status=result.status,
            error=error,
            next_try_at=format_time(now + wait) if wait is not None else None,
            disabled=wait is None,
        )
        return attrs.evolve(result, disabled=wait is None)

    # ------------------------------------------------------------------ requests

    async def _post(self, endpoint: WebhookEndpoint, event: LedgerEvent) -> DeliveryResult:
        body = body_of(event, show_private=endpoint.show_private)
        status, error, seconds = await self.request(endpoint, event.event_id, body)
        if error is None:
            _log.info(
                "webhook_delivered",
                endpoint_id=endpoint.endpoint_id,
                event_id=event.event_id,
                position=event.position,
                status=status,
            )
        return DeliveryResult(
            endpoint_id=endpoint.endpoint_id,
            event_id=event.event_id,
            position=event.position,
            type=event.type,
            status=status,
            error=error,
            seconds=seconds,
        )

    async def request(
        self, endpoint: WebhookEndpoint, message_id: str, body: bytes
    ) -> tuple[int | None, str | None, float]:
        """POST ``body`` signed to the endpoint: its status (None: no answer), the error
        (None: a 2xx), the seconds it took. Never raises for the endpoint's faults."""
        import httpx2
        from standardwebhooks import Webhook

        loop = asyncio.get_running_loop()
        started = loop.time()
        assert self._client is not None, "use the deliverer as `async with`"
        try:
            async with asyncio.timeout(self.timeout_s):
                await check_destination(endpoint.url, allow_private=endpoint.allow_private)
                signed_at = datetime.now(UTC)
                headers = {
                    "content-type": "application/json",
                    "webhook-id": message_id,
                    "webhook-timestamp": str(int(signed_at.timestamp())),
                    "webhook-signature": Webhook(endpoint.secret).sign(message_id, signed_at, body),
                }
                async with self._client.stream(
                    "POST", endpoint.url, content=body, headers=headers
                ) as response:
                    status = response.status_code
        except UnsafeAddress as exc:
            return None, str(exc), loop.time() - started
        except TimeoutError:
            return None, f"no answer within {self.timeout_s:g} s", loop.time() - started
        except httpx2.TimeoutException as exc:
            return None, f"timed out ({type(exc).__name__})", loop.time() - started
        except (httpx2.HTTPError, OSError, InvalidInput) as exc:
            error = f"{type(exc).__name__}: {exc}".rstrip(": ")
            return None, error, loop.time() - started
        seconds = loop.time() - started
        if 200 <= status < 300:
            return status, None, seconds
        if 300 <= status < 400:
            return status, f"HTTP {status}: a redirect (not followed)", seconds
        return status, f"HTTP {status}", seconds

    async def send_test(self, endpoint_id: str) -> DeliveryResult:
        """Send a signed test event (type ``webhook.test``, never stored) to the endpoint now,
        whatever its state or schedule; its cursor and tries are left as they are.

        Raises:
            NotFound: no such endpoint.
        """
        endpoint = await self.ledger.webhook(endpoint_id)
        event_id = "evt_test_" + secrets.token_hex(8)
        now = self.ledger.now()
        payload = {
            "id": event_id,
            "position": None,
            "type": TEST_EVENT_TYPE,
            "action_id": None,
            "dispatch_id": None,
            "device": None,
            "at": format_time(now),
            "data": {"endpoint_id": endpoint_id, "test": True},
        }
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        status, error, seconds = await self.request(endpoint, event_id, body)
        return DeliveryResult(
            endpoint_id=endpoint_id,
            event_id=event_id,
            position=None,
            type=TEST_EVENT_TYPE,
            status=status,
            error=error,
            seconds=seconds,
        )


async def deliver_in_background(
    ledger: Ledger,
    *,
    poll_s: float = 2.0,
    stop: asyncio.Event | None = None,
    **options: Any,
) -> None:
    """Deliver webhooks beside other work (``starebrain worker``, ``starebrain mcp``) until
    cancelled or ``stop``: small passes (20 events per endpoint, two endpoints at once), every
    request time-bounded, every error logged and never raised, so a send is never delayed
    or broken by an endpoint."""
    options.setdefault("batch", 20)
    options.setdefault("concurrency", 2)
    stopping = stop or asyncio.Event()
    try:
        async with WebhookDeliverer(ledger, **options) as deliverer:
            await deliverer.follow(stopping, poll_s=poll_s)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        _log.error("webhook_delivery_stopped", error=f"{type(exc).__name__}: {exc}")


def turned_off(endpoints: Sequence[WebhookEndpoint]) -> list[WebhookEndpoint]:
    """The endpoints turned off, for reports."""
    return [endpoint for endpoint in endpoints if not endpoint.enabled]


__all__ = [
    "BATCH",
    "CONNECT_TIMEOUT_S",
    "LEASE",
    "TEST_EVENT_TYPE",
    "TIMEOUT_S",
    "DeliveryPass",
    "DeliveryResult",
    "UnsafeAddress",
    "WebhookDeliverer",
    "body_of",
    "check_destination",
    "deliver_in_background",
    "deliverer_name",
    "turned_off",
]
