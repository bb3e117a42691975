"""The status line of a long command never loses the command's cancellation (the first
Ctrl-C cancels the command's task)."""

from __future__ import annotations

import asyncio
import io
import threading

import pytest
from rich.console import Console

from starebrain_actions.cli.progress import Progress


async def test_a_cancel_that_comes_while_the_status_line_stops_is_kept() -> None:
    """The command's task is cancelled just as the block ends and the status line's task
    is stopped: the cancellation reaches the command, it does not end as if never asked."""
    progress = Progress(console=Console(file=io.StringIO(), force_terminal=True))
    assert progress.enabled
    ended: list[str] = []

    async def command() -> None:
        async with progress.shown():
            task = asyncio.current_task()
            assert task is not None
            # lands while ``shown`` waits for its status line's task to end
            asyncio.get_running_loop().call_soon(task.cancel)
        ended.append("as if never cancelled")

    running = asyncio.create_task(command())
    with pytest.raises(asyncio.CancelledError):
        await running
    assert [] == ended


class _Screen(io.StringIO):
    """A terminal's screen that says when a text first appears on it (rich may write from
    its refresh thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.shown = threading.Event()

    def write(self, data: str) -> int:
        written = super().write(data)
        if self.text in self.getvalue():
            self.shown.set()
        return written


async def test_the_status_line_is_shown_and_stopped_with_its_block() -> None:
    """A block that lasts shows the step (once ``SHOW_AFTER_S`` has passed); the line's task
    ends with the block."""
    screen = _Screen("waiting for the phone's row")
    progress = Progress(console=Console(file=screen, force_terminal=True))
    before = asyncio.all_tasks()
    async with progress.shown():
        progress.step("waiting for the phone's row")
        # the step on the screen itself, not a guess at how long a loaded machine takes
        assert await asyncio.to_thread(screen.shown.wait, 30), screen.getvalue()
    assert asyncio.all_tasks() == before
