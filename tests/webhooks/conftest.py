"""The webhook tests' parts: a real HTTP receiver on 127.0.0.1 that verifies every signature
with ``standardwebhooks`` and answers as it is told (2xx, 5xx, a redirect, or no answer past
the deliverer's time bound), and a fresh ledger on each backend."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from standardwebhooks import Webhook

from starebrain_actions import Ledger, SmsIntent
from tests._postgres import fresh_schema


@attrs.define
class Received:
    """One request the receiver took."""

    headers: dict[str, str]
    body: bytes
    #: the body, parsed, once the signature verified (None: it did not)
    payload: Any
    #: what the receiver answered ("200", "500", "302", "hang")
    answer: str
    #: requests under way at the receiver when this one arrived (itself included)
    concurrent: int


class Receiver:
    """An HTTP/1.1 server on 127.0.0.1 taking webhook POSTs. ``answers``: what to answer next
    (consumed in order; then ``default``): a status code as text, or ``"hang"`` (never
    answer). Every request's signature is verified with ``secret`` (set it after ``add``)."""

    def __init__(self) -> None:
        self.secret: str | None = None
        self.answers: deque[str] = deque()
        self.default = "200"
        self.received: list[Received] = []
        self.delay_s = 0.0
        self._busy = 0
        self.most_concurrent = 0
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    def verified(self) -> list[Any]:
        """The payloads of the requests answered 2xx, in order."""
        return [r.payload for r in self.received if r.answer.startswith("2")]

    def ids(self, answered_2xx: bool = True) -> list[str]:
        return [
            r.headers["webhook-id"]
            for r in self.received
            if not answered_2xx or r.answer.startswith("2")
        ]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self._busy += 1
            self.most_concurrent = max(self.most_concurrent, self._busy)
            answer = self.answers.popleft() if self.answers else self.default
            payload = None
            if self.secret is not None:
                with contextlib.suppress(Exception):
                    payload = Webhook(self.secret).verify(body, headers)
            self.received.append(Received(headers, body, payload, answer, self._busy))
            try:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if answer == "hang":
                    await asyncio.sleep(60)
                    return
                code = int(answer)
                extra = "Location: http://127.0.0.1:1/elsewhere\r\n" if code // 100 == 3 else ""
                head = f"HTTP/1.1 {code} X\r\nContent-Length: 2\r\n{extra}Connection: close\r\n"
                writer.write(f"{head}\r\nok".encode())
                await writer.drain()
            finally:
                self._busy -= 1
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    server = Receiver()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture(params=("sqlite", "postgresql"))
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh ledger: a SQLite file, or a fresh PostgreSQL schema's URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.db")
        return
    async with fresh_schema() as url:
        yield url


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


_DEVICES = itertools.count()


async def make_events(ledger: Ledger, count: int, prefix: str = "a") -> list[str]:
    """``count`` new actions, each with a first attempt: two events each
    (action.created, attempt.created). Their ids."""
    ids = []
    for n in range(count):
        action_id = f"{prefix}-{n}"
        await ledger.create_action(action_id, SmsIntent(recipient="+12025550100", body=f"code {n}"))
        # a phone of its own: one unresolved attempt holds a phone
        device = next(_DEVICES)
        await ledger.begin_attempt(action_id, f"10.0.{device // 200}.{device % 200 + 1}:5555")
        ids.append(action_id)
    return ids


def event_json(received: Received) -> dict[str, Any]:
    return dict(json.loads(received.body))
