"""MkDocs hooks (``hooks:`` in mkdocs.yml) for the docs site.

``starebrain`` is a lazy click group: the commands in its ``LAZY_COMMANDS`` (``devices``,
``key``, ``migrate``, ``mcp``, ``simulator``…) are imported only when ``get_command`` names
them, and only then enter the group's ``commands`` dict (``starebrain --help`` lists them
from the first sentence of their help kept in ``LAZY_COMMANDS``, importing none: the
simulated phone is loaded by ``demo`` and ``simulator`` alone, and only this docs build's
process loads every command). mkdocs-click lists a group's
subcommands from that dict whenever it is not empty, so without this hook the generated
reference (docs/reference.md) would show only the commands loaded eagerly. Loading every
listed command through click's own ``list_commands``/``get_command`` first makes the
reference complete; the build fails if a listed command still is not in ``commands``.
"""

from __future__ import annotations

from typing import Any

import click
from mkdocs.exceptions import PluginError


def _load_every_command(group: click.Group, ctx: click.Context) -> None:
    """Resolve each command ``group`` lists, and each of a subgroup's, recursively."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or group.commands.get(name) is not command:
            raise PluginError(f"the CLI reference would miss `{ctx.command_path} {name}`")
        if isinstance(command, click.Group):
            _load_every_command(command, click.Context(command, info_name=name, parent=ctx))


def on_config(config: Any) -> Any:
    """Before any page is rendered: load every ``starebrain`` command."""
    from starebrain_actions.cli import main

    _load_every_command(main, click.Context(main, info_name="starebrain"))
    return config
