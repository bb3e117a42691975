"""The ADB key: created owner-only on first use, refused when loose."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from android_bridge import KEY_PATH_ENV, KeyPermissionError, default_key_path, ensure_key


def test_key_is_created_with_private_modes(tmp_path: Path) -> None:
    """A new key is 0600 in a 0700 directory, with a public key beside it."""
    path = ensure_key(tmp_path / "conf" / "adbkey")
    modes = (
        stat.S_IMODE(path.stat().st_mode),
        stat.S_IMODE(path.parent.stat().st_mode),
        Path(str(path) + ".pub").exists(),
    )
    expected = (0o600, 0o700, True)
    assert expected == modes


def test_existing_key_is_reused(tmp_path: Path) -> None:
    """A second call keeps the same key."""
    path = ensure_key(tmp_path / "adbkey")
    before = path.read_bytes()
    assert before == ensure_key(path).read_bytes()


def test_loose_key_is_refused(tmp_path: Path) -> None:
    """An existing key readable by others is refused with a message naming the fix."""
    path = ensure_key(tmp_path / "adbkey")
    os.chmod(path, 0o644)
    with pytest.raises(KeyPermissionError, match="chmod 600"):
        ensure_key(path)


def test_env_overrides_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """STAREBRAIN_ADB_KEY names the key path."""
    monkeypatch.setenv(KEY_PATH_ENV, str(tmp_path / "k"))
    assert tmp_path / "k" == default_key_path()


def test_default_path_is_under_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the override the key lives in $XDG_CONFIG_HOME/starebrain/adbkey."""
    monkeypatch.delenv(KEY_PATH_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert tmp_path / "starebrain" / "adbkey" == default_key_path()
