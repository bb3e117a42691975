"""A running simulated phone's control endpoint: SMS reach it from another process.

``starebrain simulator`` opens it beside the store; ``starebrain simulator receive-sms``
uses it. Writing the store file from a second process would be unsafe: the running phone
decides things a file cannot know (whether the user is unlocked, which app writes the row
and how, which SIMs it has, the conversation on screen), so the row must be written by the
phone itself, in its own event loop, through :meth:`SimulatedPhone.receive_sms`.

The endpoint is a TCP listener on 127.0.0.1 (any free port) and a *console file*,
``<store>.console`` (0600, JSON: host, port, token, pid), written when it starts and removed
when it stops. A client reads the file, connects, and sends one JSON line naming the token
and the SMS; the phone answers one JSON line. The token makes the endpoint as private as
the console file, which is as private as the store (a real emulator's console asks for the
token in ``~/.emulator_console_auth_token`` the same way: developer.android.com,
"Send emulator console commands"). This is not the emulator console's protocol: that one
takes a line of text and so cannot carry a body with a newline, nor say which row it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Final

from android_bridge._log import get_logger

log = get_logger("android_bridge.simulator")

#: The longest request line accepted (a body of any real length fits).
_MAX_LINE: Final = 1 << 20

#: ``receive(sender, body, sub_id, date_sent_ms)``: the row's ``_id``, None while held.
Receive = Callable[[str, str, int | None, int | None], int | None]


class ConsoleError(Exception):
    """No running simulated phone answered, or it refused the request (the message says
    which, for a person to read)."""


def console_path(store_path: Path) -> Path:
    """Where the phone whose store is ``store_path`` writes its console file."""
    store_path = Path(store_path)
    return store_path.with_name(store_path.name + ".console")


class SmsConsole:
    """The control endpoint of one running phone (see the module docstring)."""

    def __init__(self, store_path: Path, receive: Receive) -> None:
        self.path = console_path(store_path)
        self._receive = receive
        self._token = secrets.token_hex(16)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen on a free loopback port and write the console file (0600).

        Raises:
            OSError: the port or the file could not be had.
        """
        self._server = await asyncio.start_server(
            self._serve, host="127.0.0.1", port=0, limit=_MAX_LINE
        )
        port = int(self._server.sockets[0].getsockname()[1])
        document = {"host": "127.0.0.1", "port": port, "token": self._token, "pid": os.getpid()}
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
        os.replace(temporary, self.path)
        log.info("simulator_console_listening", port=port, console_file=str(self.path))

    async def stop(self) -> None:
        """Stop listening and remove the console file, if it is still this phone's."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(self.path.read_text(encoding="utf-8")).get("token") == self._token:
                self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            reply = self._answer(line)
            writer.write(json.dumps(reply).encode("utf-8") + b"\n")
            await writer.drain()
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _answer(self, line: bytes) -> dict[str, object]:
        try:
            request = json.loads(line)
        except ValueError:
            return {"ok": False, "error": "not a JSON request"}
        if not isinstance(request, dict):
            return {"ok": False, "error": "not a JSON request"}
        token = request.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token, self._token):
            return {"ok": False, "error": "wrong token"}
        sender, body = request.get("sender"), request.get("body")
        sub_id, date_sent_ms = request.get("sub_id"), request.get("date_sent_ms")
        if (
            request.get("command") != "receive-sms"
            or not isinstance(sender, str)
            or not isinstance(body, str)
            or not (sub_id is None or isinstance(sub_id, int))
            or not (date_sent_ms is None or isinstance(date_sent_ms, int))
        ):
            return {"ok": False, "error": "unknown command or malformed request"}
        try:
            row_id = self._receive(sender, body, sub_id, date_sent_ms)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "id": row_id}


async def send_to_running_phone(
    store_path: Path,
    sender: str,
    body: str,
    *,
    sub_id: int | None = None,
    date_sent_ms: int | None = None,
    timeout_s: float = 10.0,
) -> int | None:
    """Make the running phone whose store is ``store_path`` receive an SMS; return the
    inbox row's ``_id`` (None: the phone holds it until its user unlocks).

    Raises:
        ConsoleError: no console file, nobody answering at it, or the phone refused.
    """
    path = console_path(store_path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        host, port, token = str(document["host"]), int(document["port"]), str(document["token"])
    except FileNotFoundError:
        raise ConsoleError(
            f"no simulated phone is running with store {store_path} ({path} does not exist)"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConsoleError(f"cannot read {path}: {exc}") from exc
    request = {
        "command": "receive-sms",
        "token": token,
        "sender": sender,
        "body": body,
        "sub_id": sub_id,
        "date_sent_ms": date_sent_ms,
    }
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port, limit=_MAX_LINE)
            try:
                writer.write(json.dumps(request).encode("utf-8") + b"\n")
                await writer.drain()
                line = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError) as exc:
        raise ConsoleError(
            f"no simulated phone answers at {host}:{port} (from {path}; a stale file left by"
            f" a phone that did not stop cleanly?): {exc}"
        ) from exc
    try:
        reply = json.loads(line)
    except ValueError:
        raise ConsoleError(f"the phone at {host}:{port} gave no answer") from None
    if not isinstance(reply, dict) or not reply.get("ok"):
        error = reply.get("error") if isinstance(reply, dict) else reply
        raise ConsoleError(f"the phone refused: {error}")
    row_id = reply.get("id")
    return None if row_id is None else int(row_id)
