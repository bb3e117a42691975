"""TelephonyProvider's ``SqlQueryChecker``: the guard against subqueries for restricted callers.

Modelled on ``SqlQueryChecker.java`` and its ``SQLiteTokenizer.java`` (TelephonyProvider
android-10.0.0_r30 to android-15.0.0_r2; the tokenizer is a copy of frameworks/base's, itself
after ``sqlite3GetToken``). Every projection column, the selection and the sort order are
tokenized; the query is rejected (``IllegalArgumentException``) when

- a token is ``select`` in any case: a bare word, or the text of a double-quoted,
  backquoted or bracketed identifier (a single-quoted string is a value, never a token);
- a ``;`` appears outside quotes and comments;
- a quote (``'``, ``"``, `````, ``[``) or a ``/*`` comment is not closed, or a ``--`` comment
  does not end with a newline ("we disallow strings ending in an inline comment").

Nothing else is looked at: ``LIMIT``, ``ORDER``, ``GROUP``, ``UNION`` and every other
keyword pass. A bare word is ASCII letters, digits and ``_`` starting with a letter or ``_``;
every other character is skipped.

How ``select`` is compared differs: up to android-13.0.0_r1 ``"select".equals(token
.toLowerCase())``, from android-14.0.0_r1 on ``"select".equalsIgnoreCase(token)``, which
also matches a quoted ``select`` spelt with U+017F LATIN SMALL LETTER LONG S (it uppercases
to ``S``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Final

_SELECT: Final = "select"


class QueryRejected(ValueError):
    """The checker's ``IllegalArgumentException``; the message is the Java one."""


def check_query_parameters(
    projection: Iterable[str] | None,
    selection: str | None,
    sort_order: str | None,
    *,
    ignore_case: bool,
) -> None:
    """``SqlQueryChecker.checkQueryParametersForSubqueries``.

    Raises:
        QueryRejected: a ``select`` token, a ``;``, or an unterminated quote or comment.
    """
    for column in projection or ():
        _tokenize(column, ignore_case=ignore_case)
    _tokenize(selection, ignore_case=ignore_case)
    _tokenize(sort_order, ignore_case=ignore_case)


def _check_token(token: str, *, ignore_case: bool) -> None:
    matched = _java_equals_ignore_case(_SELECT, token) if ignore_case else token.lower() == _SELECT
    if matched:
        raise QueryRejected("SELECT token not allowed in query")


def _java_equals_ignore_case(left: str, right: str) -> bool:
    """``String.equalsIgnoreCase``: per char, equal, or equal upper case, or equal lower case."""
    if len(left) != len(right):
        return False
    for a, b in zip(left, right, strict=True):
        if a == b:
            continue
        upper_a, upper_b = _char_upper(a), _char_upper(b)
        if upper_a == upper_b or upper_a.lower() == upper_b.lower():
            continue
        return False
    return True


def _char_upper(char: str) -> str:
    """``Character.toUpperCase(char)``: a one-character mapping only (``ß`` stays ``ß``)."""
    upper = char.upper()
    return upper if len(upper) == 1 else char


def _is_alpha(char: str) -> bool:
    return ("a" <= char <= "z") or ("A" <= char <= "Z") or char == "_"


#: What the loop below steps over one character at a time, taken as a run: no token, quote,
#: bracket, comment or semicolon starts in it.
_NOTHING_TO_CHECK = re.compile(r"[^A-Za-z_'\"`\[\-/;]+")
#: The rest of an identifier: ASCII letters, digits and ``_``.
_IDENTIFIER_REST = re.compile(r"[A-Za-z0-9_]*")


def _tokenize(sql: str | None, *, ignore_case: bool) -> None:
    if sql is None:
        return
    verdict = _verdict(sql, ignore_case)
    if verdict is not None:
        raise QueryRejected(verdict)


@functools.lru_cache(maxsize=1024)
def _verdict(sql: str, ignore_case: bool) -> str | None:
    """What ``_scan`` says of a text: None for passed, else the rejection's message.
    Remembered: a client's projections and sort orders, and often its whole selection,
    recur in every query it sends."""
    try:
        _scan(sql, ignore_case=ignore_case)
    except QueryRejected as exc:
        return str(exc)
    return None


def _scan(sql: str, *, ignore_case: bool) -> None:
    pos = 0
    length = len(sql)
    while pos < length:
        skipped = _NOTHING_TO_CHECK.match(sql, pos)
        if skipped is not None:
            pos = skipped.end()
            continue
        char = sql[pos]
        if _is_alpha(char):
            start = pos
            pos = _IDENTIFIER_REST.match(sql, pos + 1).end()  # type: ignore[union-attr]
            _check_token(sql[start:pos], ignore_case=ignore_case)
            continue
        if char in "'\"`":
            quote_start = pos
            pos += 1
            while True:
                pos = sql.find(char, pos)
                if pos < 0:
                    raise QueryRejected(f"Unterminated quote in '{sql}'")
                if pos + 1 < length and sql[pos + 1] == char:
                    pos += 2
                    continue
                break
            quote_end = pos
            pos += 1
            if char != "'":
                _check_token(
                    sql[quote_start + 1 : quote_end].replace(char * 2, char),
                    ignore_case=ignore_case,
                )
            continue
        if char == "[":
            end = sql.find("]", pos + 1)
            if end < 0:
                raise QueryRejected(f"Unterminated quote in '{sql}'")
            _check_token(sql[pos + 1 : end], ignore_case=ignore_case)
            pos = end + 1
            continue
        if sql.startswith("--", pos):
            end = sql.find("\n", pos + 2)
            if end < 0:
                raise QueryRejected(f"Unterminated comment in '{sql}'")
            pos = end + 1
            continue
        if sql.startswith("/*", pos):
            end = sql.find("*/", pos + 2)
            if end < 0:
                raise QueryRejected(f"Unterminated comment in '{sql}'")
            pos = end + 2
            continue
        if char == ";":
            raise QueryRejected(f"Semicolon is not allowed in '{sql}'")
        pos += 1


def first_statement(sql: str) -> str:
    """The text SQLite compiles: everything before the first ``;`` outside quotes and comments.

    Android prepares a statement with ``sqlite3_prepare16_v2`` and no tail pointer
    (``android_database_SQLiteConnection.cpp``), so whatever follows the first statement is
    ignored rather than refused.
    """
    pos = 0
    length = len(sql)
    while pos < length:
        char = sql[pos]
        if char in "'\"`[":
            closing = "]" if char == "[" else char
            end = sql.find(closing, pos + 1)
            while end >= 0 and closing != "]" and end + 1 < length and sql[end + 1] == closing:
                end = sql.find(closing, end + 2)
            if end < 0:
                return sql
            pos = end + 1
        elif sql.startswith("--", pos):
            end = sql.find("\n", pos + 2)
            if end < 0:
                return sql
            pos = end + 1
        elif sql.startswith("/*", pos):
            end = sql.find("*/", pos + 2)
            if end < 0:
                return sql
            pos = end + 2
        elif char == ";":
            return sql[:pos]
        else:
            pos += 1
    return sql
