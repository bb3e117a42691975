"""The ``starebrain`` command line: ``main`` (the ``starebrain`` command) and ``nightly_main``
(the nightly job's own entry point), each command in a module of its own."""

from starebrain_actions.cli.main import main, nightly_main

__all__ = ["main", "nightly_main"]
