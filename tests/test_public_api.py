"""Each package's __init__ only re-exports, with a sorted, honest __all__."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ["starebrain_actions", "android_bridge", "android_bridge.simulator"]


def isort_key(name: str) -> tuple[int, str]:
    """SCREAMING_CASE first, then CamelCase, then the rest, each alphabetically."""
    if name.isupper():
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_names_only_real_attributes(name: str) -> None:
    """__all__ is sorted (constants, classes, functions: ruff's RUF022 order), unique, and
    every name in it exists."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert sorted(exported, key=isort_key) == exported
    assert len(set(exported)) == len(exported)
    for item in exported:
        assert hasattr(module, item), f"{name}.{item}"


@pytest.mark.parametrize("name", PACKAGES)
def test_init_only_reexports(name: str) -> None:
    """__init__.py holds imports, __all__ and a docstring, nothing else; every import is
    exported."""
    module = importlib.import_module(name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.module != "__future__":
                imported |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assert ["__all__"] == [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        else:
            raise AssertionError(f"{name}/__init__.py holds {ast.dump(node)[:80]}")
    assert imported == set(module.__all__)
