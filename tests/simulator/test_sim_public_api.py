"""The simulator's public surface and its isolation from production code."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import android_bridge
import android_bridge.simulator as simulator


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted and names exactly the public objects the package re-exports."""
    public = {
        name
        for name, value in vars(simulator).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    } - {"annotations"}
    assert sorted(simulator.__all__) == simulator.__all__
    assert set(simulator.__all__) == public


def test_production_bridge_never_imports_the_simulator() -> None:
    """No module of android_bridge outside simulator/ imports the simulator."""
    package_dir = Path(android_bridge.__file__).parent
    offenders = []
    for path in package_dir.rglob("*.py"):
        if "simulator" in path.relative_to(package_dir).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            offenders.extend(f"{path.name}: {name}" for name in names if "simulator" in name)
    assert [] == offenders
