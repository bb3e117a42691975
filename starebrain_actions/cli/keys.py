"""``starebrain key show|path|new``: the ADB key this machine signs in to phones with.

A phone lets a computer in once its public key is authorised: on the phone's "Allow USB
debugging?" prompt (which shows the key's fingerprint), or in the phone's
``/data/misc/adb/adb_keys`` (one ``.pub`` line per key). ``key show`` prints that line,
computed from the private key itself, so it always matches the key in use.

Every command honours ``--key`` and ``$STAREBRAIN_ADB_KEY`` like the other commands. Only
``key new`` creates a key at a path given that way; ``key show`` creates one at the default
path only, as the first send would. Key files, the public one too, are created 0600, and any
directory 0700, by the one rule of ``android_bridge._private_files``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any

import attrs
import click

from starebrain_actions.cli.options import json_option


@attrs.frozen(kw_only=True)
class PublicKey:
    """What a phone needs to know to authorise a key."""

    #: the private key file
    path: Path
    #: the ``.pub`` line (Android's RSA public key in base64, then `` user@host``)
    public_key: str
    #: what the phone's "Allow USB debugging?" prompt shows: the MD5 of the decoded key,
    #: upper-case hex pairs joined by ``:`` (``AdbDebuggingManager.getFingerprints``)
    fingerprint: str


def key_path_in_use(key_path: Path | None) -> tuple[Path, bool]:
    """The private key path the commands use, and whether it was chosen (``--key`` or
    ``$STAREBRAIN_ADB_KEY``) rather than the built-in default."""
    from android_bridge import KEY_PATH_ENV, default_key_path

    if key_path is not None:
        return key_path.expanduser(), True
    return default_key_path(), bool(os.environ.get(KEY_PATH_ENV))


def fingerprint(public_key: str) -> str:
    """The fingerprint a phone shows for a ``.pub`` line."""
    blob = base64.b64decode(public_key.split()[0])
    digest = hashlib.md5(blob, usedforsecurity=False).digest()
    return ":".join(f"{byte:02X}" for byte in digest)


def public_key_of(path: Path) -> PublicKey:
    """The public key of the private key at ``path``, checked as every command checks it.

    Raises:
        KeyPermissionError: the key is readable by others, unreadable, or not an RSA key.
    """
    from android_bridge._keys import load_signer, public_key_line

    load_signer(path)  # the same checks (mode 0600, an RSA private key) as a connection's
    line = public_key_line(path)
    return PublicKey(path=path, public_key=line, fingerprint=fingerprint(line))


def _write_private(path: Path, data: bytes, *, replace: bool) -> None:
    """Write ``data`` to ``path`` created 0600 (``android_bridge._private_files``): in place
    and exclusively (never over an existing file), or, with ``replace``, to a temporary file
    renamed over ``path``."""
    from android_bridge._private_files import write_private_file

    if not replace:
        write_private_file(path, data)
        return
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    write_private_file(temporary, data)
    try:
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def create_key(path: Path, *, replace: bool = False) -> PublicKey:
    """Create a new ADB key pair at ``path`` and ``path.pub``, both 0600, any directory
    created 0700: the rule of ``android_bridge._private_files``, which the first ``send``
    (``ensure_key``) keeps too.

    Raises:
        FileExistsError: a key is already there and ``replace`` is false.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from android_bridge._keys import public_key_line
    from android_bridge._private_files import make_private_dirs

    if not replace and (path.exists() or path.is_symlink()):
        raise FileExistsError(path)
    make_private_dirs(path.parent)
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    _write_private(path, pem, replace=replace)
    line = public_key_line(path)
    _write_private(Path(f"{path}.pub"), line.encode("ascii"), replace=True)
    return PublicKey(path=path, public_key=line, fingerprint=fingerprint(line))


def _key_option(function: Any) -> Any:
    return click.option(
        "--key",
        "key_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The ADB private key. [default: $STAREBRAIN_ADB_KEY or ~/.config/starebrain/adbkey]",
    )(function)


def _emit(data: Any) -> None:
    from starebrain_actions.render import json_output as _render_json

    _render_json.emit_json(data)


@click.group("key")
def key_command() -> None:
    """The ADB key this computer signs in to phones with."""


@key_command.command("path")
@_key_option
@json_option
def key_path_command(key_path: Path | None, as_json: bool) -> None:
    """Print the path of the private key in use (its public key is PATH.pub)."""
    path, _chosen = key_path_in_use(key_path)
    if as_json:
        _emit({"path": str(path), "exists": path.exists()})
        return
    click.echo(str(path))
    if not path.exists():
        click.echo("starebrain key: no key there yet: `starebrain key new` creates it", err=True)


@key_command.command("show")
@_key_option
@json_option
def key_show_command(key_path: Path | None, as_json: bool) -> None:
    """Print the public key a phone must authorise (the adb_keys line).

    Its fingerprint, the one the phone's "Allow USB debugging?" prompt shows, goes to
    stderr. A missing key is created at the default path (as the first send would), never
    at a path given with --key or $STAREBRAIN_ADB_KEY: use `starebrain key new` there.
    """
    from android_bridge.exceptions import KeyPermissionError
    from starebrain_actions.cli.context import CliError

    path, chosen = key_path_in_use(key_path)
    created = False
    try:
        if not path.exists() and not path.is_symlink():
            if chosen:
                raise CliError(
                    f"no ADB key at {path}; create one with `starebrain key new --key {path}`"
                )
            public = create_key(path)
            created = True
        else:
            public = public_key_of(path)
    except KeyPermissionError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot create the ADB key at {path}: {exc.strerror or exc}") from exc
    if as_json:
        _emit({**_public_data(public), "created": created})
        return
    if created:
        click.echo(f"starebrain key: created a new ADB key at {path}", err=True)
    click.echo(public.public_key)
    click.echo(f"starebrain key: fingerprint {public.fingerprint}", err=True)


@key_command.command("new")
@_key_option
@click.option(
    "--force", is_flag=True, help="Replace an existing key (phones must authorise again)."
)
@json_option
def key_new_command(key_path: Path | None, force: bool, as_json: bool) -> None:
    """Create a new ADB key pair (0600) and print its public key.

    An existing key is kept unless --force is given; then the new pair replaces it
    atomically, and every phone must authorise the new key.
    """
    from starebrain_actions.cli.context import CliError

    path, _chosen = key_path_in_use(key_path)
    existed = path.exists() or path.is_symlink()
    try:
        public = create_key(path, replace=force)
    except FileExistsError as exc:
        raise CliError(
            f"an ADB key already exists at {path}; `starebrain key show` prints it, and"
            " --force replaces it (every phone must then authorise the new key)"
        ) from exc
    except OSError as exc:
        raise CliError(f"cannot create the ADB key at {path}: {exc.strerror or exc}") from exc
    if as_json:
        _emit({**_public_data(public), "created": True, "replaced": existed})
        return
    if existed:
        click.echo(
            f"starebrain key: replaced the ADB key at {path}: phones must authorise the new one",
            err=True,
        )
    else:
        click.echo(f"starebrain key: created a new ADB key at {path}", err=True)
    click.echo(public.public_key)
    click.echo(f"starebrain key: fingerprint {public.fingerprint}", err=True)


def _public_data(public: PublicKey) -> dict[str, Any]:
    return {
        "path": str(public.path),
        "public_key": public.public_key,
        "fingerprint": public.fingerprint,
    }
