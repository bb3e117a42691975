"""Option types shared by the command-line modules (``cli``, ``_mcp_command``, ``_cli_*``)."""

from __future__ import annotations

import math
from typing import Any, Final

import click

#: Longest duration any option takes, in seconds (ten years): far beyond any real wait, and
#: far from where a timedelta or a datetime overflows.
MAX_SECONDS: Final = 315_576_000


class Seconds(click.FloatRange):
    """A duration in seconds: a finite number in a range. ``nan``, ``inf`` and values past
    ``max`` are usage errors (exit 2) instead of overflows deep inside."""

    name = "seconds"

    def __init__(self, minimum: float = 0, maximum: float = MAX_SECONDS) -> None:
        super().__init__(min=minimum, max=maximum)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number
