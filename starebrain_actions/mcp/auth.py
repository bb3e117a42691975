"""Who may use ``starebrain mcp`` over HTTP, and under which action ids.

Every HTTP request carries ``Authorization: Bearer TOKEN``. The token is one of:

- the server's own: ``$STAREBRAIN_MCP_TOKEN``, else the file ``mcp-token`` in starebrain's
  config dir (beside ``adbkey``), created at random, 0600, on first use;
- with ``--clients FILE``, one per named client (a TOML table ``[clients.NAME]``). Each client's
  action ids are scoped to it (``NAME/ACTION_ID`` in the ledger), so two clients never share
  an action or read each other's.

Host and Origin headers are checked against the address the server is bound to (plus
``localhost`` for a loopback bind, and what ``--allow-host`` / ``--allow-origin`` add).

This module imports neither the MCP SDK nor the CLI at import time (``starebrain mcp token``
works without the SDK); the SDK's ``AccessToken`` and ``TransportSecuritySettings`` are
imported where they are built.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from starebrain_actions.core.exceptions import StarebrainError

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken
    from mcp.server.transport_security import TransportSecuritySettings

__all__ = [
    "OWNER",
    "TOKEN_ENV",
    "TOKEN_FILE_NAME",
    "UNSCOPED",
    "ActionScope",
    "ClientTokens",
    "Clients",
    "HttpOptions",
    "McpAuthError",
    "McpClient",
    "default_token_path",
    "is_loopback",
    "load_clients",
    "server_token",
    "transport_security",
]

#: The environment variable that gives the server's token (it wins over the token file).
TOKEN_ENV: Final = "STAREBRAIN_MCP_TOKEN"  # noqa: S105 - a variable's name
#: The token file's name in starebrain's config dir.
TOKEN_FILE_NAME: Final = "mcp-token"  # noqa: S105 - a file's name
#: The client name of the server's own token (no ``--clients``): its action ids are unscoped.
OWNER: Final = "owner"
#: Bytes of randomness in a created token (``secrets.token_urlsafe``: 43 characters).
TOKEN_BYTES: Final = 32
#: The shortest token accepted, from the environment or a clients file.
MIN_TOKEN_LENGTH: Final = 32

#: Separates a client's name from its action id in the ledger's action id.
SCOPE_SEPARATOR: Final = "/"
_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
_TOKEN = re.compile(r"[\x21-\x7e]+")
_CLIENT_KEYS: Final = frozenset({"token", "policy", "pools"})


class McpAuthError(StarebrainError):
    """The token file or the clients file cannot be used (the message says why and how)."""


# --------------------------------------------------------------------------- clients


@attrs.frozen(kw_only=True)
class McpClient:
    """One bearer token and whom it stands for."""

    #: the client's name: its action ids are ``NAME/ACTION_ID`` in the ledger when scoped
    name: str
    #: the bearer token (never shown)
    token: str = attrs.field(repr=False)
    #: the client's policy file (``policy = "…"`` in its table), resolved against the
    #: clients file's directory: its gate replaces the server's (``--policy``) for this
    #: client's sends
    policy: Path | None = None
    #: the pools this client may queue actions for (``pools = [...]`` in its table), among
    #: the server's own (``--pool``); none: it may not queue
    pools: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Clients:
    """The tokens the server accepts."""

    #: one per token
    clients: tuple[McpClient, ...]
    #: True with ``--clients``: each client's action ids are its own
    scoped: bool = False

    def find(self, token: str) -> McpClient | None:
        """The client whose token this is (compared in constant time with every token)."""
        found = None
        given = token.encode()
        for client in self.clients:
            if hmac.compare_digest(given, client.token.encode()):
                found = client
        return found

    def scope_of(self, client_name: str) -> ActionScope:
        """How the client ``client_name``'s action ids map to the ledger's, and the pools
        it may queue for."""
        if not self.scoped:
            return UNSCOPED
        pools = next((c.pools for c in self.clients if c.name == client_name), ())
        return ActionScope(client=client_name, pools=pools)


class ClientTokens:
    """The SDK's ``TokenVerifier`` over ``Clients``: a known token is an ``AccessToken``
    whose ``client_id`` is the client's name; anything else is refused (401)."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        client = self.clients.find(token)
        if client is None:
            return None
        return AccessToken(token=token, client_id=client.name, scopes=[])


