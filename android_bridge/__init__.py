"""A small, honest Android SMS library over adb-shell."""

from __future__ import annotations

__all__: list[str] = []
