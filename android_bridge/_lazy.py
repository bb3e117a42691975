"""Public names imported on first use (PEP 562), for a package's ``__init__``: importing one
module of the package does not import every other one."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    public: Iterable[str],
    namespace: MutableMapping[str, Any],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__``.

    ``exports`` maps each public name to ``"module"`` or ``"module:attribute"``; a name is
    imported when first asked for, then kept in ``namespace`` (the package's globals).
    """
    names = sorted(public)

    def getattr_(name: str) -> Any:
        try:
            module, _, attribute = exports[name].partition(":")
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attribute or name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *names})

    return getattr_, dir_
