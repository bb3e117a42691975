"""``python -m starebrain_actions.cli``: the ``starebrain`` command (for profilers and
environments without the console script)."""

from starebrain_actions.cli.main import main

main()
