"""Delivering the ledger's events to a real HTTP receiver on 127.0.0.1, every request's
signature verified there with ``standardwebhooks``: at least once, in order per endpoint,
retried on its schedule, never again after a 2xx, an endpoint turned off when its schedule is
spent, two deliverers never at once on one endpoint."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from starebrain_actions import InvalidInput, Ledger
from starebrain_actions.core.webhooks import RetrySchedule
from starebrain_actions.orchestration.webhooks import (
    DeliveryPass,
    UnsafeAddress,
    WebhookDeliverer,
    body_of,
    check_destination,
)
from starebrain_actions.render.values import event_data
from tests.webhooks.conftest import Receiver, make_events

#: Three tries, 50 ms apart, no jitter: a schedule a test can wait for.
FAST = RetrySchedule(
    waits=(timedelta(0), timedelta(milliseconds=50), timedelta(milliseconds=50)), jitter=0
)


def deliverer(ledger: Ledger, **options: object) -> WebhookDeliverer:
    options.setdefault("schedule", FAST)
    # generous: an answer the machine's load delays past the bound is a failed try, sent
    # again (red beside a CPU hog at 0.5 s); the tests of the bound give their own
    options.setdefault("timeout_s", 1.5)
    options.setdefault("connect_timeout_s", 1.5)
    options.setdefault("lease", timedelta(seconds=2))
    return WebhookDeliverer(ledger, **options)  # type: ignore[arg-type]


async def until_drained(
    ledger: Ledger, receiver: Receiver, want: int, **options: object
) -> DeliveryPass:
    """Passes (waiting out the fast schedule) until ``want`` requests were answered 2xx."""
    total = DeliveryPass()
    async with deliverer(ledger, **options) as sender:
        for _ in range(200):
            total += await sender.drain()
            if len(receiver.verified()) >= want:
                return total
            await asyncio.sleep(0.03)
    raise AssertionError(f"only {len(receiver.verified())} of {want} delivered")


async def test_every_event_arrives_signed_in_order_and_never_again(
    db: str, receiver: Receiver
) -> None:
    """Every event of the ledger reaches an endpoint added from the start, once, in order of
    position, as its ``public()`` JSON with the event's id as ``webhook-id`` and a signature
    that verifies; a second drain sends nothing more."""
    async with Ledger.open(db) as ledger:
        await make_events(ledger, 4)
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True, after=0)
        receiver.secret = endpoint.secret
        events = await ledger.events()
        async with deliverer(ledger) as sender:
            done = await sender.drain()
            again = await sender.drain()
        assert len(events) == done.delivered == len(receiver.received)
        assert 0 == len(again.results)
        assert [event_data(e, show_private=False) for e in events] == receiver.verified()
        assert [e.event_id for e in events] == receiver.ids()
        assert [body_of(e, show_private=False) for e in events] == [
            r.body for r in receiver.received
        ]
        stored = await ledger.webhook(endpoint.endpoint_id)
        assert (events[-1].position, len(events), 200) == (
            stored.cursor,
            stored.delivered,
            stored.last_status,
        )


async def test_a_new_endpoint_starts_after_the_newest_event(db: str, receiver: Receiver) -> None:
    """An endpoint added without a start position receives only the events written after it
    was added; ``after`` starts it elsewhere; ``types`` keeps to those types."""
    async with Ledger.open(db) as ledger:
        await make_events(ledger, 2, prefix="old")
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        await make_events(ledger, 1, prefix="new")
        async with deliverer(ledger) as sender:
            await sender.drain()
        assert ["new-0", "new-0"] == [p["action_id"] for p in receiver.verified()]
        typed = await ledger.add_webhook(
            receiver.url, allow_private=True, after=0, types=["attempt.*"]
        )
        assert 0 == typed.cursor
        receiver.received.clear()
        receiver.secret = typed.secret
        async with deliverer(ledger) as sender:
            await sender.drain()
        assert ["attempt.created"] * 3 == [p["type"] for p in receiver.verified()]


async def test_a_5xx_a_time_out_and_a_redirect_are_tried_again_in_order(
    db: str, receiver: Receiver
) -> None:
    """A 500, no answer within the time bound and a 302 are failed tries: the same event is
    sent again (the same ``webhook-id``) on the schedule, the events after it wait, and once
    it is delivered they follow in order."""
    async with Ledger.open(db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        await make_events(ledger, 2)
        events = await ledger.events(after=endpoint.cursor)
        receiver.answers.extend(["500", "hang"])
        schedule = RetrySchedule(
            waits=(timedelta(0),) + (timedelta(milliseconds=50),) * 3, jitter=0
        )
        await until_drained(ledger, receiver, len(events), schedule=schedule)
        first = events[0].event_id
        assert [first, first, first] == receiver.ids(answered_2xx=False)[:3]
        assert ["500", "hang", "200"] == [r.answer for r in receiver.received[:3]]
        assert [e.event_id for e in events] == receiver.ids()
        receiver.received.clear()
        receiver.answers.append("302")
        await make_events(ledger, 1, prefix="later")
        async with deliverer(ledger, schedule=schedule) as sender:
            done = await sender.deliver_due()
        assert [302] == [r.status for r in done.results]
        assert "redirect" in (done.results[0].error or "")
        stored = await ledger.webhook(endpoint.endpoint_id)
        assert (1, 302) == (stored.failures, stored.last_status)
        assert stored.next_try_at is not None


async def test_an_endpoint_that_keeps_failing_is_turned_off_with_its_event(
    db: str, receiver: Receiver
) -> None:
    """When every try of the schedule fails the endpoint is turned off, a ``webhook.disabled``
    event says which and why, nothing more is sent to it; ``enable_webhook`` turns it back
    on and the event it was stuck on is delivered first."""
    async with Ledger.open(db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        await make_events(ledger, 1)
        receiver.default = "503"
        async with deliverer(ledger) as sender:
            for _ in range(100):
                await sender.drain()
                if not (await ledger.webhook(endpoint.endpoint_id)).enabled:
                    break
                await asyncio.sleep(0.03)
            off = await ledger.webhook(endpoint.endpoint_id)
            assert "DISABLED" == off.state
            assert FAST.tries == len(receiver.received) == off.failures
            assert "HTTP 503" in (off.disabled_reason or "")
            disabled = await ledger.events(types=["webhook.disabled"])
            assert 1 == len(disabled)
            assert endpoint.endpoint_id == disabled[0].data["endpoint_id"]
            assert off.head_position == disabled[0].data["stuck_at_position"]
            await sender.drain()
            assert FAST.tries == len(receiver.received)
            receiver.default = "200"
            await ledger.enable_webhook(endpoint.endpoint_id)
            await sender.drain()
        stuck = (await ledger.events(after=endpoint.cursor, limit=1))[0]
        assert stuck.event_id == receiver.ids()[0]
        assert (await ledger.webhook(endpoint.endpoint_id)).enabled


async def test_two_deliverers_keep_the_order_and_never_send_to_one_endpoint_at_once(
    db: str, receiver: Receiver
) -> None:
    """Two deliverers on separate connections to one ledger drain it at the same time: the
    receiver never has two requests from them under way at once, gets every event once, in
    order."""
    receiver.delay_s = 0.02
    async with Ledger.open(db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        await make_events(ledger, 6)
        events = await ledger.events(after=endpoint.cursor)

    async def drain(name: str) -> None:
        async with Ledger.open(db) as own, deliverer(own, name=name, batch=3) as sender:
            for _ in range(10):
                await sender.drain()
                await asyncio.sleep(0)

    await asyncio.gather(drain("one"), drain("two"))
    assert 1 == receiver.most_concurrent
    assert [e.event_id for e in events] == receiver.ids()


async def test_a_deliverer_lost_between_the_answer_and_its_record_means_one_repeat(
    db: str, receiver: Receiver
) -> None:
    """A deliverer cut off after the receiver took an event but before the 2xx was recorded
    (a crash): once its claim lapses another deliverer sends that event again, with the same
    ``webhook-id`` (the receiver drops the repeat), then the rest: nothing is lost."""
    async with Ledger.open(db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        await make_events(ledger, 2)
        events = await ledger.events(after=endpoint.cursor)
        receiver.delay_s = 0.3
        async with deliverer(
            ledger, lease=timedelta(seconds=0.6), timeout_s=0.5, connect_timeout_s=0.5
        ) as first:
            task = asyncio.create_task(first.drain())
            for _ in range(100):
                if receiver.received:
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        receiver.delay_s = 0
        # until_drained's passes find the endpoint claimed until the lease lapses, then send
        await until_drained(ledger, receiver, len(events))
        ids = receiver.ids(answered_2xx=False)
        assert events[0].event_id == ids[0] == ids[1]
        assert [e.event_id for e in events] == list(dict.fromkeys(ids))


async def test_private_addresses_need_the_endpoint_s_permission(
    sqlite_db: str, receiver: Receiver
) -> None:
    """A loopback, private or link-local host (or a name resolving to one) is refused unless
    allowed; an endpoint stored without permission fails its tries without a request."""
    for url in (
        "http://127.0.0.1/x",
        "http://localhost:8/x",
        "https://10.1.2.3/",
        "http://[::1]/",
        "http://169.254.169.254/latest",
        "http://[::ffff:127.0.0.1]/",
    ):
        with pytest.raises(UnsafeAddress):
            await check_destination(url, allow_private=False)
        await check_destination(url, allow_private=True)
    await check_destination("https://8.8.8.8/hook", allow_private=False)
    async with Ledger.open(sqlite_db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=False)
        await make_events(ledger, 1)
        async with deliverer(ledger) as sender:
            done = await sender.deliver_due()
        assert [None] == [r.status for r in done.results]
        assert "SSRF" in (done.results[0].error or "")
        assert [] == receiver.received
        assert 1 == (await ledger.webhook(endpoint.endpoint_id)).failures


async def test_urls_that_are_not_http_are_refused(sqlite_db: str) -> None:
    """Only http:// and https:// URLs with a host are endpoints; unknown types are refused."""
    async with Ledger.open(sqlite_db) as ledger:
        for url in (
            "ftp://example.com/x",
            "file:///etc/passwd",
            "example.com/x",
            "http://",
            "javascript:alert(1)",
            "http://exa mple.com/",
        ):
            with pytest.raises(InvalidInput):
                await ledger.add_webhook(url)
        with pytest.raises(InvalidInput, match="unknown event type"):
            await ledger.add_webhook("https://example.com/x", types=["action.nope"])
        assert [] == await ledger.webhooks()


