"""The lexer's remembered words (plain ones and those ``_Lexer._word`` made) change no parse:
a script parses the same whether its words were seen before, in any other place."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from android_bridge.simulator import _shell
from android_bridge.simulator._shell import ShellSyntaxError

#: Pieces of the scripts clients send, and of what breaks them: quotes, expansions,
#: redirections, backslashes (a line continuation or an escaped blank), braces.
PIECES = [
    "echo", " ", "\t", "\n", ";", "&&", "||", "|", "{ ", " }", "2", ">", ">>", "2>", "<",
    "/dev/null", "'q r'", '"$r"', '"$t:$d"', '" u0 $r/"', "$", "$?", "${x}", "${a b}", "x=$?",
    "r=$(cmd role 2>/dev/null)", '"$(date +%s%3N)/."', "$(a 'b)')", "`date`", "\\", "\\\n",
    "\\ ", "a$", '"a$"', "#c", "SB1:end:$?", "(", "'",
]  # fmt: skip


def _fresh(text: str) -> str:
    """The parse of ``text`` with nothing remembered, or its error."""
    _shell._PLAIN_WORDS.clear()
    _shell._KEPT_WORDS.clear()
    return _parsed(text)


def _parsed(text: str) -> str:
    try:
        return repr(_shell.parse.__wrapped__(text))  # type: ignore[attr-defined]
    except ShellSyntaxError as exc:
        return f"error: {exc}"


@pytest.mark.parametrize(
    ("seen", "text"),
    [
        ('echo "$r"; echo x', 'printf "$r" >/dev/null'),
        ("echo a\\ b", "echo a\\\nb"),
        ("echo a\\", "echo a\\ b; echo a\\\nb"),
        ("echo a$ b", 'echo a$; echo "a$"'),
        ("r=$(cmd role 2>/dev/null); echo", "{ r=$(cmd role 2>/dev/null)|grep x; }"),
        ("echo SB1:end:$?", "echo SB1:end:$?>/dev/null"),
    ],
)
def test_a_word_seen_elsewhere_parses_the_same(seen: str, text: str) -> None:
    expected = _fresh(text)
    _parsed(seen)
    assert expected == _parsed(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=12),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=12),
)
def test_any_script_parses_the_same_after_another(seen: list[str], text: list[str]) -> None:
    expected = _fresh("".join(text))
    _parsed("".join(seen))
    _parsed("".join(text))
    assert expected == _parsed("".join(text))
