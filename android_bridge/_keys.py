"""The ADB RSA key: created on first use with owner-only permissions (both files 0600, see
``_private_files``), refused when loose or unusable."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from android_bridge._paths import config_dir
from android_bridge._private_files import make_private_dirs, write_private_file
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


def public_key_line(private_path: Path) -> str:
    """The ``adbkey.pub`` line of the private key at ``private_path``: Android's RSA public
    key in base64, then `` user@host`` (what adb-shell's ``write_public_keyfile`` writes)."""
    import base64

    from adb_shell.auth.keygen import encode_pubkey, get_user_info

    encoded = base64.b64encode(encode_pubkey(str(private_path))).decode("ascii")
    user_info: str = get_user_info()
    return encoded + user_info


def _write_public_key(private_path: Path, public_path: Path) -> None:
    """Write ``public_path`` 0600, by the rule of ``_private_files`` (adb-shell's own writer
    leaves it to the umask: 0644)."""
    write_private_file(public_path, public_key_line(private_path).encode("ascii"))


def ensure_key(path: Path | None = None) -> Path:
    """Return the private key path, creating the key pair if absent: both files 0600, any
    directory created 0700 (the rule of ``android_bridge._private_files``). A missing public
    key of an existing private key is written, 0600 too.

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
    make_private_dirs(key_path.parent)
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    write_private_file(key_path, pem)
    if public_path.exists() or public_path.is_symlink():
        public_path.unlink()  # a stale public key of a key that is gone: not this key's
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
