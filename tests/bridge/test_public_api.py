"""The package's public surface stays honest."""

from __future__ import annotations

import android_bridge
import android_bridge.exceptions as exceptions


def _isort_key(name: str) -> tuple[int, str]:
    """isort-style order (the one ruff's RUF022 enforces): CONSTANTS, Classes, functions."""
    if name.isupper():
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


def test_all_is_sorted_and_exact() -> None:
    """``__all__`` is sorted and names exactly the public names the package defines."""
    module_type = type(android_bridge)
    for name in android_bridge.__all__:  # exports are imported on first use
        getattr(android_bridge, name)
    public = sorted(
        name
        for name, value in vars(android_bridge).items()
        if not name.startswith("_") and name != "annotations" and not isinstance(value, module_type)
    )
    assert sorted(android_bridge.__all__, key=_isort_key) == android_bridge.__all__
    assert public == sorted(android_bridge.__all__)


def test_every_exception_is_exported_and_in_the_tree() -> None:
    """Every exception class is re-exported and derives from BridgeError."""
    classes = [getattr(exceptions, name) for name in exceptions.__all__]
    assert all(issubclass(cls, exceptions.BridgeError) for cls in classes)
    assert set(exceptions.__all__) <= set(android_bridge.__all__)


def test_device_unreachable_is_not_sent_and_outcome_unknown_is_not() -> None:
    """The tree's key line: unreachable means not sent; unknown outcome never does."""
    expected = (True, False)
    assert expected == (
        issubclass(exceptions.DeviceUnreachable, exceptions.NotSent),
        issubclass(exceptions.OutcomeUnknown, exceptions.NotSent),
    )