@attrs.frozen
class ActionScope:
    """A client's view of the ledger's action ids: ``NAME/ID`` for a named client of
    ``--clients``, the id itself otherwise; and the pools it may queue for."""

    #: the client's name (None: action ids are exactly as given)
    client: str | None = None
    #: the pools the client may queue for, among the server's (None: every pool of the
    #: server's, for the server's own token and stdio; a client of ``--clients`` names its
    #: own, and may queue for none unless it does)
    pools: tuple[str, ...] | None = None

    def may_queue(self, pool: str, server_pools: tuple[str, ...]) -> bool:
        """May this client queue an action for ``pool``: one of the server's pools
        (``--pool``), and of the client's own when it is a client of ``--clients``."""
        return pool in server_pools and (self.pools is None or pool in self.pools)

    def queue_pools(self, server_pools: tuple[str, ...]) -> tuple[str, ...]:
        """The pools this client may queue for."""
        return tuple(pool for pool in server_pools if self.may_queue(pool, server_pools))

    def ledger_id(self, action_id: str) -> str:
        """The ledger's id of the client's ``action_id``."""
        return action_id if self.client is None else f"{self.client}{SCOPE_SEPARATOR}{action_id}"

    def own(self, ledger_id: str) -> str | None:
        """The client's id of the ledger's ``ledger_id`` (None: another client's action)."""
        if self.client is None:
            return ledger_id
        prefix = f"{self.client}{SCOPE_SEPARATOR}"
        return ledger_id[len(prefix) :] if ledger_id.startswith(prefix) else None


#: Action ids as given (stdio, the server's own token).
UNSCOPED: Final = ActionScope()


