"""A small POSIX shell, enough of Android's ``/system/bin/sh`` (mksh) for what ADB clients send.

Supported: words with single quotes, double quotes and backslash escapes; ``$?``, ``$NAME``,
``${NAME}``, ``$(...)`` and backquotes; field splitting on the default IFS (space, tab,
newline); ``;``, newlines, ``&&``, ``||``, ``|`` (every element in a subshell, as mksh runs
them); redirections ``N>&M``, ``>/dev/null``, ``2>/dev/null``, ``</dev/null``; ``#``
comments. Builtins: ``echo`` (mksh's ``c_print``: backslash escapes interpreted by default),
``printf`` (toybox's escapes), ``true``, ``false``, ``:``, ``sleep``, ``exit``. Other
commands come from the phone; anything unknown prints ``/system/bin/sh: NAME: inaccessible
or not found`` with status 127, as mksh does. Not modelled: globbing, functions, compound
commands, here-documents. ``tests/simulator/test_sim_mksh_diff.py`` holds this shell to real
mksh on generated command lines.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import attrs

SHELL_NAME: Final = "/system/bin/sh"

#: Whether the running command's stdout is a terminal (``isatty(1)``), for tools that print
#: differently on one (toybox ``ls``: columns). adbd runs a legacy ``shell:`` command in a
#: PTY, a ``shell,v2:`` one in pipes unless it asks for ``pty``; whoever runs a script sets
#: this. A pipeline's writing elements and a ``$(...)`` never write to a terminal.
STDOUT_IS_TERMINAL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "stdout_is_terminal", default=False
)


@attrs.frozen
class Output:
    """What a command wrote: ordered (fd, text) chunks and its exit status."""

    #: Chunks in the order written; fd 1 is stdout, fd 2 is stderr.
    chunks: tuple[tuple[int, str], ...] = ()
    #: Exit status, 0 to 255.
    status: int = 0

    @classmethod
    def out(cls, text: str = "", status: int = 0) -> Output:
        """A result that wrote ``text`` to stdout."""
        return cls(((1, text),) if text else (), status)

    @classmethod
    def err(cls, text: str, status: int = 1) -> Output:
        """A result that wrote ``text`` to stderr."""
        return cls(((2, text),) if text else (), status)


CommandFn = Callable[[list[str], str], Awaitable[Output]]
#: Receives output as it is written: (fd, text), fd 1 stdout, 2 stderr.
OutputFn = Callable[[int, str], Awaitable[None]]
#: Called after each command with its argv and exit status.
AfterCommandFn = Callable[[list[str], int], Awaitable[None]]


class ShellSyntaxError(Exception):
    """The command line cannot be parsed; nothing in it runs."""


class _ExitScript(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


# -- words ---------------------------------------------------------------------------------


@attrs.frozen
class _Lit:
    text: str
    quoted: bool


@attrs.frozen
class _Var:
    name: str
    quoted: bool


@attrs.frozen
class _Sub:
    script: str
    quoted: bool


_Part = _Lit | _Var | _Sub


@attrs.frozen
class _Word:
    parts: tuple[_Part, ...]


@attrs.frozen
class _Redir:
    fd: int
    op: str  # ">", ">>", "<", ">&", "<&"
    target: _Word


@attrs.frozen
class _Op:
    op: str


_Token = _Word | _Redir | _Op

_NAME_START = re.compile(r"[A-Za-z_]")
#: The default ``IFS``: what unquoted expansions are split on.
_IFS: Final = " \t\n"
_IFS_SPLIT: Final = re.compile(r"[ \t\n]+")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_]*")


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def tokens(self) -> list[_Token]:
        tokens: list[_Token] = []
        while self.pos < len(self.text):
            char = self._peek()
            if char in " \t":
                self.pos += 1
            elif char == "#":
                while self.pos < len(self.text) and self._peek() != "\n":
                    self.pos += 1
            elif char == "\n":
                tokens.append(_Op("\n"))
                self.pos += 1
            elif char in ";&|":
                double = self._peek(1) == char and char != ";"
                if char == ";" and self._peek(1) == ";":
                    raise ShellSyntaxError("syntax error: ';;' unexpected")
                tokens.append(_Op(char * 2 if double else char))
                self.pos += 2 if double else 1
            elif char in "<>":
                tokens.append(self._redirection(None))
            elif char in "()":
                # Subshells and functions are beyond what ADB clients send.
                raise ShellSyntaxError(f"syntax error: '{char}' unexpected")
            else:
                word = self._word()
                if (
                    self._peek() in "<>"
                    and self._peek() != ""
                    and len(word.parts) == 1
                    and isinstance(word.parts[0], _Lit)
                    and not word.parts[0].quoted
                    and word.parts[0].text.isdigit()
                ):
                    tokens.append(self._redirection(int(word.parts[0].text)))
                else:
                    tokens.append(word)
        return tokens

    def _redirection(self, fd: int | None) -> _Redir:
        char = self._peek()
        self.pos += 1
        op = char
        if char == ">" and self._peek() == ">":
            op = ">>"
            self.pos += 1
        if self._peek() == "&":
            op = char + "&"
            self.pos += 1
        while self._peek() in (" ", "\t") and self._peek() != "":
            self.pos += 1
        if self.pos >= len(self.text) or self._peek() in ";&|\n<>":
            raise ShellSyntaxError("syntax error: newline unexpected")
        target = self._word()
        return _Redir(fd if fd is not None else (0 if char == "<" else 1), op, target)

    def _word(self) -> _Word:
        parts: list[_Part] = []
        literal: list[str] = []
        quoted_literal: list[str] = []

        def flush() -> None:
            if literal:
                parts.append(_Lit("".join(literal), quoted=False))
                literal.clear()

        def flush_quoted() -> None:
            parts.append(_Lit("".join(quoted_literal), quoted=True))
            quoted_literal.clear()

        while self.pos < len(self.text):
            char = self._peek()
            if char in " \t\n;&|<>":
                break
            if char in "()":
                raise ShellSyntaxError(f"syntax error: '{char}' unexpected")
            if char == "'":
                flush()
                end = self.text.find("'", self.pos + 1)
                if end < 0:
                    raise ShellSyntaxError("no closing quote")
                parts.append(_Lit(self.text[self.pos + 1 : end], quoted=True))
                self.pos = end + 1
            elif char == '"':
                flush()
                self.pos += 1
                while True:
                    if self.pos >= len(self.text):
                        raise ShellSyntaxError("no closing quote")
                    inner = self._peek()
                    if inner == '"':
                        self.pos += 1
                        break
                    if inner == "\\" and self._peek(1) in ("$", "`", '"', "\\", "\n"):
                        if self._peek(1) != "\n":
                            quoted_literal.append(self._peek(1))
                        self.pos += 2
                    elif inner == "$" or inner == "`":
                        expansion = self._expansion(quoted=True)
                        if expansion is None:
                            quoted_literal.append(inner)
                            self.pos += 1
                        else:
                            flush_quoted()
                            parts.append(expansion)
                    else:
                        quoted_literal.append(inner)
                        self.pos += 1
                flush_quoted()
            elif char == "\\":
                if self._peek(1) == "\n":
                    self.pos += 2
                    continue
                if self.pos + 1 >= len(self.text):
                    literal.append("\\")
                    self.pos += 1
                    continue
                flush()
                parts.append(_Lit(self._peek(1), quoted=True))
                self.pos += 2
            elif char in "$`":
                expansion = self._expansion(quoted=False)
                if expansion is None:
                    literal.append(char)
                    self.pos += 1
                else:
                    flush()
                    parts.append(expansion)
            else:
                literal.append(char)
                self.pos += 1
        flush()
        return _Word(tuple(parts))

    def _expansion(self, *, quoted: bool) -> _Part | None:
        """Parse ``$...`` or a backquote at ``pos``; None when it is a literal ``$``."""
        char = self._peek()
        if char == "`":
            end = self.pos + 1
            script: list[str] = []
            while True:
                if end >= len(self.text):
                    raise ShellSyntaxError("no closing quote")
                # Inside backquotes a backslash quotes only $, ` and \ (and " within double
                # quotes); before anything else it stays, for the inner shell to read.
                escapable = '$`\\"' if quoted else "$`\\"
                if self.text[end] == "\\" and end + 1 < len(self.text):
                    following = self.text[end + 1]
                    if following in escapable:
                        script.append(following)
                    else:
                        script.append("\\" + following)
                    end += 2
                    continue
                if self.text[end] == "`":
                    break
                script.append(self.text[end])
                end += 1
            self.pos = end + 1
            return _Sub("".join(script), quoted)
        following = self._peek(1)
        if following == "(":
            end = _matching_paren(self.text, self.pos + 2)
            script_text = self.text[self.pos + 2 : end]
            self.pos = end + 1
            return _Sub(script_text, quoted)
        if following == "{":
            end = self.text.find("}", self.pos + 2)
            if end < 0:
                raise ShellSyntaxError("missing '}'")
            name = self.text[self.pos + 2 : end]
            if not (name in ("?", "$", "#", "!", "@", "*") or name.isdigit()) and not (
                _NAME_START.match(name) and _NAME_CHARS.fullmatch(name[1:])
            ):
                raise ShellSyntaxError(f"${{{name}}}: bad substitution")
            self.pos = end + 1
            return _Var(name, quoted)
        if following and (following in "?$#!@*" or following.isdigit()):
            self.pos += 2
            return _Var(following, quoted)
        if following and _NAME_START.match(following):
            match = _NAME_CHARS.match(self.text, self.pos + 2)
            end = match.end() if match else self.pos + 2
            name = self.text[self.pos + 1 : end]
            self.pos = end
            return _Var(name, quoted)
        return None


def _matching_paren(text: str, start: int) -> int:
    depth = 1
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "'":
            end = text.find("'", index + 1)
            if end < 0:
                raise ShellSyntaxError("no closing quote")
            index = end + 1
            continue
        if char == '"':
            index += 1
            while index < len(text) and text[index] != '"':
                index += 2 if text[index] == "\\" else 1
            index += 1
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise ShellSyntaxError("syntax error: unmatched '('")


# -- grammar -------------------------------------------------------------------------------


@attrs.frozen
class _Simple:
    words: tuple[_Word, ...]
    redirs: tuple[_Redir, ...]


@attrs.frozen
class _Pipeline:
    commands: tuple[_Simple, ...]


@attrs.frozen
class _AndOr:
    first: _Pipeline
    rest: tuple[tuple[str, _Pipeline], ...]


def parse(text: str) -> list[_AndOr]:
    """Parse a command line into and-or lists.

    Raises:
        ShellSyntaxError: unbalanced quotes, a dangling operator, unsupported syntax.
    """
    tokens = _Lexer(text).tokens()
    lists: list[_AndOr] = []
    index = 0

    def command() -> _Simple | None:
        nonlocal index
        words: list[_Word] = []
        redirs: list[_Redir] = []
        while index < len(tokens) and not isinstance(tokens[index], _Op):
            token = tokens[index]
            if isinstance(token, _Word):
                words.append(token)
            elif isinstance(token, _Redir):
                redirs.append(token)
            index += 1
        if not words and not redirs:
            return None
        return _Simple(tuple(words), tuple(redirs))

    def unexpected() -> ShellSyntaxError:
        token = tokens[index] if index < len(tokens) else None
        shown = (
            "newline"
            if token is None or (isinstance(token, _Op) and token.op == "\n")
            else (token.op if isinstance(token, _Op) else "word")
        )
        return ShellSyntaxError(f"syntax error: '{shown}' unexpected")

    def skip_newlines() -> None:
        nonlocal index
        while index < len(tokens) and isinstance(tokens[index], _Op) and tokens[index] == _Op("\n"):
            index += 1

    def pipeline() -> _Pipeline:
        nonlocal index
        first = command()
        if first is None:
            raise unexpected()
        commands = [first]
        while index < len(tokens) and tokens[index] == _Op("|"):
            index += 1
            skip_newlines()
            following = command()
            if following is None:
                raise unexpected()
            commands.append(following)
        return _Pipeline(tuple(commands))

    while index < len(tokens):
        token = tokens[index]
        if isinstance(token, _Op) and token.op in ("\n", ";", "&"):
            if token.op != "\n" and not lists:
                raise unexpected()
            index += 1
            continue
        first = pipeline()
        rest: list[tuple[str, _Pipeline]] = []
        while index < len(tokens) and tokens[index] in (_Op("&&"), _Op("||")):
            op_token = tokens[index]
            assert isinstance(op_token, _Op)
            index += 1
            skip_newlines()
            rest.append((op_token.op, pipeline()))
        lists.append(_AndOr(first, tuple(rest)))
        if index < len(tokens):
            separator = tokens[index]
            if not (isinstance(separator, _Op) and separator.op in ("\n", ";", "&")):
                raise unexpected()
            index += 1
            if (
                separator.op != "\n"
                and index < len(tokens)
                and tokens[index]
                in (
                    _Op(";"),
                    _Op("&"),
                )
            ):
                raise unexpected()
    return lists


# -- execution -----------------------------------------------------------------------------


class Shell:
    """Runs command lines against a table of commands.

    Output is kept as ordered (fd, text) chunks; with ``on_output`` it is handed over as each
    command finishes (as a real shell's output reaches adbd while the script still runs)
    instead of being returned at the end. ``after_command`` is awaited after every command
    with its argv and status; whatever it raises (the phone's ``DropConnection``) stops the
    script there, so a later command never starts. Between two commands the shell yields
    to the event loop: a hang-up that arrived meanwhile (the stream task is cancelled)
    stops the script at that point too.
    """

    def __init__(
        self,
        commands: Mapping[str, CommandFn],
        *,
        on_output: OutputFn | None = None,
        after_command: AfterCommandFn | None = None,
    ) -> None:
        self._commands = dict(commands)
        self._on_output = on_output
        self._after_command = after_command
        self._builtins: dict[str, CommandFn] = {
            "echo": _echo,
            "printf": _printf,
            "true": _true,
            ":": _true,
            "false": _false,
            "sleep": _sleep,
            "exit": _exit,
        }
        self.status = 0
        self.variables: dict[str, str] = {}
        self._substitution_status: int | None = None
        self._sink: list[tuple[int, str]] = []

    async def run(self, text: str) -> tuple[str, int]:
        """Run a whole command line; return the merged output and the last exit status."""
        chunks, status = await self.run_chunks(text)
        return "".join(chunk for _, chunk in chunks), status

    async def run_chunks(self, text: str) -> tuple[list[tuple[int, str]], int]:
        """Run a whole command line; return its (fd, text) output chunks and exit status."""
        self._sink = []
        try:
            lists = parse(text)
        except ShellSyntaxError as exc:
            self.status = 1
            self._sink.append((2, f"{SHELL_NAME}: {exc}\n"))
            await self._flush()
            return self._sink, self.status
        try:
            for and_or in lists:
                await self._run_and_or(and_or)
        except _ExitScript as stop:
            self.status = stop.status
        await self._flush()
        return self._sink, self.status

    async def _flush(self) -> None:
        """Hand the output so far to ``on_output`` (when streaming)."""
        if self._on_output is None:
            return
        chunks, self._sink = self._sink, []
        for fd, text in chunks:
            if text:
                await self._on_output(fd, text)

    async def _finished(self, argv: list[str]) -> None:
        """A command has returned: stream its output, let a hang-up in, run the hook."""
        await self._flush()
        await asyncio.sleep(0)
        if self._after_command is not None:
            await self._after_command(argv, self.status)

    async def _run_and_or(self, and_or: _AndOr) -> None:
        await self._run_pipeline(and_or.first)
        for op, pipeline in and_or.rest:
            if (op == "&&") == (self.status == 0):
                await self._run_pipeline(pipeline)

    async def _run_pipeline(self, pipeline: _Pipeline) -> None:
        if len(pipeline.commands) == 1:
            await self._run_simple(pipeline.commands[0], "", piped=False)
            return
        # mksh runs every element of a real pipeline in a subshell, all at once: each sees
        # the variables and ``$?`` from before the pipeline, changes none of them, and an
        # ``exit`` ends only its own element. The last element's status is the pipeline's.
        variables = dict(self.variables)
        status_before = self.status
        stdin = ""
        for position, simple in enumerate(pipeline.commands):
            piped = position < len(pipeline.commands) - 1
            self.variables = dict(variables)
            self.status = status_before
            try:
                stdin = await self._run_simple(simple, stdin, piped=piped)
            except _ExitScript as stop:
                self.status = stop.status
                stdin = ""
        self.variables = variables

    async def _run_simple(self, simple: _Simple, stdin: str, *, piped: bool) -> str:
        argv: list[str] = []
        assignments: dict[str, str] = {}
        # POSIX: a command with no command name exits with the status of its last command
        # substitution, or 0 (``o=$(false); echo $?`` prints 1 in mksh).
        self._substitution_status = None
        for word in simple.words:
            assignment = _assignment_name(word) if not argv else None
            if assignment is not None:
                name, value_word = assignment
                assignments[name] = "".join(await self._expand(value_word, split=False))
                continue
            argv.extend(await self._expand(word))
        destinations: dict[int, int | str] = {1: "pipe" if piped else 1, 2: 2}
        for redir in simple.redirs:
            target = " ".join(await self._expand(redir.target))
            if redir.op in (">&", "<&"):
                if target.isdigit() and int(target) in destinations:
                    destinations[redir.fd] = destinations[int(target)]
                elif target == "-":
                    destinations[redir.fd] = "null"
                else:
                    return self._fail(f"{SHELL_NAME}: {target}: bad file descriptor\n")
            elif redir.op == "<":
                if target != "/dev/null":
                    return self._fail(
                        f"{SHELL_NAME}: can't open {target}: No such file or directory\n"
                    )
                stdin = ""
            elif target == "/dev/null":
                destinations[redir.fd] = "null"
            else:
                return self._fail(f"{SHELL_NAME}: can't create {target}: Read-only file system\n")
        if not argv:
            self.variables.update(assignments)
            substituted = self._substitution_status
            self.status = substituted if substituted is not None else 0
            return ""
        terminal = STDOUT_IS_TERMINAL.set(False) if piped else None
        try:
            result = await self._execute(argv, stdin)
        finally:
            if terminal is not None:
                STDOUT_IS_TERMINAL.reset(terminal)
        piped_out: list[str] = []
        for fd, text in result.chunks:
            destination = destinations.get(fd, 2)
            if destination == "pipe":
                piped_out.append(text)
            elif isinstance(destination, int):
                self._sink.append((destination, text))
        self.status = result.status & 0xFF
        await self._finished(argv)
        return "".join(piped_out)

    def _fail(self, message: str) -> str:
        self._sink.append((2, message))
        self.status = 1
        return ""

    async def _execute(self, argv: list[str], stdin: str) -> Output:
        name = argv[0]
        builtin = self._builtins.get(name)
        if builtin is not None:
            return await builtin(argv, stdin)
        command = self._commands.get(name)
        if command is None and name.startswith("/system/bin/"):
            command = self._commands.get(name.removeprefix("/system/bin/"))
        if command is None:
            return Output.err(f"{SHELL_NAME}: {name}: inaccessible or not found\n", 127)
        return await command(argv, stdin)

    async def _expand(self, word: _Word, *, split: bool = True) -> list[str]:
        """Expand one word into fields (unquoted expansions are split on whitespace)."""
        fields: list[str] = []
        current: list[str] = []
        started = False
        for part in word.parts:
            if isinstance(part, _Lit):
                current.append(part.text)
                started = started or part.quoted or bool(part.text)
                continue
            value = await self._value(part)
            if part.quoted or not split:
                current.append(value)
                started = started or part.quoted or bool(value)
                continue
            # Field splitting on the default IFS: space, tab and newline only (CR, VT, FF
            # and Unicode spaces are ordinary characters to mksh).
            pieces = _IFS_SPLIT.split(value.strip(_IFS))
            if pieces == [""]:
                if value and started:
                    fields.append("".join(current))
                    current = []
                    started = False
                continue
            if value[0] in _IFS and started:
                fields.append("".join(current))
                current = []
            current.append(pieces[0])
            for piece in pieces[1:]:
                fields.append("".join(current))
                current = [piece]
            started = True
            if value[-1] in _IFS:
                fields.append("".join(current))
                current = []
                started = False
        if started:
            fields.append("".join(current))
        return fields

    async def _value(self, part: _Var | _Sub) -> str:
        if isinstance(part, _Var):
            if part.name == "?":
                return str(self.status)
            if part.name == "$":
                return "4242"
            if part.name == "#":
                return "0"
            return self.variables.get(part.name, "")
        inner = Shell(self._commands, after_command=self._after_command)
        inner.status = self.status
        inner.variables = dict(self.variables)
        terminal = STDOUT_IS_TERMINAL.set(False)
        try:
            chunks, status = await inner.run_chunks(part.script)
        finally:
            STDOUT_IS_TERMINAL.reset(terminal)
        captured = "".join(text for fd, text in chunks if fd == 1)
        self._sink.extend((fd, text) for fd, text in chunks if fd != 1)
        # ``$?`` keeps the previous command's status until this command completes
        # (mksh: ``echo $(false) $?`` prints 0); only a command with no name takes it.
        self._substitution_status = status
        return captured.rstrip("\n")


_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")


def _assignment_name(word: _Word) -> tuple[str, _Word] | None:
    """Split ``NAME=value`` into the name and the value word, or return None."""
    if not word.parts or not isinstance(word.parts[0], _Lit) or word.parts[0].quoted:
        return None
    match = _ASSIGNMENT.match(word.parts[0].text)
    if not match:
        return None
    rest = word.parts[0].text[match.end() :]
    value_parts: tuple[_Part, ...] = ((_Lit(rest, quoted=False),) if rest else ()) + word.parts[1:]
    return match.group(1), _Word(value_parts)


# -- builtins ------------------------------------------------------------------------------

#: Letters toybox's ``unescape`` knows (``lib/lib.c``), for ``printf``.
_TOYBOX_ESCAPES: Final = {
    "\\": "\\",
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def _octet(value: int) -> str:
    """One raw octet as text (a surrogate escape when it is not ASCII)."""
    value &= 0xFF
    return chr(value) if value < 0x80 else chr(0xDC00 + value)


def _toybox_escape(text: str, index: int, *, posix: bool) -> tuple[str, int] | None:
    """toybox ``printf``'s ``handle_slash`` for the escape after a backslash at ``index - 1``.

    Returns the text it stands for and where reading goes on, or None for ``\\c`` (print
    nothing more). ``\\x`` takes one or two hex digits (none: the backslash is printed as is),
    ``\\NNN`` one to three octal digits (``%b``, the POSIX form, skips a leading 0 first);
    any other unknown escape prints the backslash and leaves the character
    (toys/posix/printf.c, toybox 0.8.x in Android 10 to 15).
    """
    if index >= len(text):
        return "\\", index
    if text[index] == "c":
        return None
    position = index
    base = 0
    if text[position] == "x":
        base, length = 16, 2
        position += 1
    else:
        if posix and text[position] == "0":
            position += 1
        if position < len(text) and text[position] in "01234567":
            base, length = 8, 3
    if base == 0:
        letter = text[position] if position < len(text) else ""
        mapped = _TOYBOX_ESCAPES.get(letter)
        return (mapped, position + 1) if mapped is not None else ("\\", index)
    value = 0
    digits = 0
    while digits < length and position < len(text):
        digit = text[position].lower()
        allowed = "0123456789abcdef"[:base]
        if digit not in allowed:
            break
        value = value * base + allowed.index(digit)
        position += 1
        digits += 1
    if base == 16 and digits == 0:
        return "\\", index
    return _octet(value), position


def _unescape(text: str, *, posix: bool = True) -> tuple[str, bool]:
    """Interpret toybox ``printf`` escapes; return the text and whether ``\\c`` stopped it."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        escaped = _toybox_escape(text, index + 1, posix=posix)
        if escaped is None:
            return "".join(out), True
        out.append(escaped[0])
        index = escaped[1]
    return "".join(out), False


#: ``unbksl`` letters and the octet each stands for (mksh ``misc.c``).
_PRINT_ESCAPES: Final = {
    "a": 0x07,
    "b": 0x08,
    "E": 0x1B,
    "e": 0x1B,
    "f": 0x0C,
    "n": 0x0A,
    "r": 0x0D,
    "t": 0x09,
    "v": 0x0B,
    "\\": 0x5C,
}
_HEX_DIGITS: Final = re.compile(r"[0-9A-Fa-f]*")
_OCTAL_DIGITS: Final = re.compile(r"[0-7]{0,3}")


def _ucs_octets(code: int) -> bytes:
    """mksh's ``utf_wctomb``: one to three octets, 16-bit (anything above U+FFFD is U+FFFD)."""
    code = min(code, 0xFFFD)
    if code < 0x80:
        return bytes([code])
    if code < 0x800:
        return bytes([0xC0 | code >> 6, 0x80 | code & 0x3F])
    return bytes([0xE0 | code >> 12, 0x80 | code >> 6 & 0x3F, 0x80 | code & 0x3F])


def _print_escapes(text: str) -> tuple[bytes, bool]:
    """Interpret mksh ``print``/``echo`` escapes in ``text``; return the octets and whether a
    ``\\c`` asked to drop the newline.

    Follows mksh ``funcs.c`` ``c_print`` with ``misc.c`` ``unbksl(false, …)`` (external/mksh,
    Android 10 to 15): ``\\a \\b \\e \\E \\f \\n \\r \\t \\v \\\\``; ``\\0`` and up to three
    octal digits, ``\\x`` and up to two hex digits (a raw octet); ``\\u``/``\\U`` and up to
    four/eight hex digits (a character, as UTF-8 of at most U+FFFD); an octal value above 0xFF
    counts as the character ``value - 0x100``. ``\\c`` only drops the final newline ("AT&T
    brain damage"): the rest is still printed. Any other escape stays as written, backslash
    included. Raw octets that are not UTF-8 come back as surrogate escapes.
    """
    out = bytearray()
    newline = True
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\" or index >= len(text):
            out += char.encode("utf-8", "surrogateescape")
            continue
        escape = text[index]
        index += 1
        value: int | None = None
        if escape in _PRINT_ESCAPES:
            value = _PRINT_ESCAPES[escape]
        elif escape == "0":
            digits = _OCTAL_DIGITS.match(text, index)
            octal = digits.group(0) if digits else ""
            index += len(octal)
            value = int(octal or "0", 8)
        elif escape in "xuU":
            limit = {"x": 2, "u": 4, "U": 8}[escape]
            found = _HEX_DIGITS.match(text, index)
            digits_text = (found.group(0) if found else "")[:limit]
            if digits_text:
                index += len(digits_text)
                value = int(digits_text, 16) + (0 if escape == "x" else 0x100)
        elif escape == "c":
            newline = False
            continue
        if value is None:
            out += ("\\" + escape).encode("utf-8", "surrogateescape")
        elif value > 0xFF:
            out += _ucs_octets(value - 0x100)
        else:
            out.append(value)
    return bytes(out), newline


async def _echo(argv: list[str], stdin: str) -> Output:
    """mksh's ``echo``: options ``-n``, ``-e``, ``-E`` (only in words made of nothing else),
    escapes interpreted by default (not called as ``sh`` in POSIX mode on Android)."""
    args = argv[1:]
    newline = True
    interpret = True
    while args and re.fullmatch(r"-[neE]+", args[0]):
        for flag in args[0][1:]:
            if flag == "n":
                newline = False
            elif flag == "e":
                interpret = True
            else:
                interpret = False
        args = args[1:]
    text = " ".join(args)
    if interpret:
        octets, keep_newline = _print_escapes(text)
        text = octets.decode("utf-8", "surrogateescape")
        newline = newline and keep_newline
    return Output.out(text + ("\n" if newline else ""))


async def _printf(argv: list[str], stdin: str) -> Output:
    if len(argv) < 2:
        return Output.err("printf: Needs 1 argument\n", 1)
    template = argv[1]
    args = list(argv[2:])
    out: list[str] = []
    while True:
        consumed = False
        index = 0
        while index < len(template):
            char = template[index]
            if char == "\\":
                escaped = _toybox_escape(template, index + 1, posix=False)
                if escaped is None:
                    return Output.out("".join(out))
                out.append(escaped[0])
                index = escaped[1]
                continue
            if char != "%":
                out.append(char)
                index += 1
                continue
            spec = re.match(r"%([-+ 0#]*\d*(?:\.\d+)?)([sdicxXo%b])", template[index:])
            if not spec:
                out.append(char)
                index += 1
                continue
            flags, conversion = spec.group(1), spec.group(2)
            index += spec.end()
            if conversion == "%":
                out.append("%")
                continue
            value = args.pop(0) if args else ""
            consumed = True
            if conversion in "dixXo":
                try:
                    number = int(value or "0", 0)
                except ValueError:
                    return Output(
                        ((1, "".join(out)), (2, f"printf: invalid number '{value}'\n")), 1
                    )
                out.append(("%" + flags + conversion).replace("i", "d") % number)
            elif conversion == "c":
                out.append(value[:1])
            elif conversion == "b":
                text, stopped = _unescape(value, posix=True)
                out.append(text)
                if stopped:
                    return Output.out("".join(out))
            else:
                out.append(("%" + flags + "s") % value)
        if not args or not consumed:
            break
    return Output.out("".join(out))


async def _true(argv: list[str], stdin: str) -> Output:
    return Output()


async def _false(argv: list[str], stdin: str) -> Output:
    return Output(status=1)


async def _sleep(argv: list[str], stdin: str) -> Output:
    if len(argv) < 2:
        return Output.err('sleep: Needs 1 argument (see "sleep --help")\n', 1)
    total = 0.0
    for value in argv[1:]:
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", value)
        if not match:
            return Output.err(f"sleep: Bad number '{value}'\n", 1)
        unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        total += float(match.group(1)) * unit
    await asyncio.sleep(total)
    return Output()


async def _exit(argv: list[str], stdin: str) -> Output:
    status = 0
    if len(argv) > 1:
        try:
            status = int(argv[1]) & 0xFF
        except ValueError:
            return Output.err(f"{SHELL_NAME}: exit: {argv[1]}: bad number\n", 1)
    raise _ExitScript(status)
