"""``starebrain simulator``: run the simulated phone standalone."""

from __future__ import annotations

import click


@click.command("simulator")
def simulator_command() -> None:
    """Run a simulated Android phone that speaks ADB on 127.0.0.1 (not built yet)."""
    raise click.ClickException("the simulator is not built yet")
