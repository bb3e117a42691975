"""``run_all.py --smoke``: each benchmark at its smallest sizes, to show that it still runs and
reports its rows (``tests/test_benchmarks.py`` runs this); its figures mean nothing.

``run_all.py --smoke`` sets the variable, so a benchmark's own child processes see it too.
"""

from __future__ import annotations

import os
from typing import Final

#: Set to ``1`` by ``run_all.py --smoke``.
ENV: Final = "STAREBRAIN_BENCH_SMOKE"


def smoke() -> bool:
    """Whether this is a smoke run (``run_all.py --smoke``): the smallest sizes."""
    return os.environ.get(ENV) == "1"
