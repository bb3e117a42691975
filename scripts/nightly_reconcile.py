#!/usr/bin/env python3
"""The nightly reconciliation job for cron: ``python scripts/nightly_reconcile.py --db LEDGER``.

A thin wrapper over ``starebrain nightly`` (same code, options and exit statuses): 0 nothing
needs a person, 1 something does, 2 usage error. See docs/nightly.md. Run it with the
interpreter of the environment where starebrain-actions is installed; from a source checkout
it falls back to the package next to this script.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from starebrain_actions.cli.main import nightly_main
except ModuleNotFoundError:  # a source checkout run without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from starebrain_actions.cli.main import nightly_main

if __name__ == "__main__":
    nightly_main(prog_name="nightly_reconcile.py")
