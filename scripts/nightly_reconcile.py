#!/usr/bin/env python3
"""The nightly reconciliation job for cron: ``python scripts/nightly_reconcile.py --db LEDGER``.

A thin wrapper over ``starebrain nightly`` (same code, options and exit statuses): 0 nothing
needs a person, 1 something does, 2 usage error. See docs/nightly.md.
"""

from __future__ import annotations

from starebrain_actions.cli import nightly_main

if __name__ == "__main__":
    nightly_main(prog_name="nightly_reconcile.py")
