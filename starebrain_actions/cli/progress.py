"""What a long command is doing, shown on a terminal: the current step and how long it has
taken, once the command has run for a second. Piped or ``--json`` output never sees it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

#: A command that finishes sooner than this shows nothing.
SHOW_AFTER_S = 1.0
#: How often the elapsed time is refreshed.
REFRESH_S = 0.25


class Progress:
    """The step a command is on (``step("sending")``), rendered on stderr as a rich status
    line when stderr is a terminal; a no-op otherwise or when ``enabled`` is false."""

    def __init__(self, *, enabled: bool = True, console: Console | None = None) -> None:
        if console is None:
            from rich.console import Console  # imported by the commands that show progress

            console = Console(stderr=True)
        self.console = console
        self.enabled = enabled and self.console.is_terminal
        self._step = "starting"
        self._since = time.monotonic()
        self._started = time.monotonic()
        #: every step told, in order (for tests and for the interrupt message)
        self.steps: list[str] = []

    def step(self, text: str) -> None:
        """The command is now doing ``text``."""
        self._step = text
        self._since = time.monotonic()
        self.steps.append(text)

    @property
    def current(self) -> str:
        """The step the command is on."""
        return self._step

    def _line(self) -> str:
        now = time.monotonic()
        return f"{self._step} ({now - self._since:.0f} s; {now - self._started:.0f} s in all)"

    @contextlib.asynccontextmanager
    async def shown(self) -> AsyncIterator[Progress]:
        """Show the status line while the block runs (after ``SHOW_AFTER_S``)."""
        if not self.enabled:
            yield self
            return
        task = asyncio.create_task(self._show())
        try:
            yield self
        finally:
            task.cancel()
            # wait for the line's task without awaiting it: its CancelledError and one that
            # cancels the command meanwhile (a Ctrl-C) would look the same, and suppressing
            # the first would swallow the second; ``wait`` raises only the command's
            await asyncio.wait({task})
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error

    async def _show(self) -> None:
        await asyncio.sleep(SHOW_AFTER_S)
        with self.console.status(self._line()) as status:
            while True:
                await asyncio.sleep(REFRESH_S)
                status.update(self._line())
