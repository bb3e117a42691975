"""A small POSIX shell, enough of Android's ``/system/bin/sh`` (mksh) for what ADB clients send.

Supported: words with single quotes, double quotes and backslash escapes; ``$?``, ``$NAME``,
``${NAME}``, ``$(...)`` and backquotes; field splitting on the default IFS (space, tab,
newline); ``;``, newlines, ``&&``, ``||``, ``|`` (every element in a subshell, as mksh runs
them); ``{ list; }`` groups (run by the shell itself, their redirections in force for every
command of them); redirections ``N>&M``, ``N>&-``, ``>FILE``, ``>>FILE``, ``<FILE``,
``<>FILE`` (files of the phone's tree, opened as mksh's ``iosetup`` does; ``/dev/null``);
``#`` comments. Builtins: ``echo`` (mksh's ``c_print``: backslash escapes interpreted by
default), ``printf`` (toybox's escapes), ``true``, ``false``, ``:``, ``sleep``, ``exit``,
``trap`` (mksh's ``c_trap``). Other commands come from the phone; anything unknown prints
``/system/bin/sh: NAME: inaccessible or not found`` with status 127, as mksh does.

A script runs in a :class:`Session`, as adbd starts it: when the stream goes, the terminal is
hung up; a script whose ``sh`` does not ignore SIGHUP stops where it stands, one that ignores
it (``trap '' HUP``) runs on with every write to the terminal failing: ``EIO`` on a legacy
``shell:`` PTY, ``EPIPE`` and SIGPIPE on the pipes of ``shell,v2:`` (see :class:`Session`).

A command whose stdin is the terminal (not piped, not redirected) and that reads it waits
until the terminal is hung up, as nobody types into adbd's PTY (see :func:`read_input`). A
command's output is handed over when it ends (a prompt written before a read that waits
reaches the terminal only after it).

Not modelled: globbing, functions, ``if``/``for``/``case``, ``( … )`` subshells, background
jobs (a script with ``&`` is refused, never run in the foreground: a phone's kernel SIGHUPs
a background job when the script's ``sh`` exits), here-documents, traps with commands (kept
and listed, never run: a ``trap 'CMD' HUP`` does not spare the script, harsher than mksh,
which runs CMD and goes on), a partial read of a shared stdin (the commands of a shell or
a group share theirs: the first that reads takes all of it, as ``cat``, ``grep`` and ``awk``
read to its end). ``tests/simulator/test_sim_mksh_diff.py`` holds this shell to
real mksh on generated command lines, and its hang-up to real mksh on a real PTY.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Protocol

import attrs

SHELL_NAME: Final = "/system/bin/sh"

#: Whether the running command's stdout is a terminal (``isatty(1)``), for tools that print
#: differently on one (toybox ``ls``: columns). adbd runs a legacy ``shell:`` command in a
#: PTY, a ``shell,v2:`` one in pipes unless it asks for ``pty``; whoever runs a script sets
#: this. A pipeline's writing elements and a ``$(...)`` never write to a terminal.
STDOUT_IS_TERMINAL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "stdout_is_terminal", default=False
)


class TerminalInput(str):
    """A command's stdin that is still the script's terminal (adbd's PTY, or with the shell
    protocol its stdin pipe): nothing is ever typed into it, so a read waits, and sees EOF
    only once the terminal is hung up (``hung_up_tty_read``). Read it with
    :func:`read_input`."""


class SharedInput(str):
    """A stdin the commands of one shell or ``{ …; }`` group share (one open file
    description, one offset: mksh ``exec.c`` ``iosetup`` opens a group's redirection once):
    the first command that reads it to its end takes all of it, the later ones see EOF."""

    consumed: bool = False


def _shared(stdin: str) -> str:
    """``stdin`` as the commands of one shell or group share it."""
    if isinstance(stdin, TerminalInput | SharedInput):
        return stdin
    return SharedInput(stdin)


#: The terminal as stdin: what a script's commands read unless a pipe or a redirection gives
#: them something else.
TERMINAL_INPUT: Final = TerminalInput("")
#: The session of the script a command runs in (set by a shell given one): what a read of
#: :data:`TERMINAL_INPUT` waits on.
_CURRENT_SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar(
    "simulator_current_session"
)


class TerminalReadError(Exception):
    """A read of a PTY was waiting when the terminal was hung up: it fails with ``EIO``
    (Linux ``n_tty_read``: the master's ``pty_close`` sets ``TTY_OTHER_CLOSED`` and wakes the
    reader before ``tty_vhangup``), as it does for a command blocked in ``read``. A read of
    the shell protocol's stdin socket sees EOF instead (:func:`read_input`)."""


async def read_input(stdin: str) -> str:
    """What a command reads from ``stdin`` up to EOF.

    From the terminal that is nothing, and not at once: nobody types into adbd's PTY (nor
    into the shell protocol's stdin socket), so ``read(2)`` blocks until the terminal is hung
    up. A read begun after the hang-up sees EOF (``hung_up_tty_read`` returns 0); one that was
    waiting when it came fails with ``EIO`` on a PTY (:class:`TerminalReadError`; Android
    common kernel ``drivers/tty/n_tty.c``, ``pty.c``). With the shell protocol's pipes stdin
    is one end of a ``socketpair(AF_UNIX, SOCK_STREAM)`` whose other end adbd closes
    (``CreateSocketpair``, ``stdinout_sfd_.reset()`` in ``PassDataStreams``; system/core
    ``adb/daemon/shell_service.cpp`` android-10.0.0_r30 and android-11.0.0_r1): a waiting
    read sees EOF too. A script killed meanwhile stops there. Outside a session (a shell run
    on its own, in unit tests) the terminal gives EOF at once.

    Raises:
        TerminalReadError: the read of a PTY was waiting when the terminal was hung up.
        ScriptKilled: the script is gone while it waited.
    """
    if isinstance(stdin, SharedInput):
        if stdin.consumed:
            return ""
        stdin.consumed = True
        return str(stdin)
    if not isinstance(stdin, TerminalInput):
        return stdin
    session = _CURRENT_SESSION.get(None)
    if session is None or session.hung_up:
        return ""
    session.terminal_read.set()
    await session.hang_up_event.wait()
    if session.killed:
        raise ScriptKilled
    if session.terminal == "pipes":
        return ""  # the peer socket closed: read(2) returns 0
    raise TerminalReadError


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
    def __init__(self, status: int, output: Output | None = None) -> None:
        super().__init__(status)
        self.status = status
        #: what the command that ended the script wrote (a special builtin's error)
        self.output = output if output is not None else Output(status=status)


class ScriptKilled(Exception):
    """The script is gone (:attr:`Session.killed`): it stops at the step boundary where
    this is raised, and nothing after it runs."""


class TerminalHungUp(Exception):
    """Raised by an ``on_output`` whose terminal was hung up meanwhile: the output is lost."""


class RedirectFailed(Exception):
    """Opening a redirection's file failed with ``strerror`` (bionic's text)."""

    def __init__(self, strerror: str) -> None:
        super().__init__(strerror)
        self.strerror = strerror


class FileHandle(Protocol):
    """An open file a redirection writes to or reads from (its own offset)."""

    def write(self, text: str) -> None:
        """``write(2)`` at the handle's offset (at the end for ``>>``)."""
        ...

    def read(self) -> str:
        """``read(2)`` to the end.

        Raises:
            RedirectFailed: the file cannot be read (a directory: EISDIR).
        """
        ...


class ShellFiles(Protocol):
    """The files a shell process may open, with its credentials and working directory."""

    def open(self, path: str, how: str) -> FileHandle:
        """``open(2)`` as a redirection does: ``>`` (``O_WRONLY|O_CREAT|O_TRUNC``), ``>>``
        (``O_WRONLY|O_APPEND|O_CREAT``), ``<>`` (``O_RDWR|O_CREAT``) or ``<``
        (``O_RDONLY``), mode 0666.

        Raises:
            RedirectFailed: the open failed.
        """
        ...


@attrs.define(eq=False)
class Session:
    """The session adbd runs one script in, and what a hang-up did to it.

    adbd runs a legacy ``shell:<command>`` (and ``exec:``) as ``sh -c`` in a new session
    whose controlling terminal is a PTY in raw mode; it never signals the script itself, it
    only closes the PTY's master when the stream or the connection goes (``StartSubprocess``,
    ``Subprocess::ForkAndExec`` and ``local_socket_destroy``/``deferred_close``: system/core
    ``adb/`` android-10.0.0_r30, packages/modules/adb android-11.0.0_r1 … 15.0.0_r1; 12 to 15
    identical). Closing the master hangs the terminal up (Linux ``pty_close`` ->
    ``tty_vhangup``, ``__tty_hangup``, ``tty_signal_session_leader``, Android common kernel):

    * every later write to the terminal fails with ``EIO`` and raises no signal, every read
      sees EOF (``hung_up_tty_write``/``hung_up_tty_read``): mksh's ``echo``/``print`` and
      toybox's tools then exit 1 and print nothing;
    * SIGHUP goes to the session leader only, the script's ``sh``. Unless it ignores SIGHUP
      (``trap '' HUP``, ``histrap.c`` ``settrap``), mksh sends SIGHUP to the command it
      waits on and exits (``trapsig``, ``runtraps(TF_FATAL)``, ``unwind(LLEAVE)``,
      ``j_exit``; mksh R57 and R59 to R59c, text identical), and the kernel then sends
      SIGHUP to its whole process group (``disassociate_ctty``): the script stops where it
      stands. If it ignores it, the script runs on to its end, its commands (which inherit
      the ignored SIGHUP) with it. Only the leader's disposition at the moment of the
      hang-up counts: the SIGHUP comes once.

    With the shell protocol and no ``pty`` (``shell,v2:``, ``shell,v2,raw:``: a command runs
    raw by default, ``ShellService`` in ``services.cpp``) the script's stdin and stdout are
    one ``socketpair(AF_UNIX, SOCK_STREAM)`` and its stderr another (``CreateSocketpair``).
    When the stream dies adbd itself does two things (``Subprocess::PassDataStreams``:
    "protocol FD died, sending SIGHUP to pid"; system/core ``adb/daemon/shell_service.cpp``
    at android-10.0.0_r30 and android-11.0.0_r1; packages/modules/adb
    ``daemon/shell_service.cpp`` unchanged there from commit 332823c2 of 2020-05-19 to branch
    15-qpr2, read in GrapheneOS's mirror, the AOSP 12 to 15 tags not fetched):

    * ``kill(pid_, SIGHUP)``: one signal to the script's ``sh`` alone, as the PTY's hang-up
      sends it, so the same trap rules hold (:meth:`hang_up`);
    * ``stdinout_sfd_.reset(); stderr_sfd_.reset()``: it closes its ends of both sockets "so
      that if it ignores SIGHUP and continues to write data it won't fill up the pipe and
      block". Every later write fails with ``EPIPE`` and raises SIGPIPE, whose default adbd's
      child restored before ``execle`` (``signal(SIGPIPE, SIG_DFL)`` in ``ForkAndExec``, same
      sources): a builtin's write (mksh ``echo``/``print`` block SIGPIPE only for a
      co-process, ``funcs.c`` R57 and R59c) kills the shell itself, another command dies alone
      (status 141; mksh's own ``cat``, which blocks SIGPIPE while it writes, returns 141
      too); a read sees EOF (:func:`read_input`).

    With ``shell,v2,pty:`` adbd sends that SIGHUP and closes the PTY's master: the PTY rules
    above (``EIO``). The product speaks the legacy ``shell:`` (adb-shell). SIGKILL (adbd
    restarting, a reboot: init kills everything adbd started, ``KillProcessGroup``) ends the
    script whatever it ignores. The same at every release from 10 to 15 (research report of
    issue 21, item 3: adbd, mksh, toybox, bionic, kernel; issue 33, item 4: adbd's side of
    the shell protocol).
    """

    #: ``pty`` (legacy ``shell:``/``exec:``, ``shell,v2,pty:``) or ``pipes`` (``shell,v2:``).
    terminal: str = "pty"
    #: The terminal was hung up: writes to it fail (EIO on a PTY, EPIPE and SIGPIPE on the
    #: shell protocol's sockets), reads see EOF (or EIO for one waiting on a PTY).
    hung_up: bool = False
    #: The script's ``sh`` ignores SIGHUP (its ``trap '' HUP``), set by the leader's ``trap``.
    ignores_hup: bool = False
    #: The script is gone: it stops at its next step boundary (:class:`ScriptKilled`).
    killed: bool = False
    #: The script has run to its end (its ``sh`` exited).
    finished: bool = False
    #: Set once the terminal is hung up (or the script killed): what a read of the terminal
    #: waits for (:func:`read_input`).
    hang_up_event: asyncio.Event = attrs.field(factory=asyncio.Event, repr=False)
    #: Test harness: set once a command of the script waits on a read of its terminal
    #: (:func:`read_input`), so a test can wait for that moment rather than for a time.
    terminal_read: asyncio.Event = attrs.field(factory=asyncio.Event, repr=False)

    def hang_up(self) -> bool:
        """The terminal is hung up: SIGHUP to the leader. True when the script lives on."""
        self.hung_up = True
        if not self.ignores_hup:
            self.killed = True
        self.hang_up_event.set()
        return not self.killed

    def kill(self) -> None:
        """SIGKILL to every process of the script (its terminal goes with it)."""
        self.hung_up = True
        self.killed = True
        self.hang_up_event.set()


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
    op: str  # ">", ">>", "<", "<>", ">&", "<&"
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
#: Runs the lexer takes whole: blanks between words, a word's plain characters, and the
#: plain characters inside double quotes (each character the slow path would append alone).
_BLANKS = re.compile(r"[ \t]+")
_PLAIN_RUN = re.compile(r"[^ \t\n;&|<>()'\"\\$`]+")
_QUOTED_RUN = re.compile(r'[^"\\$`]+')
#: A word of plain characters and single-quoted strings alone, and its segments.
_SIMPLE_WORD = re.compile(r"(?:[^ \t\n;&|<>()'\"\\$`]+|'[^']*')+")
_SEGMENT = re.compile(r"([^ \t\n;&|<>()'\"\\$`]+)|'([^']*)'")
_WORD_ENDS: Final = " \t\n;&|<>"
#: The operator tokens, made once (they are immutable).
_OPS: Final = {op: _Op(op) for op in ("\n", ";", "&", "|", "&&", "||")}


#: What ``_Lexer.tokens`` takes in one step, after any blanks: ``&&``, ``||``, a newline, or
#: a ``;``, ``&`` or ``|`` not doubled; a word of plain characters and single-quoted strings
#: followed by a blank, an operator or the end (one of digits alone before ``<``/``>`` is an
#: fd); or else the blanks alone.
_QUICK_TOKEN = re.compile(
    r"[ \t]*+(?:(?P<op>&&|\|\||\n|;(?!;)|&(?!&)|\|(?!\|))"
    r"|(?P<word>(?:[^ \t\n;&|<>()'\"\\$`#]|'[^']*+')(?:[^ \t\n;&|<>()'\"\\$`]++|'[^']*+')*+)"
    r"(?=[ \t\n;&|]|\Z|(?<![0-9])[<>]))"
    r"|(?P<blank>[ \t]++)"
)
#: A word whose text alone decides what ``_Lexer._word`` makes of it and where it ends: plain
#: runs, single-quoted strings, and double-quoted strings and bare ``$`` expansions with no
#: backslash or backquote in them and no parenthesis or quote inside a ``$(…)``; followed by
#: a blank, an operator or the end.
_EXPANSION = (
    r"\$(?:[A-Za-z_][A-Za-z0-9_]*+|[?$#!@*0-9]|\{[^}]*+\}|\([^()'\"\\`]*+\)"
    r"|(?![A-Za-z_?$#!@*0-9{(]))"
)
_KEPT_WORD = re.compile(
    r"(?:[^ \t\n;&|<>()'\"\\$`]++|'[^']*+'"
    rf"|\"(?:[^\"\\$`]++|{_EXPANSION})*+\"|{_EXPANSION})++"
    r"(?=[ \t\n;&|<>]|\Z)"
)
#: Words ``_Lexer._word`` made before, by their text (``_KEPT_WORD``): ``"$r"``, ``t=$?``,
#: ``/dev/null`` after a redirection… recur in every script a client sends.
_KEPT_WORDS: dict[str, _Word] = {}


#: Plain words made before, by their text: a word is immutable, and most recur in every
#: script a client sends (``grep``, ``-qx``, ``0``, ``'%s\n'``, ``2>/dev/null``…).
_PLAIN_WORDS: dict[str, _Word] = {}
_PLAIN_WORDS_KEPT: Final = 4096


def _segments(found: str) -> _Word:
    """A word of plain characters and single-quoted strings: a part for each."""
    return _Word(
        tuple(
            _Lit(plain, quoted=False) if plain is not None else _Lit(quoted, quoted=True)
            for plain, quoted in (segment.groups() for segment in _SEGMENT.finditer(found))
        )
    )


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def tokens(self) -> list[_Token]:
        tokens: list[_Token] = []
        text = self.text
        while self.pos < len(text):
            quick = _QUICK_TOKEN.match(text, self.pos)
            if quick is not None:
                # blanks, an operator that needs no look further, or a plain word (not a
                # redirection's fd): what the branches below would make of it
                self.pos = quick.end()
                kind = quick.lastgroup
                if kind == "op":
                    tokens.append(_OPS[quick.group(kind)])
                elif kind == "word":
                    text_of = quick.group(kind)
                    word = _PLAIN_WORDS.get(text_of)
                    if word is None:
                        plain = "'" not in text_of
                        word = (
                            _Word((_Lit(text_of, quoted=False),)) if plain else _segments(text_of)
                        )
                        if len(_PLAIN_WORDS) >= _PLAIN_WORDS_KEPT:
                            _PLAIN_WORDS.clear()
                        _PLAIN_WORDS[text_of] = word
                    tokens.append(word)
                continue
            char = text[self.pos]
            if char in " \t":
                self.pos = _BLANKS.match(text, self.pos).end()  # type: ignore[union-attr]
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif char == "\n":
                tokens.append(_OPS["\n"])
                self.pos += 1
            elif char in ";&|":
                double = self._peek(1) == char and char != ";"
                if char == ";" and self._peek(1) == ";":
                    raise ShellSyntaxError("syntax error: ';;' unexpected")
                tokens.append(_OPS[char * 2 if double else char])
                self.pos += 2 if double else 1
            elif char in "<>":
                tokens.append(self._redirection(None))
            elif char in "()":
                # Subshells and functions are beyond what ADB clients send.
                raise ShellSyntaxError(f"syntax error: '{char}' unexpected")
            else:
                word = self._kept_word()
                if (
                    self.pos < len(text)
                    and text[self.pos] in "<>"
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
        elif char == "<" and self._peek() == ">":
            op = "<>"
            self.pos += 1
        elif self._peek() == "&":
            op = char + "&"
            self.pos += 1
        while self._peek() in (" ", "\t") and self._peek() != "":
            self.pos += 1
        if self.pos >= len(self.text) or self._peek() in ";&|\n<>":
            raise ShellSyntaxError("syntax error: newline unexpected")
        target = self._kept_word()
        return _Redir(fd if fd is not None else (0 if char == "<" else 1), op, target)

    def _kept_word(self) -> _Word:
        """``_word``, remembered by its text where the text alone decides it
        (``_KEPT_WORD``): kept only when ``_word`` ended where that text ends."""
        known = _KEPT_WORD.match(self.text, self.pos)
        if known is None:
            return self._word()
        text_of = known.group()
        word = _KEPT_WORDS.get(text_of)
        if word is not None:
            self.pos = known.end()
            return word
        word = self._word()
        if self.pos == known.end():
            if len(_KEPT_WORDS) >= _PLAIN_WORDS_KEPT:
                _KEPT_WORDS.clear()
            _KEPT_WORDS[text_of] = word
        return word

    def _word(self) -> _Word:
        simple = _SIMPLE_WORD.match(self.text, self.pos)
        if simple is not None and (
            simple.end() == len(self.text) or self.text[simple.end()] in _WORD_ENDS
        ):
            # plain characters and single-quoted strings only: the parts the loop below
            # would make, without walking it character by character
            self.pos = simple.end()
            found = simple.group()
            return _Word((_Lit(found, quoted=False),)) if "'" not in found else _segments(found)
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
                        # a run of plain characters, or a backslash that quotes nothing
                        run = _QUOTED_RUN.match(self.text, self.pos)
                        end = run.end() if run else self.pos + 1
                        quoted_literal.append(self.text[self.pos : end])
                        self.pos = end
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
                end = _PLAIN_RUN.match(self.text, self.pos).end()  # type: ignore[union-attr]
                literal.append(self.text[self.pos : end])
                self.pos = end
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
class _Group:
    """``{ list; }``: a list run by this shell (no subshell), with its own redirections."""

    body: tuple[_AndOr, ...]
    redirs: tuple[_Redir, ...]


_Command = _Simple | _Group


@attrs.frozen
class _Pipeline:
    commands: tuple[_Command, ...]


@attrs.frozen
class _AndOr:
    first: _Pipeline
    rest: tuple[tuple[str, _Pipeline], ...]


def _reserved(token: _Token | None, word: str) -> bool:
    """Is ``token`` the unquoted reserved word ``word`` (``{`` or ``}``)?"""
    return (
        isinstance(token, _Word)
        and len(token.parts) == 1
        and isinstance(token.parts[0], _Lit)
        and not token.parts[0].quoted
        and token.parts[0].text == word
    )


class _Parser:
    """Recursive descent over the tokens: lists, and-or lists, pipelines, simple commands
    and ``{ … }`` groups (mksh ``syn.c``: ``{`` and ``}`` are reserved words only where a
    command starts)."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0

    def _token(self) -> _Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def unexpected(self, what: str = "unexpected") -> ShellSyntaxError:
        token = self._token()
        shown = (
            "newline"
            if token is None or (isinstance(token, _Op) and token.op == "\n")
            else (
                token.op if isinstance(token, _Op) else ("}" if _reserved(token, "}") else "word")
            )
        )
        return ShellSyntaxError(f"syntax error: '{shown}' {what}")

    def lists(self, *, in_group: bool) -> list[_AndOr]:
        """And-or lists up to the end (or, in a group, up to its ``}``)."""
        lists: list[_AndOr] = []
        while True:
            token = self._token()
            if token is None:
                if in_group:
                    raise ShellSyntaxError("syntax error: '{' unmatched")
                return lists
            if in_group and _reserved(token, "}"):
                return lists
            if isinstance(token, _Op) and token.op in ("\n", ";", "&"):
                if token.op != "\n" and not lists:
                    raise self.unexpected()
                self.index += 1
                continue
            first = self.pipeline()
            rest: list[tuple[str, _Pipeline]] = []
            while isinstance(op_token := self._token(), _Op) and op_token.op in ("&&", "||"):
                self.index += 1
                self.skip_newlines()
                rest.append((op_token.op, self.pipeline()))
            lists.append(_AndOr(first, tuple(rest)))
            separator = self._token()
            if separator is None or (in_group and _reserved(separator, "}")):
                continue
            if not (isinstance(separator, _Op) and separator.op in ("\n", ";", "&")):
                raise self.unexpected()
            if separator.op == "&":
                # A background job stays in the script's process group, which the kernel
                # SIGHUPs when the script's sh exits, even at a normal end
                # (``disassociate_ctty``); running it in the foreground would be kinder.
                raise ShellSyntaxError("'&' (a background job) is not modelled by the simulator")
            self.index += 1
            if (
                separator.op != "\n"
                and isinstance(following := self._token(), _Op)
                and following.op in (";", "&")
            ):
                raise self.unexpected()

    def skip_newlines(self) -> None:
        while isinstance(token := self._token(), _Op) and token.op == "\n":
            self.index += 1

    def pipeline(self) -> _Pipeline:
        first = self.command()
        if first is None:
            raise self.unexpected()
        commands = [first]
        while isinstance(token := self._token(), _Op) and token.op == "|":
            self.index += 1
            self.skip_newlines()
            following = self.command()
            if following is None:
                raise self.unexpected()
            commands.append(following)
        return _Pipeline(tuple(commands))

    def command(self) -> _Command | None:
        first = self._token()
        if _reserved(first, "{"):
            return self.group()
        if _reserved(first, "}"):
            return None
        words: list[_Word] = []
        redirs: list[_Redir] = []
        # up to the next operator (or the end); a token is a word, a redirection or one
        tokens = self.tokens
        index = self.index
        while index < len(tokens):
            token = tokens[index]
            if isinstance(token, _Word):
                words.append(token)
            elif isinstance(token, _Redir):
                redirs.append(token)
            else:
                break
            index += 1
        self.index = index
        if not words and not redirs:
            return None
        return _Simple(tuple(words), tuple(redirs))

    def group(self) -> _Group:
        """``{ list; }`` then its redirections; a word after the ``}`` is an error."""
        self.index += 1
        body = self.lists(in_group=True)
        self.index += 1  # the closing brace
        redirs: list[_Redir] = []
        while isinstance(token := self._token(), _Redir):
            redirs.append(token)
            self.index += 1
        if isinstance(self._token(), _Word):
            raise self.unexpected()
        return _Group(tuple(body), tuple(redirs))


@functools.lru_cache(maxsize=256)
def parse(text: str) -> tuple[_AndOr, ...]:
    """Parse a command line into and-or lists. The tree is immutable, so a command line
    seen before (a ``$(date +%s%3N)``, a ``dumpsys``) is parsed once per process.

    Raises:
        ShellSyntaxError: unbalanced quotes or braces, a dangling operator, unsupported
            syntax.
    """
    parser = _Parser(_Lexer(text).tokens())
    lists = parser.lists(in_group=False)
    if parser.index < len(parser.tokens):
        raise parser.unexpected()
    return tuple(lists)


# -- execution -----------------------------------------------------------------------------


@attrs.frozen
class _Tty:
    """The terminal (adbd's PTY, or with the shell protocol its pipes): ``stream`` 1 for
    stdout, 2 for stderr."""

    stream: int


@attrs.frozen
class _Null:
    """``/dev/null``, or a closed descriptor (``>&-``)."""


@attrs.define(eq=False)
class _Buffer:
    """A pipe or a command substitution: what was written, in order."""

    parts: list[str] = attrs.field(factory=list)


@attrs.define(eq=False)
class _File:
    """A file a redirection opened."""

    handle: FileHandle


_Target = _Tty | _Null | _Buffer | _File
_NULL: Final = _Null()


class Shell:
    """Runs command lines against a table of commands.

    Output is kept as ordered (fd, text) chunks; with ``on_output`` it is handed over as each
    command finishes (as a real shell's output reaches adbd while the script still runs)
    instead of being returned at the end. ``after_command`` is awaited after every command
    with its argv and status. ``session`` is the script's :class:`Session`: what a hang-up
    did (the terminal's writes fail, or the script is gone, checked at every step boundary);
    ``leader`` marks the script's own ``sh -c`` (its ``trap`` decides whether a hang-up ends
    it). ``files`` opens the files redirections name (none: every file is on a read-only
    file system). ``stdin`` is what its commands read (the terminal, :data:`TERMINAL_INPUT`,
    unless a caller gives the shell other input). Between two commands the shell yields to
    the event loop.
    """

    def __init__(
        self,
        commands: Mapping[str, CommandFn],
        *,
        on_output: OutputFn | None = None,
        after_command: AfterCommandFn | None = None,
        session: Session | None = None,
        files: ShellFiles | None = None,
        leader: bool = False,
        stdin: str = TERMINAL_INPUT,
    ) -> None:
        self._commands = dict(commands)
        self._on_output = on_output
        self._after_command = after_command
        self._session = session if session is not None else Session()
        #: A session was given: the terminal this shell's commands read is that session's.
        self._own_terminal = session is not None
        self._files = files
        self._leader = leader
        self._builtins: dict[str, CommandFn] = {
            "echo": _echo,
            "printf": _printf,
            "true": _true,
            ":": _true,
            "false": _false,
            "sleep": _sleep,
            "exit": _exit,
            "trap": self._trap,
        }
        self.status = 0
        self.variables: dict[str, str] = {}
        #: The shell's traps by signal number (0 EXIT, 65 ERR); absent: the default.
        self.traps: dict[int, str] = {}
        self._substitution_status: int | None = None
        self._sink: list[tuple[int, str]] = []
        #: The shell's own descriptors, as ``{ …; }`` redirections change them.
        self._fds: dict[int, _Target] = {1: _Tty(1), 2: _Tty(2)}
        #: What the shell's commands read on stdin: the terminal unless redirected.
        self._stdin = _shared(stdin)
        #: Running an element of a pipeline: a subshell (mksh ``exec.c`` ``TPIPE`` forks
        #: every element), whose ``trap`` is its own, never the leader's.
        self._in_subshell = False

    async def run(self, text: str) -> tuple[str, int]:
        """Run a whole command line; return the merged output and the last exit status.

        Raises:
            ScriptKilled: the script is gone (see :class:`Session`).
        """
        chunks, status = await self.run_chunks(text)
        return "".join(chunk for _, chunk in chunks), status

    async def run_chunks(self, text: str) -> tuple[list[tuple[int, str]], int]:
        """Run a whole command line; return its (fd, text) output chunks and exit status.

        Raises:
            ScriptKilled: the script is gone (see :class:`Session`).
        """
        self._sink = []
        try:
            lists = parse(text)
        except ShellSyntaxError as exc:
            self.status = 1
            await self._write(self._fds[2], f"{SHELL_NAME}: {exc}\n")
            await self._flush()
            return self._sink, self.status
        token = _CURRENT_SESSION.set(self._session) if self._own_terminal else None
        try:
            await self._run_lists(lists)
        except _ExitScript as stop:
            self.status = stop.status
        finally:
            if token is not None:
                _CURRENT_SESSION.reset(token)
        await self._flush()
        return self._sink, self.status

    async def _run_lists(self, lists: Sequence[_AndOr]) -> None:
        for and_or in lists:
            await self._run_and_or(and_or)

    async def _flush(self) -> None:
        """Hand the output so far to ``on_output`` (when streaming); output that meets a
        terminal hung up meanwhile is lost (it was in the PTY's buffer)."""
        if self._on_output is None:
            return
        chunks, self._sink = self._sink, []
        for fd, text in chunks:
            if self._session.hung_up:
                return
            if text:
                try:
                    await self._on_output(fd, text)
                except TerminalHungUp:
                    return

    def _check_alive(self) -> None:
        """Stop here if the script is gone (a kill, or a hang-up it did not ignore)."""
        if self._session.killed:
            raise ScriptKilled

    async def _finished(self, argv: list[str]) -> None:
        """A command has returned: stream its output, let a hang-up in, run the hook."""
        await self._flush()
        await asyncio.sleep(0)
        self._check_alive()
        if self._after_command is not None:
            await self._after_command(argv, self.status)
        self._check_alive()

    async def _run_and_or(self, and_or: _AndOr) -> None:
        await self._run_pipeline(and_or.first)
        for op, pipeline in and_or.rest:
            if (op == "&&") == (self.status == 0):
                await self._run_pipeline(pipeline)

    async def _run_command(self, command: _Command, stdin: str, *, piped: bool) -> str:
        if isinstance(command, _Group):
            return await self._run_group(command, stdin, piped=piped)
        return await self._run_simple(command, stdin, piped=piped)

    async def _run_pipeline(self, pipeline: _Pipeline) -> None:
        if len(pipeline.commands) == 1:
            await self._run_command(pipeline.commands[0], self._stdin, piped=False)
            return
        # mksh runs every element of a real pipeline in a subshell, all at once: each sees
        # the variables and ``$?`` from before the pipeline, changes none of them, and an
        # ``exit`` ends only its own element. The last element's status is the pipeline's.
        variables = dict(self.variables)
        traps = dict(self.traps)
        status_before = self.status
        stdin = self._stdin
        in_subshell = self._in_subshell
        self._in_subshell = True
        try:
            for position, command in enumerate(pipeline.commands):
                piped = position < len(pipeline.commands) - 1
                self.variables = dict(variables)
                self.traps = _subshell_traps(traps)
                self.status = status_before
                try:
                    stdin = await self._run_command(command, stdin, piped=piped)
                except _ExitScript as stop:
                    self.status = stop.status
                    stdin = ""
        finally:
            self._in_subshell = in_subshell
        self.variables = variables
        self.traps = traps

    async def _redirect(
        self, redirs: Sequence[_Redir], fds: dict[int, _Target], stdin: str
    ) -> str | None:
        """Apply ``redirs`` to ``fds`` in order (mksh ``exec.c`` ``iosetup``); return what
        stdin reads then, or None when one failed (its message already written to the
        stderr of the redirections applied so far, the status set to 1).

        ``>FILE`` opens with ``O_WRONLY|O_CREAT|O_TRUNC``, ``>>FILE`` with
        ``O_WRONLY|O_APPEND|O_CREAT``, ``<>FILE`` with ``O_RDWR|O_CREAT``, ``<FILE`` with
        ``O_RDONLY``, all mode 0666; a failure prints ``can't create FILE: <strerror>``
        (``can't open`` for ``<``), R57 to R59c.
        """
        for redir in redirs:
            target = " ".join(await self._expand(redir.target))
            if redir.op in (">&", "<&"):
                if target.isdigit() and int(target) in fds:
                    fds[redir.fd] = fds[int(target)]
                elif target == "-":
                    fds[redir.fd] = _NULL
                else:
                    await self._fail(fds, f"{SHELL_NAME}: {target}: bad file descriptor\n")
                    return None
                continue
            if target == "/dev/null":
                if redir.fd == 0:
                    stdin = ""
                if redir.op != "<":
                    fds[redir.fd] = _NULL
                continue
            verb = "open" if redir.op == "<" else "create"
            if self._files is None:
                reason = "No such file or directory" if redir.op == "<" else "Read-only file system"
                await self._fail(fds, f"{SHELL_NAME}: can't {verb} {target}: {reason}\n")
                return None
            try:
                handle = self._files.open(target, redir.op)
            except RedirectFailed as exc:
                await self._fail(fds, f"{SHELL_NAME}: can't {verb} {target}: {exc.strerror}\n")
                return None
            if redir.fd == 0:
                try:
                    stdin = handle.read()
                except RedirectFailed:
                    stdin = ""  # a directory: reading it fails, the command sees EOF
            if redir.op != "<":
                fds[redir.fd] = _File(handle)
        return stdin

    async def _fail(self, fds: Mapping[int, _Target], message: str) -> None:
        await self._write(fds.get(2, _NULL), message)
        self.status = 1

    async def _run_group(self, group: _Group, stdin: str, *, piped: bool) -> str:
        """``{ list; }``: the list in this shell, with the group's redirections in force
        for every command of it (a pipeline element is a subshell: see ``_run_pipeline``)."""
        self._check_alive()
        fds = dict(self._fds)
        pipe = _Buffer() if piped else None
        if pipe is not None:
            fds[1] = pipe
        group_stdin = await self._redirect(group.redirs, fds, stdin)
        if group_stdin is None:
            return ""
        group_stdin = _shared(group_stdin)
        saved_fds, saved_stdin = self._fds, self._stdin
        self._fds, self._stdin = fds, group_stdin
        try:
            await self._run_lists(group.body)
        finally:
            self._fds, self._stdin = saved_fds, saved_stdin
        return "".join(pipe.parts) if pipe is not None else ""

    async def _run_simple(self, simple: _Simple, stdin: str, *, piped: bool) -> str:
        self._check_alive()
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
        fds = dict(self._fds)
        pipe = _Buffer() if piped else None
        if pipe is not None:
            fds[1] = pipe
        command_stdin = await self._redirect(simple.redirs, fds, stdin)
        if command_stdin is None:
            return ""
        if not argv:
            self.variables.update(assignments)
            substituted = self._substitution_status
            self.status = substituted if substituted is not None else 0
            return ""
        terminal = STDOUT_IS_TERMINAL.set(False) if not isinstance(fds.get(1), _Tty) else None
        stop: _ExitScript | None = None
        try:
            result = await self._execute(argv, command_stdin)
        except _ExitScript as exited:
            stop, result = exited, exited.output
        finally:
            if terminal is not None:
                STDOUT_IS_TERMINAL.reset(terminal)
        failed = False
        for fd, text in result.chunks:
            if text and not await self._write(fds.get(fd, _NULL), text):
                failed = True
        self.status = result.status & 0xFF
        if failed:
            if self._session.terminal == "pipes":
                # adbd closed its ends of the sockets (PassDataStreams): EPIPE and SIGPIPE,
                # whose default adbd's child restores (ForkAndExec: signal(SIGPIPE,
                # SIG_DFL); shell_service.cpp, system/core android-10.0.0_r30 and
                # 11.0.0_r1, packages/modules/adb to 15-qpr2): a builtin's write kills the
                # shell itself, another command dies alone (128 + 13)
                if argv[0] in self._builtins:
                    self._session.killed = True
                    self._check_alive()
                self.status = 141
            else:
                # EIO: mksh's print, toybox's xwrite/xflush report it and exit 1
                self.status = 1
        if stop is not None:
            raise stop
        await self._finished(argv)
        return "".join(pipe.parts) if pipe is not None else ""

    async def _write(self, target: _Target, text: str) -> bool:
        """Write ``text`` to ``target``; False when the write failed (a hung-up terminal)."""
        if isinstance(target, _Tty):
            if self._session.hung_up:
                return False
            self._sink.append((target.stream, text))
        elif isinstance(target, _Buffer):
            target.parts.append(text)
        elif isinstance(target, _File):
            target.handle.write(text)
        return True

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
        if len(word.parts) == 1 and isinstance(only := word.parts[0], _Lit):
            # one literal: itself, or nothing when it is an empty unquoted one (the loop below)
            return [only.text] if only.quoted or only.text else []
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
        # a subshell: the variables, ``$?`` and the ignored signals (not other traps,
        # ``cleartraps``) of this shell; its stdout captured, its stderr this shell's
        inner = Shell(
            self._commands,
            after_command=self._after_command,
            session=self._session,
            files=self._files,
        )
        inner.status = self.status
        inner.variables = dict(self.variables)
        inner._stdin = self._stdin  # the substitution reads this shell's stdin
        inner.traps = _subshell_traps(self.traps)
        capture = _Buffer()
        inner._fds = {1: capture, 2: self._fds.get(2, _NULL)}
        terminal = STDOUT_IS_TERMINAL.set(False)
        try:
            chunks, status = await inner.run_chunks(part.script)
        finally:
            STDOUT_IS_TERMINAL.reset(terminal)
        self._sink.extend(chunks)
        # ``$?`` keeps the previous command's status until this command completes
        # (mksh: ``echo $(false) $?`` prints 0); only a command with no name takes it.
        self._substitution_status = status
        # mksh drops every NUL byte of the output and then its trailing newlines (eval.c,
        # ``expand`` ``case XCOM``: ``shf_getc`` skips a 0 as it counts newlines;
        # external/mksh as on Android 10 to 15, R57 to R59c)
        return "".join(capture.parts).replace("\x00", "").rstrip("\n")

    async def _trap(self, argv: list[str], stdin: str) -> Output:
        """mksh's ``trap`` (``funcs.c`` ``c_trap``, ``histrap.c`` ``gettrap``/``settrap``,
        R57 to R59c): ``trap`` lists the traps set (``trap -- ACTION NAME``, quoted as
        ``print_value_quoted`` does); ``trap ACTION COND…`` sets them (``''``: ignore, ``-``:
        the default; a first operand that is a number resets them all); a condition is a
        number 0 to 64 or a name (case ignored, ``SIG`` prefix optional, ``EXIT``, ``ERR``);
        a bad one prints ``trap: bad signal 'X'`` and makes the status 1. An option is an
        error that ends the script (a special builtin). The leader's ``trap '' HUP`` makes
        a hang-up spare the script (:class:`Session`). Traps with commands are kept and
        listed, never run (not modelled: no signal but the hang-up reaches a script here)."""
        args = argv[1:]
        if args and args[0] == "--":
            args = args[1:]
        elif args and args[0].startswith("-") and args[0] != "-":
            message = f"{SHELL_NAME}: trap: -{args[0][1]}: unknown option\n"
            raise _ExitScript(1, Output.err(message, 1))
        if not args:
            lines = [
                f"trap -- {_quoted_value(action)} {_signal_name(number)}\n"
                for number, action in sorted(self.traps.items())
            ]
            return Output.out("".join(lines))
        action: str | None
        if _getn(args[0]) is not None:
            action = None
        else:
            action = None if args[0] == "-" else args[0]
            args = args[1:]
        errors: list[str] = []
        for condition in args:
            number = _trap_number(condition)
            if number is None:
                errors.append(f"{SHELL_NAME}: trap: bad signal '{condition}'\n")
                continue
            if action is None:
                self.traps.pop(number, None)
            else:
                self.traps[number] = action
        if self._leader and not self._in_subshell:
            # only the leader's own disposition counts: a pipeline element is a forked
            # subshell (``exec.c`` ``TPIPE``, ``exchild``), its ``trap '' HUP`` leaves the
            # leader's SIGHUP as it was (checked against real mksh on a PTY)
            self._session.ignores_hup = self.traps.get(_SIGHUP) == ""
        return Output.err("".join(errors), 1 if errors else 0)


#: Linux's signal names as mksh knows them (``trap -l`` order; bionic's numbers are the
#: kernel's); 32 to 64 have no name. 0 is ``EXIT`` and 65 (``ksh_NSIG``) ``ERR``.
_SIGNAL_NAMES: Final = (
    "EXIT",
    "HUP",
    "INT",
    "QUIT",
    "ILL",
    "TRAP",
    "ABRT",
    "BUS",
    "FPE",
    "KILL",
    "USR1",
    "SEGV",
    "USR2",
    "PIPE",
    "ALRM",
    "TERM",
    "STKFLT",
    "CHLD",
    "CONT",
    "STOP",
    "TSTP",
    "TTIN",
    "TTOU",
    "URG",
    "XCPU",
    "XFSZ",
    "VTALRM",
    "PROF",
    "WINCH",
    "POLL",
    "PWR",
    "SYS",
)
_SIGHUP: Final = 1
_NSIG: Final = 65
_ERR: Final = _NSIG


def _signal_name(number: int) -> str:
    if number == _ERR:
        return "ERR"
    return _SIGNAL_NAMES[number] if number < len(_SIGNAL_NAMES) else str(number)


def _getn(text: str) -> int | None:
    """mksh's ``getn``: a decimal number after optional whitespace and sign, else None."""
    match = re.fullmatch(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", text)
    if match is None:
        return None
    value = int(match.group(2))
    if value > 2**31 - 1:
        return None
    return -value if match.group(1) == "-" else value


def _trap_number(condition: str) -> int | None:
    """mksh's ``gettrap``: a number 0 to 64, or a name (``SIG`` optional, case ignored)."""
    if condition[:1].isdigit() and condition[:1].isascii():
        number = _getn(condition)
        return number if number is not None and 0 <= number < _NSIG else None
    name = condition
    if name[:3].upper() == "SIG" and len(name) > 3:
        name = name[3:]
    name = name.upper()
    if name == "ERR":
        return _ERR
    if name in _SIGNAL_NAMES:
        return _SIGNAL_NAMES.index(name)
    if name.isdigit() and name.isascii() and str(int(name)) == name:
        # ``SIG40``: the signals from 32 on are named by their numbers
        number = int(name)
        return number if len(_SIGNAL_NAMES) <= number < _NSIG else None
    return None


def _subshell_traps(traps: Mapping[int, str]) -> dict[int, str]:
    """What a subshell keeps: ignored signals only (``cleartraps`` resets traps with
    commands, ``histrap.c``)."""
    return {number: action for number, action in traps.items() if action == ""}


#: Characters ``print_value_quoted`` leaves bare (mksh ``misc.c``; and every octet from
#: 0x80, as mksh's ``C_QUOTE`` class names none of them).
_BARE_VALUE: Final = re.compile(r"[!%+,\-./0-9:@A-Z^_a-z\x80-\U0010ffff]+")
_VALUE_ESCAPES: Final = {
    "\a": "a",
    "\b": "b",
    "\f": "f",
    "\n": "n",
    "\r": "r",
    "\t": "t",
    "\v": "v",
    "\x1b": "E",
    "\\": "\\",
}


def _quoted_value(value: str) -> str:
    """mksh's ``print_value_quoted``: ``''`` when empty, bare when safe, ``$'…'`` with
    escapes when it holds a control character, else single quotes (``'\\''`` for one)."""
    if not value:
        return "''"
    if _BARE_VALUE.fullmatch(value):
        return value
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        out = []
        for char in value:
            if char in _VALUE_ESCAPES:
                out.append("\\" + _VALUE_ESCAPES[char])
            elif ord(char) < 32 or ord(char) == 127 or char == "'":
                out.append(f"\\{ord(char):03o}")
            elif ord(char) >= 0x80:
                out.append(f"\\u{ord(char):04X}")
            else:
                out.append(char)
        return "$'" + "".join(out) + "'"
    out = []
    inquote = False
    for char in value:
        if char == "'":
            if inquote:
                out.append("'")
                inquote = False
            out.append("\\'")
            continue
        if not inquote:
            out.append("'")
            inquote = True
        out.append(char)
    if inquote:
        out.append("'")
    return "".join(out)


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
        backslash = text.find("\\", index)
        if backslash < 0 or backslash == len(text) - 1:
            # no escape in the rest: it is printed as it stands
            out += text[index:].encode("utf-8", "surrogateescape")
            break
        out += text[index:backslash].encode("utf-8", "surrogateescape")
        index = backslash + 1
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
