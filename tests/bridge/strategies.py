"""Hypothesis strategies for SMS bodies and provider rows full of parser hazards."""

from __future__ import annotations

from hypothesis import strategies as st

#: Fragments that break naive ``content query`` parsers and naive shells.
HAZARDS = (
    ", body=",
    ", address=",
    ", _id=",
    "=",
    "\n",
    "\r\n",
    "\r",
    "\nRow: 1 _id=2, body=",
    "\nRow: 0 _id=1, address=",
    "Row: ",
    "NULL",
    "BLOB",
    "No result found.",
    "'",
    '"',
    "\\",
    "$(id)",
    "`id`",
    "'; reboot; echo '",
    "${HOME}",
    "&& echo pwned",
    "|",
    ";",
    "#",
    "%s",
    "😀",
    "👩‍👩‍👧",
    "e\u0301",
    "\u00e9",
    "\t",
    " ",
)

_TEXT_ALPHABET = st.characters(
    exclude_categories=["Cs"],  # lone surrogates cannot be UTF-8 encoded
    exclude_characters="\x00",
)


def bodies(max_size: int = 2000) -> st.SearchStrategy[str]:
    """Random Unicode text (emoji included) interleaved with the hazards, up to max_size."""
    piece = st.one_of(st.sampled_from(HAZARDS), st.text(_TEXT_ALPHABET, max_size=40))
    return st.lists(piece, max_size=60).map("".join).map(lambda text: text[:max_size])
