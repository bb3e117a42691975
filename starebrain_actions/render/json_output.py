"""JSON for machines: every object printed carries ``schema_version``; characters a terminal
could act on are ``\\u`` escapes; and a command run with ``--json`` prints its errors as JSON
too (:class:`JsonErrorGroup`, :class:`JsonErrorCommand`)."""

from __future__ import annotations

import contextvars
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

import attrs
import click

from starebrain_actions.core.convert import to_jsonable

#: Version of every JSON shape the CLI prints (and of the nightly report). Bumped when a
#: field is removed or changes meaning; adding a field does not bump it.
SCHEMA_VERSION: Final = 1


#: Characters JSON allows raw inside strings that a terminal may still act on (C1
#: controls, DEL, bidi controls, Unicode line separators): printed as ``\\uXXXX`` escapes,
#: which decode to exactly the same data.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def versioned(data: Any) -> Any:
    """``data`` with ``schema_version`` set: on an object, or on each object of an array."""
    if isinstance(data, Mapping):
        return {**data, "schema_version": data.get("schema_version", SCHEMA_VERSION)}
    if isinstance(data, list | tuple):
        return [versioned(item) if isinstance(item, Mapping) else item for item in data]
    return data


def json_text(data: Any) -> str:
    """``data`` as indented, key-sorted JSON; characters a terminal could act on are
    ``\\u`` escapes (the decoded data is unchanged)."""
    return _escaped(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=str))


def json_line(data: Any) -> str:
    """``data`` as one line of compact, key-sorted JSON (JSON lines: ``events --json``,
    ``deliver --json``); characters a terminal could act on are ``\\u`` escapes (the decoded
    data is unchanged)."""
    return _escaped(json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":")))


def _escaped(text: str) -> str:
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def emit_json(data: Any) -> None:
    """Print ``data`` (records are unstructured first) as JSON with ``schema_version``."""
    plain = to_jsonable(data) if attrs.has(type(data)) else data
    click.echo(json_text(versioned(plain)))


def error_data(message: str, exit_code: int) -> dict[str, Any]:
    """What ``--json`` prints on stdout for an error: ``error``, ``exit_code``,
    ``schema_version``."""
    return {"error": message, "exit_code": exit_code, "schema_version": SCHEMA_VERSION}


class JsonCliError(click.ClickException):
    """A CLI error under ``--json``: the error as JSON on stdout, and the usual one line
    (``Error: …``, or the usage and the error) on stderr, with the same exit status."""

    def __init__(self, original: click.ClickException) -> None:
        super().__init__(original.format_message())
        # click declares exit_code a class variable; this error takes the original's status
        self.exit_code = original.exit_code  # type: ignore[misc]
        self.original = original

    def show(self, file: Any = None) -> None:
        click.echo(json_text(error_data(self.format_message(), self.exit_code)))
        self.original.show(file)


def json_requested(args: Sequence[str]) -> bool:
    """True when the command line asks for ``--json`` (before a ``--``)."""
    words = list(args)
    if "--" in words:
        words = words[: words.index("--")]
    return "--json" in words


#: The command line of the running command, for errors raised after parsing.
_ARGS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "starebrain_args", default=()
)


class _JsonErrors:
    """Turns every ``click.ClickException`` (usage errors included) of a command run with
    ``--json`` into a :class:`JsonCliError`."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        if parent is None:
            _ARGS.set(tuple(args))
        try:
            return super().make_context(info_name, args, parent=parent, **extra)  # type: ignore[misc, no-any-return]
        except click.ClickException as exc:
            raise _json_error(exc, args) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except click.ClickException as exc:
            raise _json_error(exc, _ARGS.get()) from None


def _json_error(exc: click.ClickException, args: Sequence[str]) -> click.ClickException:
    if isinstance(exc, JsonCliError) or not json_requested(args):
        return exc
    return JsonCliError(exc)


class JsonErrorGroup(_JsonErrors, click.Group):
    """A click group whose errors are JSON on stdout when ``--json`` is given."""


class JsonErrorCommand(_JsonErrors, click.Command):
    """A click command whose errors are JSON on stdout when ``--json`` is given."""


async def emit_json_stream(items: AsyncIterator[Mapping[str, Any]]) -> None:
    """Print ``items`` as a JSON array (with ``schema_version``), one compact, key-sorted
    object per line (as ``json_line``: the C encoder; an indented array goes through Python's
    pure one, ten times slower), an item at a time: memory stays flat. Lines are written a
    batch at a time; those of the items read before an error are written before it
    propagates (the array is then left unterminated)."""
    batch: list[str] = []
    count = 0
    try:
        async for item in items:
            batch.append(("[\n" if count == 0 else ",\n") + _item_line(versioned(item)))
            count += 1
            if len(batch) >= _JSON_BATCH:
                click.echo("".join(batch), nl=False)
                batch = []
    finally:
        if batch:
            click.echo("".join(batch), nl=False)
    click.echo("\n]" if count else "[]")


def _item_line(data: Any) -> str:
    """``json_line`` with ``json_text``'s fallback for a value JSON has no type for."""
    return _escaped(
        json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    )


#: Array items ``emit_json_stream`` writes at a time.
_JSON_BATCH: Final = 256