def load_clients(path: Path) -> Clients:
    """The named clients of a TOML file::

        [clients.alice]
        token = "…"                  # at least 32 printable characters, no spaces
        policy = "alice-policy.toml"  # optional: this client's policy gate
        pools = ["office"]            # optional: the pools it may queue for (of --pool's)

    The file holds secrets: it must not be readable by group or others.

    Raises:
        McpAuthError: unreadable, readable by others, not TOML, or a client malformed.
    """
    text = _read_private(path, what="clients file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise McpAuthError(f"{path}: not TOML: {exc}") from exc
    unknown = set(data) - {"clients"}
    if unknown:
        raise McpAuthError(f"{path}: unknown key(s) {sorted(unknown)}; expected [clients.NAME]")
    tables = data.get("clients")
    if not isinstance(tables, Mapping) or not tables:
        raise McpAuthError(f"{path}: name at least one client as [clients.NAME] with a token")
    clients: list[McpClient] = []
    for name, table in tables.items():
        where = f"{path}: [clients.{name}]"
        if not _CLIENT_NAME.fullmatch(name):
            raise McpAuthError(
                f"{where}: a client's name is 1 to 32 letters, digits, '_', '.' or '-'"
            )
        if not isinstance(table, Mapping):
            raise McpAuthError(f"{where}: expected a table with a token")
        extra = set(table) - _CLIENT_KEYS
        if extra:
            raise McpAuthError(
                f"{where}: unknown key(s) {sorted(extra)}; expected token, policy, pools"
            )
        token = table.get("token")
        if not isinstance(token, str):
            raise McpAuthError(f'{where}: token = "…" is required')
        _check_token(token, where=where)
        policy = table.get("policy")
        if policy is not None and not (isinstance(policy, str) and policy):
            raise McpAuthError(f"{where}: policy is a file name")
        clients.append(
            McpClient(
                name=name,
                token=token,
                policy=(path.parent / policy) if policy is not None else None,
                pools=_client_pools(table.get("pools", []), where=where),
            )
        )
    tokens = [client.token for client in clients]
    if len(set(tokens)) != len(tokens):
        raise McpAuthError(f"{path}: two clients share a token; give each its own")
    return Clients(clients=tuple(clients), scoped=True)


def _client_pools(pools: object, *, where: str) -> tuple[str, ...]:
    """A client's ``pools = ["NAME", …]``, checked.

    Raises:
        McpAuthError: not a list of pool names.
    """
    from starebrain_actions.core.exceptions import InvalidInput
    from starebrain_actions.ledger.queue import check_pool

    if not isinstance(pools, list) or not all(isinstance(pool, str) for pool in pools):
        raise McpAuthError(f'{where}: pools is a list of pool names, e.g. pools = ["office"]')
    try:
        return tuple(dict.fromkeys(check_pool(pool) for pool in pools))
    except InvalidInput as exc:
        raise McpAuthError(f"{where}: {exc}") from exc


# --------------------------------------------------------------------------- the server's token


def default_token_path() -> Path:
    """``mcp-token`` in starebrain's config dir (where ``adbkey`` lives)."""
    from android_bridge._paths import config_dir

    return config_dir() / TOKEN_FILE_NAME


def server_token(
    environ: Mapping[str, str], path: Path | None = None
) -> tuple[str, Path | None, bool]:
    """The server's own token: ``$STAREBRAIN_MCP_TOKEN``, else the token file (created with a
    random token, 0600, in a 0700 directory, when missing). Returns the token, the file it
    came from (None: the environment) and whether the file was just created.

    Raises:
        McpAuthError: the variable is too short, or the file is unusable (not a regular
            file, readable by others, empty).
    """
    from_env = environ.get(TOKEN_ENV)
    if from_env:
        _check_token(from_env, where=f"${TOKEN_ENV}")
        return from_env, None, False
    path = path if path is not None else default_token_path()
    created = False
    if not os.path.lexists(path):
        created = _create_token_file(path)
    token = _read_private(path, what="token file").strip()
    if not token:
        raise McpAuthError(f"{path}: the token file is empty; delete it to get a new token")
    return token, path, created


def _create_token_file(path: Path) -> bool:
    """Write a random token to ``path`` atomically (a private temporary file, linked into
    place: a concurrent first start finds the other's token). False: it existed meanwhile."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        temporary.unlink(missing_ok=True)


def _read_private(path: Path, *, what: str) -> str:
    """The text of a file of secrets, refused unless it is a regular file (not a symlink) that
    neither group nor others may read or write."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise McpAuthError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise McpAuthError(f"the {what} {path} is not a regular file")
        if info.st_mode & 0o077:
            raise McpAuthError(
                f"the {what} {path} is open to others (mode {stat.S_IMODE(info.st_mode):04o}):"
                f" it holds secrets; chmod 600 {path}"
            )
        raw = handle.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise McpAuthError(f"the {what} {path} is not UTF-8 text") from exc


def _check_token(token: str, *, where: str) -> None:
    if len(token) < MIN_TOKEN_LENGTH or not _TOKEN.fullmatch(token):
        raise McpAuthError(
            f"{where}: a token is at least {MIN_TOKEN_LENGTH} printable ASCII characters without"
            " spaces (make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


# --------------------------------------------------------------------------- Host and Origin


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (all of 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """``0.0.0.0`` or ``::``: every interface."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _host_header(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@attrs.frozen(kw_only=True)
class HttpOptions:
    """How ``starebrain mcp --http`` serves."""

    #: the address to bind (``localhost``, an IPv4 or IPv6 address)
    host: str
    #: the port (0: any free one)
    port: int
    #: the tokens accepted
    clients: Clients
    #: more Host header values accepted (``--allow-host``), exactly, or ``NAME:*`` for any port
    allow_hosts: tuple[str, ...] = ()
    #: more Origin header values accepted (``--allow-origin``), e.g. ``https://sms.example``
    allow_origins: tuple[str, ...] = ()


def transport_security(options: HttpOptions, port: int) -> TransportSecuritySettings:
    """The SDK's Host/Origin check for the bound ``port``: the bind address with its port (and
    ``localhost``'s names for a loopback bind), plus ``--allow-host`` / ``--allow-origin``.
    An Origin is accepted only for the hosts of the bind itself, or given explicitly."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = [options.host]
    if is_loopback(options.host):
        names.append("localhost")
        if options.host == "localhost":
            names.append("127.0.0.1")  # what a "localhost" bind listens on
    hosts = list(dict.fromkeys(_host_header(name, port) for name in names))
    origins = [f"http://{host}" for host in hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *options.allow_hosts],
        allowed_origins=[*origins, *options.allow_origins],
    )
