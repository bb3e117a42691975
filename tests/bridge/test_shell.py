"""POSIX quoting and sentinel framing."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from android_bridge import CommandRejected, IncompleteRead, posix_quote
from android_bridge._shell import frame_script
from tests.bridge.strategies import bodies

SH = shutil.which("sh")


@pytest.mark.skipif(SH is None, reason="needs a POSIX sh")
@settings(max_examples=60, deadline=None)
@given(bodies(400))
def test_real_posix_shell_receives_quoted_text_literally(text: str) -> None:
    """A real POSIX shell hands the quoted text to printf byte for byte, expanding nothing."""
    assert SH is not None
    result = subprocess.run(
        [SH, "-c", f"printf '%s' {posix_quote(text)}"], capture_output=True, check=True
    )
    assert text.encode("utf-8") == result.stdout


@pytest.mark.parametrize("text", ["'; reboot; echo '", "$(id)", "`id`", "a\nb", ""])
def test_injection_attempts_are_one_literal_word(text: str) -> None:
    """Shell metacharacters end up inside one single-quoted word."""
    quoted = posix_quote(text)
    assert quoted.startswith("'")
    assert quoted.endswith("'")


def test_safe_words_are_left_bare() -> None:
    """Plain words need no quotes."""
    expected = "smsto:+12025550100"
    assert expected == posix_quote("smsto:+12025550100")


def test_nul_is_refused() -> None:
    """A NUL cannot be passed to a shell; refusing it proves nothing was sent."""
    with pytest.raises(CommandRejected):
        posix_quote("a\x00b")


def test_lone_surrogate_is_refused() -> None:
    """Text that cannot be UTF-8 encoded is refused."""
    with pytest.raises(CommandRejected):
        posix_quote("a\ud800b")


@settings(max_examples=100)
@given(st.lists(st.text(max_size=50).map(lambda t: t.replace("\x00", "")), max_size=5))
def test_frames_split_what_a_shell_would_print(outputs: list[str]) -> None:
    """Step outputs are recovered exactly from a simulated run of the framed script."""
    script = frame_script([f"step{i}" for i in range(len(outputs))], nonce="N0NCE")
    raw = "".join(f"N0NCE:{i}:begin\n{out}N0NCE:{i}:end:{i}\n" for i, out in enumerate(outputs))
    steps = script.split(raw)
    assert outputs == [step.output for step in steps]
    assert list(range(len(outputs))) == [step.exit_status for step in steps]


def test_truncated_frames_are_incomplete() -> None:
    """Output cut before the last end frame is an incomplete read."""
    script = frame_script(["a", "b"], nonce="N")
    with pytest.raises(IncompleteRead):
        script.split("N:0:begin\nx\nN:0:end:0\nN:1:begin\ny\n")


def test_nonce_is_fresh_per_script() -> None:
    """Two scripts never share a nonce, so stored text cannot forge a frame."""
    assert frame_script(["a"]).nonce != frame_script(["a"]).nonce
