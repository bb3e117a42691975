"""A simulated Android phone that speaks the real ADB protocol over loopback TCP."""

from __future__ import annotations

__all__: list[str] = []
