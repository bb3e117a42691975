"""The README's command table and docs/cli.md's "At a glance" name every `starebrain`
command: a new command cannot be left out of either (the generated reference lists every
option; these two are written by hand)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from starebrain_actions.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def commands() -> list[str]:
    return main.list_commands(click.Context(main, info_name="starebrain"))


def table_after(text: str, heading: str) -> str:
    """The first Markdown table after ``heading``."""
    rest = text[text.index(heading) :]
    lines = rest.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


@pytest.mark.parametrize(
    ("document", "heading"),
    [("README.md", "| command | what it does |"), ("docs/cli.md", "## At a glance")],
)
def test_every_command_is_in_the_table(document: str, heading: str) -> None:
    table = table_after((ROOT / document).read_text(encoding="utf-8"), heading)
    missing = [
        name
        for name in commands()
        if not re.search(
            rf"^\| `(starebrain )?{re.escape(name)}\b|, `{re.escape(name)}\b", table, re.M
        )
    ]
    assert [] == missing, f"{document} lacks {missing}"
    assert len(commands()) >= 19  # doctor included