async def test_a_test_event_is_signed_and_moves_nothing(sqlite_db: str, receiver: Receiver) -> None:
    """``send_test`` sends a signed ``webhook.test`` event now and leaves the cursor and the
    tries as they were."""
    async with Ledger.open(sqlite_db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        async with deliverer(ledger) as sender:
            result = await sender.send_test(endpoint.endpoint_id)
        assert (200, None) == (result.status, result.error)
        assert "webhook.test" == receiver.verified()[0]["type"]
        assert endpoint == await ledger.webhook(endpoint.endpoint_id)


async def test_background_delivery_follows_new_events_and_never_raises(
    sqlite_db: str, receiver: Receiver
) -> None:
    """``deliver_in_background`` (what ``worker`` and ``mcp`` run beside their sends) sends
    events as they are written, and an endpoint that hangs costs it only its time bound:
    errors are logged, the task goes on until cancelled."""
    from starebrain_actions.orchestration.webhooks import deliver_in_background

    async with Ledger.open(sqlite_db) as ledger:
        endpoint = await ledger.add_webhook(receiver.url, allow_private=True)
        receiver.secret = endpoint.secret
        receiver.answers.append("hang")
        task = asyncio.create_task(
            deliver_in_background(
                ledger, poll_s=0.05, schedule=FAST, timeout_s=0.3, connect_timeout_s=0.3
            )
        )
        await make_events(ledger, 2)
        for _ in range(200):
            if len(receiver.verified()) >= 4:
                break
            await asyncio.sleep(0.02)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events = await ledger.events(after=endpoint.cursor)
        assert [e.event_id for e in events] == receiver.ids()
        assert "hang" == receiver.received[0].answer
