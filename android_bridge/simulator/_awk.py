"""``awk``: the part of Android's awk the product's scripts use, and nothing more.

Android's ``/system/bin/awk`` is Brian Kernighan's "one true awk" (system/core
``shell_and_utilities``: "The awk added in Android P is Brian Kernighan's 'one true' awk";
``awk`` is in ``shell_and_utilities_system`` at android-10.0.0_r30 … android-15.0.0_r1).
external/one-true-awk is "version 20190125" at android-10.0.0_r30, 20200206 at 11.0.0_r1,
20210215 at 12.0.0_r1, 20211208 at 13.0.0_r1, 20221215 at 14.0.0_r1 and 20240311 at
15.0.0_r1. The subset below behaves the same in all of them, and
``tests/simulator/test_sim_awk_diff.py`` holds it to a real one-true-awk (Debian's
``original-awk``).

Modelled: ``awk [-F SEP | -FSEP] 'PROGRAM'`` reading stdin, one record per line. ``-F``
takes one character other than a space (each occurrence separates fields; ``-Ft`` and ``-F
t`` mean a tab, ``main.c``'s "wart"); without it fields are separated by runs of blanks,
tabs and newlines. A program is items ``PATTERN {ACTION}``, ``PATTERN`` (prints the record),
``{ACTION}``, ``BEGIN {…}`` and ``END {…}``; statements (separated by ``;`` or newlines)
are ``NAME = EXPR``, ``print [EXPR[, EXPR]…]`` and ``exit [EXPR]`` (in a rule it skips to
``END``; in ``END`` it ends, keeping an earlier status when it has none); expressions are
string literals (escapes ``\\"``, ``\\\\``, ``\\/``, ``\\n``, ``\\t``), integer
literals, variables, ``$N``, regular-expression literals (alone they match ``$0``),
``!``, concatenation, ``==``, ``!=``, ``~``, ``!~``, ``&&`` and parentheses.

Values follow ``tran.c``/``run.c``: a field is a string that is also a number when it
looks like one (``is_number``); ``==`` compares numbers when both sides are numbers,
otherwise the strings (``relop``: ``strcmp``), so ``$2 == "0"`` is a string comparison; an
unset variable is the empty string and 0; a number prints as an integer when it is one
(``%.6g`` otherwise). Regular expressions are POSIX EREs made of ordinary characters,
``.``, ``[…]`` (no character classes), ``*``, ``+``, ``?``, ``|``, ``(…)``, ``^``, ``$`` and
backslash-escaped punctuation; interval expressions (``{n,m}``, new in one-true-awk during
Android 11's life) are not modelled.

Anything else (another option, a file operand, another operator, built-in variables and
functions, other statements, comments) is refused with ``awk: not modelled by the
simulator: …`` and status 2, so that a script using more fails in tests rather than being
read kindly. The one-true-awk versions differ in what ``is_number`` accepts (hexadecimal,
``inf``, ``nan``), and the C library decides whether a decimal too small for a double is
one; comparing such a field with a number (or with another such field) is refused the same
way. A decimal too large for a double is a string in every version (``strtod``'s
``ERANGE``). Digits and letters are ASCII only, as ``isdigit``/``isalpha``/``strtod`` see
them: an Arabic-Indic digit is no number, nor a name's letter.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from typing import Final

import attrs

from android_bridge.simulator._shell import Output, TerminalReadError, read_input

_STATUS_ERROR: Final = 2
#: Names one-true-awk gives a meaning (keywords, built-in variables and functions): a
#: program naming one is refused, never run as if it were an ordinary variable.
_RESERVED_NAMES: Final = (
    "BEGIN END function func if else while for do break continue next nextfile delete in"
    " getline print printf return exit length substr index split sub gsub match sprintf"
    " sin cos atan2 exp log sqrt int rand srand tolower toupper system close fflush"
    " NR NF FNR FS OFS ORS RS FILENAME SUBSEP RSTART RLENGTH CONVFMT OFMT ENVIRON ARGC ARGV"
)
_RESERVED: Final = frozenset(_RESERVED_NAMES.split())
#: A decimal number as ``strtod`` reads it, surrounded by blanks (``is_number``).
_DECIMAL: Final = re.compile(
    r"[ \t\n]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t\n]*", re.ASCII
)
#: Text the one-true-awk versions disagree about as a number: hexadecimal, infinity and NaN
#: (``strtod`` takes them up to 2021; the second edition refuses hexadecimal and takes only
#: signed ``inf``/``nan``), and CR, VT or FF around it (trailing ones are blanks to the
#: second edition's ``isspace`` only).
_DISPUTED: Final = re.compile(r"[ \t\n\r\v\f]*[+-]?(0[xX]|inf|nan)|.*[\r\v\f]", re.I | re.S)
#: What separates fields when ``FS`` is a space: blanks, tabs and newlines only.
_BLANKS: Final = re.compile(r"[ \t\n]+")
#: The leading number ``atof`` takes from a string.
_LEADING_NUMBER: Final = re.compile(
    r"[ \t\n]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII
)
#: ASCII digits and letters: what the C library's ``isdigit``/``isalpha`` take in the C and
#: UTF-8 locales, byte by byte (a non-ASCII digit or letter is neither, to ``strtod`` and
#: to ``lex.c``).
_DIGITS: Final = frozenset("0123456789")
_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class NotModelled(Exception):
    """The program or the command line uses awk beyond the modelled subset."""


@attrs.frozen
class _Value:
    """One awk cell: its string and number, and which of the two it is (``tval``)."""

    text: str
    number: float
    is_string: bool
    is_number: bool
    #: a field whose text the versions read differently as a number (``_DISPUTED``)
    disputed: bool = False


def _format_number(number: float) -> str:
    """``getsval`` of a number: an integer as one, otherwise ``%.6g``."""
    if number == int(number):
        return str(int(number))
    return f"{number:.6g}"


def _number(number: float) -> _Value:
    return _Value(_format_number(number), number, is_string=False, is_number=True)


def _string(text: str) -> _Value:
    found = _LEADING_NUMBER.match(text)
    return _Value(text, float(found.group(0)) if found else 0.0, is_string=True, is_number=False)


def _strnum(text: str) -> _Value:
    """A field or a record: a string, and also a number when the whole text is one.

    ``strtod`` setting ``ERANGE`` makes it no number in every version (``is_number``: ``r ==
    HUGE_VAL || errno == ERANGE`` at android-10.0.0_r30 and 11.0.0_r1; ``is_valid_number``:
    ``errno == ERANGE`` at 12.0.0_r1 to 15.0.0_r1, external/one-true-awk ``lib.c``): so a
    decimal too large for a double is a string. One too small (it underflows to 0 or to a
    subnormal) is disputed: whether ``strtod`` then sets ``ERANGE`` is the C library's choice
    (C11 7.22.1.3), and bionic's was not read; glibc (Debian's ``original-awk``) sets it.
    """
    value = _string(text)
    is_number = bool(_DECIMAL.fullmatch(text))
    disputed = bool(_DISPUTED.match(text))
    if is_number:
        parsed = float(text.strip(" \t\n"))
        if math.isinf(parsed):
            is_number = False
        elif abs(parsed) < sys.float_info.min and re.search("[1-9]", _mantissa(text)):
            is_number, disputed = False, True
    return attrs.evolve(value, is_number=is_number, disputed=disputed)


def _mantissa(text: str) -> str:
    """The digits of a decimal before its exponent."""
    return re.split("[eE]", text, maxsplit=1)[0]


_UNSET: Final = _Value("", 0.0, is_string=True, is_number=True)
_TRUE: Final = _number(1)
_FALSE: Final = _number(0)


# -- the program -----------------------------------------------------------------------------


@attrs.frozen
class _Token:
    kind: str  # "name", "string", "number", "regex", "op", "newline", "end"
    text: str


_OPERATORS: Final = ("&&", "==", "!=", "!~", "{", "}", "(", ")", ";", ",", "!", "~", "=", "$")


def _regex(source: str) -> re.Pattern[str]:
    """An ERE of the modelled subset, as a Python pattern."""
    out: list[str] = []
    index = 0
    while index < len(source):
        char = source[index]
        if char == "\\":
            following = source[index + 1 : index + 2]
            if not following or following.isalnum() or following == "_":
                raise NotModelled(f"the escape \\{following} in /{source}/")
            out.append(re.escape(following))
            index += 2
            continue
        if char == "[":
            end = index + 1
            if source[end : end + 1] == "^":
                end += 1
            if source[end : end + 1] == "]":
                end += 1
            end = source.find("]", end)
            if end < 0:
                raise NotModelled(f"an unclosed bracket in /{source}/")
            body = source[index + 1 : end]
            if "[" in body or "\\" in body:
                raise NotModelled(f"the bracket expression [{body}] in /{source}/")
            negate = body.startswith("^")
            members = body[1:] if negate else body
            escaped = "".join("\\" + c if c in "\\]^" else c for c in members)
            out.append("[" + ("^" if negate else "") + escaped + "]")
            index = end + 1
            continue
        if char in "{}":
            raise NotModelled(f"an interval expression in /{source}/")
        if char == "$":
            out.append(r"\Z")
        elif char in ".*+?|()^":
            out.append(char)
        else:
            out.append(re.escape(char))
        index += 1
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error as exc:
        raise NotModelled(f"the regular expression /{source}/: {exc}") from exc


def _tokens(program: str) -> list[_Token]:
    tokens: list[_Token] = []
    index = 0

    def operand_expected() -> bool:
        if not tokens:
            return True
        last = tokens[-1]
        if last.kind == "newline" or (last.kind == "name" and last.text in ("print", "exit")):
            return True
        return last.kind == "op" and last.text in (
            "{",
            "(",
            ";",
            ",",
            "!",
            "~",
            "!~",
            "&&",
            "==",
            "!=",
            "=",
        )

    while index < len(program):
        char = program[index]
        if char in " \t":
            index += 1
        elif char == "\\" and program[index + 1 : index + 2] == "\n":
            index += 2
        elif char == "\n":
            tokens.append(_Token("newline", "\n"))
            index += 1
        elif char == '"':
            text: list[str] = []
            index += 1
            while True:
                if index >= len(program) or program[index] == "\n":
                    raise NotModelled("an unterminated string")
                inner = program[index]
                if inner == '"':
                    index += 1
                    break
                if inner == "\\":
                    escape = program[index + 1 : index + 2]
                    mapped = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t"}.get(escape)
                    if mapped is None:
                        raise NotModelled(f'the string escape \\{escape} in "…"')
                    text.append(mapped)
                    index += 2
                    continue
                text.append(inner)
                index += 1
            tokens.append(_Token("string", "".join(text)))
        elif char == "/" and operand_expected():
            end = index + 1
            while end < len(program) and program[end] != "/":
                if program[end] == "\n":
                    raise NotModelled("an unterminated regular expression")
                end += 2 if program[end] == "\\" else 1
            if end >= len(program):
                raise NotModelled("an unterminated regular expression")
            tokens.append(_Token("regex", program[index + 1 : end]))
            index = end + 1
        elif char in _DIGITS:
            found = re.match(r"[0-9]+", program[index:])
            assert found is not None
            if program[index + found.end() : index + found.end() + 1] in (".", "e", "E"):
                raise NotModelled("a number that is not a plain integer")
            if len(found.group(0)) > 9:
                raise NotModelled("an integer of more than nine digits")
            tokens.append(_Token("number", found.group(0)))
            index += found.end()
        elif char in _LETTERS or char == "_":
            found = re.match(r"[A-Za-z_][A-Za-z0-9_]*", program[index:])
            assert found is not None
            tokens.append(_Token("name", found.group(0)))
            index += found.end()
        else:
            operator = next((op for op in _OPERATORS if program.startswith(op, index)), None)
            if operator is None or program.startswith("===", index):
                raise NotModelled(f"the character {char!r}")
            if operator == "=" and program.startswith("=~", index):
                raise NotModelled("=~")
            tokens.append(_Token("op", operator))
            index += len(operator)
    tokens.append(_Token("end", ""))
    return tokens


# Expressions are tuples: ("str", text) ("num", n) ("var", name) ("field", n) ("regex", re)
# ("not", e) ("cat", a, b) ("eq"|"ne", a, b) ("match"|"nomatch", a, re) ("and", a, b).
_Expr = tuple[object, ...]
# Statements: ("assign", name, expr) ("print", [exprs]) ("exit", expr | None).
_Stmt = tuple[object, ...]


@attrs.frozen
class _Rule:
    kind: str  # "BEGIN", "END", "main"
    pattern: _Expr | None
    action: tuple[_Stmt, ...] | None  # None: print the record


class _Parser:
    def __init__(self, program: str) -> None:
        self.tokens = _tokens(program)
        self.position = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.position]

    def _take(self, kind: str, text: str | None = None) -> _Token | None:
        token = self.token
        if token.kind == kind and (text is None or token.text == text):
            self.position += 1
            return token
        return None

    def _expect(self, kind: str, text: str) -> None:
        if self._take(kind, text) is None:
            raise NotModelled(f"{self.token.text or 'the end'!r} where {text!r} was expected")

    def _skip_separators(self, *, semicolons: bool) -> None:
        while self._take("newline") or (semicolons and self._take("op", ";")):
            pass

    def program(self) -> list[_Rule]:
        rules: list[_Rule] = []
        self._skip_separators(semicolons=True)
        while self.token.kind != "end":
            rules.append(self._rule())
            self._skip_separators(semicolons=True)
        return rules

    def _rule(self) -> _Rule:
        for special in ("BEGIN", "END"):
            if self._take("name", special):
                return _Rule(kind=special, pattern=None, action=self._block())
        pattern = None
        if not (self.token.kind == "op" and self.token.text == "{"):
            pattern = self._expression()
        if self.token.kind == "op" and self.token.text == "{":
            return _Rule(kind="main", pattern=pattern, action=self._block())
        if self.token.kind not in ("newline", "end") and self.token != _Token("op", ";"):
            raise NotModelled(f"{self.token.text!r} after a pattern")
        return _Rule(kind="main", pattern=pattern, action=None)

    def _block(self) -> tuple[_Stmt, ...]:
        self._expect("op", "{")
        statements: list[_Stmt] = []
        self._skip_separators(semicolons=True)
        while not self._take("op", "}"):
            statements.append(self._statement())
            if self.token.kind == "op" and self.token.text == "}":
                continue
            if not (self._take("op", ";") or self._take("newline")):
                raise NotModelled(f"{self.token.text or 'the end'!r} after a statement")
            self._skip_separators(semicolons=True)
        return tuple(statements)

    def _statement(self) -> _Stmt:
        token = self.token
        if token.kind != "name":
            raise NotModelled(f"the statement starting {token.text or 'at the end'!r}")
        if token.text == "print":
            self.position += 1
            values: list[_Expr] = []
            if not self._at_statement_end():
                values.append(self._expression())
                while self._take("op", ","):
                    values.append(self._expression())
            return ("print", tuple(values))
        if token.text == "exit":
            self.position += 1
            return ("exit", None if self._at_statement_end() else self._expression())
        name = self._name()
        self._expect("op", "=")
        return ("assign", name, self._expression())

    def _at_statement_end(self) -> bool:
        token = self.token
        return token.kind in ("newline", "end") or (token.kind == "op" and token.text in (";", "}"))

    def _name(self) -> str:
        token = self._take("name")
        assert token is not None
        if token.text in _RESERVED:
            raise NotModelled(token.text)
        return token.text

    def _expression(self) -> _Expr:
        left = self._match()
        while self._take("op", "&&"):
            self._skip_separators(semicolons=False)
            left = ("and", left, self._match())
        return left

    def _match(self) -> _Expr:
        left = self._comparison()
        for operator, kind in (("~", "match"), ("!~", "nomatch")):
            if self._take("op", operator):
                regex = self._take("regex")
                if regex is None:
                    raise NotModelled(f"{operator} with a dynamic regular expression")
                return (kind, left, _regex(regex.text))
        return left

    def _comparison(self) -> _Expr:
        left = self._concatenation()
        for operator, kind in (("==", "eq"), ("!=", "ne")):
            if self._take("op", operator):
                return (kind, left, self._concatenation())
        return left

    def _concatenation(self) -> _Expr:
        left = self._unary()
        while self.token.kind in ("name", "string", "number") or (
            self.token.kind == "op" and self.token.text in ("$", "(")
        ):
            left = ("cat", left, self._unary())
        return left

    def _unary(self) -> _Expr:
        if self._take("op", "!"):
            return ("not", self._unary())
        return self._primary()

    def _primary(self) -> _Expr:
        token = self.token
        if self._take("op", "$"):
            number = self._take("number")
            if number is None:
                raise NotModelled("$ followed by anything but a number")
            return ("field", int(number.text))
        if self._take("op", "("):
            inner = self._expression()
            self._expect("op", ")")
            return inner
        if self._take("string"):
            return ("str", token.text)
        if self._take("number"):
            return ("num", float(token.text))
        if self._take("regex"):
            return ("match", ("field", 0), _regex(token.text))
        if token.kind == "name":
            name = self._name()
            if self.token.kind == "op" and self.token.text == "(":
                raise NotModelled(f"the function call {name}(…)")
            return ("var", name)
        raise NotModelled(f"{token.text or 'the end'!r} where a value was expected")


# -- running it ------------------------------------------------------------------------------


class _Exit(Exception):
    pass


class _Run:
    def __init__(self, separator: str) -> None:
        self.separator = separator
        self.variables: dict[str, _Value] = {}
        self.record = ""
        self.fields: list[str] = []
        self.out: list[str] = []
        self.status = 0

    def set_record(self, line: str) -> None:
        self.record = line
        if self.separator == " ":
            self.fields = [field for field in _BLANKS.split(line) if field]
        elif line:
            self.fields = line.split(self.separator)
        else:
            self.fields = []

    def value(self, expr: _Expr) -> _Value:
        kind = expr[0]
        if kind == "str":
            return _string(str(expr[1]))
        if kind == "num":
            number = expr[1]
            assert isinstance(number, float)
            return _number(number)
        if kind == "var":
            return self.variables.get(str(expr[1]), _UNSET)
        if kind == "field":
            index = expr[1]
            assert isinstance(index, int)
            if index == 0:
                return _strnum(self.record)
            if index <= len(self.fields):
                return _strnum(self.fields[index - 1])
            return _string("")
        if kind == "not":
            return _FALSE if self.truth(self.value(_sub(expr, 1))) else _TRUE
        if kind == "cat":
            left, right = self.value(_sub(expr, 1)), self.value(_sub(expr, 2))
            return _string(left.text + right.text)
        if kind in ("eq", "ne"):
            left, right = self.value(_sub(expr, 1)), self.value(_sub(expr, 2))
            for side, other in ((left, right), (right, left)):
                if side.disputed and (other.is_number or other.disputed):
                    raise NotModelled(f"comparing {side.text!r} with a number")
            if left.is_number and right.is_number:
                equal = left.number == right.number
            else:
                equal = left.text == right.text
            return _TRUE if equal == (kind == "eq") else _FALSE
        if kind in ("match", "nomatch"):
            subject = self.value(_sub(expr, 1))
            regex = expr[2]
            assert isinstance(regex, re.Pattern)
            found = regex.search(subject.text) is not None
            return _TRUE if found == (kind == "match") else _FALSE
        if kind == "and":
            if not self.truth(self.value(_sub(expr, 1))):
                return _FALSE
            return _TRUE if self.truth(self.value(_sub(expr, 2))) else _FALSE
        raise AssertionError(kind)

    @staticmethod
    def truth(value: _Value) -> bool:
        """As ``notnull`` compares it with the null cell: a number is true when not 0, a
        string (a field that is not a number too) when not empty."""
        if value.disputed:
            raise NotModelled(f"the truth of {value.text!r}")
        if value.is_number:
            return value.number != 0
        return value.text != ""

    def execute(self, statements: tuple[_Stmt, ...]) -> None:
        for statement in statements:
            kind = statement[0]
            if kind == "assign":
                self.variables[str(statement[1])] = self.value(_sub(statement, 2))
            elif kind == "print":
                values = statement[1]
                assert isinstance(values, tuple)
                texts = [self.value(value).text for value in values] if values else [self.record]
                self.out.append(" ".join(texts) + "\n")
            else:
                if statement[1] is not None:
                    self.status = int(self.value(_sub(statement, 1)).number) & 0xFF
                raise _Exit


def _sub(expr: tuple[object, ...], index: int) -> _Expr:
    part = expr[index]
    assert isinstance(part, tuple)
    return part


def _records(stdin: str) -> Iterator[str]:
    lines = stdin.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    yield from lines


def _arguments(argv: list[str]) -> tuple[str, str]:
    """(field separator, program) from the command line."""
    separator = " "
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] != "-":
        option = args.pop(0)
        if option == "--":
            break
        if not option.startswith("-F"):
            raise NotModelled(f"the option {option}")
        value = option[2:]
        if not value:
            if not args:
                raise NotModelled("-F without a separator")
            value = args.pop(0)
        if value == "t":
            value = "\t"
        if len(value) != 1:
            raise NotModelled(f"the field separator {value!r} (a regular expression)")
        separator = value
    if not args:
        raise NotModelled("awk without a program")
    program, operands = args[0], args[1:]
    if operands:
        raise NotModelled(f"the operand {operands[0]!r} (only stdin is read)")
    return separator, program


async def awk(argv: list[str], stdin: str) -> Output:
    """Run ``awk [-F SEP] 'PROGRAM'`` over stdin (see the module docstring)."""
    try:
        separator, program = _arguments(argv)
        rules = _Parser(program).program()
    except NotModelled as exc:
        return Output.err(f"awk: not modelled by the simulator: {exc}\n", _STATUS_ERROR)
    run = _Run(separator)
    try:
        try:
            for rule in rules:
                if rule.kind == "BEGIN" and rule.action is not None:
                    run.execute(rule.action)
            main = [rule for rule in rules if rule.kind == "main"]
            # the input is read only for main rules or END (from the terminal: nothing, once
            # it is hung up)
            reads = main or any(r.kind == "END" for r in rules)
            try:
                text = await read_input(stdin) if reads else ""
            except TerminalReadError:
                text = ""  # ``readrec``'s ``getc`` takes a read error for EOF
            for line in _records(text):
                run.set_record(line)
                for rule in main:
                    if rule.pattern is not None and not run.truth(run.value(rule.pattern)):
                        continue
                    if rule.action is None:
                        run.out.append(run.record + "\n")
                    else:
                        run.execute(rule.action)
        except _Exit:
            pass
        try:
            for rule in rules:
                if rule.kind == "END" and rule.action is not None:
                    run.execute(rule.action)
        except _Exit:
            pass
    except NotModelled as exc:
        return Output(
            ((1, "".join(run.out)), (2, f"awk: not modelled by the simulator: {exc}\n")),
            _STATUS_ERROR,
        )
    return Output.out("".join(run.out), run.status)
