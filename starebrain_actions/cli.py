"""The ``starebrain`` command line: the composition point of the ledger and the bridge."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="starebrain-actions")
def main() -> None:
    """Send SMS through an Android phone without ever sending the same message twice."""


# Subcommands contributed by android_bridge (registered here so the bridge never imports us).
from android_bridge.simulator.cli import simulator_command  # noqa: E402

main.add_command(simulator_command)
