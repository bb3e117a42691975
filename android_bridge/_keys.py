"""The ADB RSA key: created on first use with owner-only permissions, refused when loose or
unusable."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from android_bridge._paths import config_dir
from android_bridge.exceptions import KeyFileError, KeyPermissionError

#: Environment variable overriding the default private key path.
KEY_PATH_ENV = "STAREBRAIN_ADB_KEY"


def default_key_path() -> Path:
    """Where the private key lives: ``$STAREBRAIN_ADB_KEY``, else ``adbkey`` in the user's
    starebrain configuration directory (``$XDG_CONFIG_HOME/starebrain/adbkey``, i.e.
    ``~/.config/starebrain/adbkey`` on Linux; see ``android_bridge._paths``)."""
    override = os.environ.get(KEY_PATH_ENV)
    if override:
        return Path(override).expanduser()
    return config_dir() / "adbkey"


def _check_private(path: Path) -> None:
    try:
        status = path.stat()
    except OSError as exc:
        raise KeyFileError(f"bad key file {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(status.st_mode):
        raise KeyFileError(f"bad key file {path}: not a regular file")
    mode = stat.S_IMODE(status.st_mode)
    if mode & 0o077:
        raise KeyPermissionError(
            f"ADB private key {path} has mode {mode:04o}; it must be readable by its owner only."
            f" Fix it with: chmod 600 {path}"
        )


def _write_public_key(private_path: Path, public_path: Path) -> None:
    from adb_shell.auth.keygen import write_public_keyfile

    write_public_keyfile(str(private_path), str(public_path))


def ensure_key(path: Path | None = None) -> Path:
    """Return the private key path, creating the key pair (mode 0600, dir 0700) if absent.

    Raises:
        KeyPermissionError: an existing private key is readable or writable by others.
        KeyFileError: an existing key file is unreadable or not an RSA private key.
    """
    key_path = path if path is not None else default_key_path()
    public_path = Path(str(key_path) + ".pub")
    if key_path.exists():
        _check_private(key_path)
        if not public_path.exists():
            try:
                _write_public_key(key_path, public_path)
            except Exception as exc:  # see load_signer: the key parsers share no base class
                raise KeyFileError(f"bad key file {key_path}: {_reason(exc)}") from exc
        return key_path
    key_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    os.chmod(key_path, 0o600)  # the umask cannot widen 0600, but be explicit
    _write_public_key(key_path, public_path)
    return key_path


def load_signer(path: Path | None = None) -> Any:
    """Load (creating if needed) the key and return an adb-shell signer for it.

    Raises:
        KeyPermissionError: the private key has loose permissions.
        KeyFileError: the key file is unreadable or not an RSA private key ("bad key file").
    """
    key_path = path if path is not None else default_key_path()
    try:
        key_path = ensure_key(key_path)
        signer = _own_key_signer(key_path)
    except KeyPermissionError:
        raise
    except Exception as exc:
        # adb-shell and cryptography raise OSError, ValueError, TypeError (an encrypted
        # key), UnsupportedAlgorithm, even AssertionError for a file that is not a key.
        raise KeyFileError(f"bad key file {key_path}: {_reason(exc)}") from exc
    if not isinstance(signer.rsa_key, rsa.RSAPrivateKey):
        raise KeyFileError(f"bad key file {key_path}: not an RSA private key")
    return signer


def _own_key_signer(key_path: Path) -> Any:
    """adb-shell's ``CryptographySigner`` over the user's own key, loaded without
    cryptography's RSA consistency check (``unsafe_skip_rsa_key_validation``).

    That check costs about 40 ms on every command that reaches a phone, and guards against
    keys from elsewhere; this one is the user's own file, created here and refused unless it
    is private (``ensure_key``). A file that is not a PEM RSA key is still refused; one that
    parses but is inconsistent signs tokens the phone does not accept, and the phone asks for
    authorization instead. The signer's own ``__init__`` (which loads with the check) is
    skipped; its signing and public key are adb-shell's.
    """
    from adb_shell.auth.sign_cryptography import CryptographySigner

    signer = CryptographySigner.__new__(CryptographySigner)
    signer.public_key = key_path.with_name(key_path.name + ".pub").read_bytes()
    signer.rsa_key = serialization.load_pem_private_key(
        key_path.read_bytes(), None, unsafe_skip_rsa_key_validation=True
    )
    return signer


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, TypeError) and "password" in str(exc).lower():
        return "the key is encrypted (adb keys have no passphrase)"
    return f"not a PEM RSA private key ({type(exc).__name__})"
