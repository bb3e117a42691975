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
    exported. A package that imports lazily holds its imports under ``TYPE_CHECKING``, a
    table ``_EXPORTS`` naming exactly the same modules and names, and the ``__getattr__``
    and ``__dir__`` that read it."""
    module = importlib.import_module(name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    imported: dict[str, str] = {}
    lazy: dict[str, str] | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.module == "android_bridge._lazy":
                continue  # the lazy machinery itself
            if node.module != "__future__":
                imported |= _names(node)
        elif isinstance(node, ast.Import):
            if all((alias.asname or "").startswith("_") for alias in node.names):
                continue  # private imports: the lazy machinery's own
            imported |= {alias.asname or alias.name: alias.name for alias in node.names}
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "_typing.TYPE_CHECKING":
            for inner in node.body:
                assert isinstance(inner, ast.ImportFrom), ast.dump(inner)[:80]
                imported |= _names(inner)
        elif (
            isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0]) == "(__getattr__, __dir__)"
            and ast.unparse(node.value) == "_lazy_exports(__name__, _EXPORTS, __all__, globals())"
        ):
            continue  # the lookup of _EXPORTS
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            target = [t.id for t in targets if isinstance(t, ast.Name)]
            assert target in (["__all__"], ["_EXPORTS"])
            if target == ["_EXPORTS"]:
                assert node.value is not None
                lazy = ast.literal_eval(node.value)
        elif isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        else:
            raise AssertionError(f"{name}/__init__.py holds {ast.dump(node)[:80]}")
    assert set(module.__all__) == set(imported)
    if lazy is not None:
        assert imported == {
            exported: (where if ":" in where else f"{where}:{exported}")
            for exported, where in lazy.items()
        }


def _names(node: ast.ImportFrom) -> dict[str, str]:
    """What a ``from … import …`` binds: each name and the ``module:attribute`` it is."""
    return {alias.asname or alias.name: f"{node.module}:{alias.name}" for alias in node.names}


@pytest.mark.parametrize("name", ["starebrain_actions", "android_bridge"])
def test_lazy_exports_are_the_defined_objects(name: str) -> None:
    """Each lazily exported name is the very object its module defines, and ``dir`` lists
    every exported name before any is used."""
    module = importlib.import_module(name)
    assert set(module.__all__) <= set(dir(module))
    for exported, where in module._EXPORTS.items():
        source, _, attribute = where.partition(":")
        assert getattr(importlib.import_module(source), attribute or exported) is getattr(
            module, exported
        )
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
