"""``mcp.auth``: the clients file, the token file, action id scopes and the Host/Origin lists
(no server: the HTTP behaviour is in ``test_mcp_http_auth``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from starebrain_actions.mcp.auth import (
    UNSCOPED,
    ActionScope,
    Clients,
    ClientTokens,
    HttpOptions,
    McpAuthError,
    McpClient,
    load_clients,
    server_token,
    transport_security,
)

TOKEN_A = "a" * 40
TOKEN_B = "b" * 40


def _clients_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "clients.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_scope_prefixes_its_own_ids_and_recognises_only_them() -> None:
    """A client's ids are NAME/ID in the ledger; another client's are not its own; without a
    client, ids are exactly as given."""
    alice = ActionScope(client="alice")
    assert "alice/A-1" == alice.ledger_id("A-1")
    assert "A-1" == alice.own("alice/A-1")
    assert "bob/x" == alice.own("alice/bob/x")
    assert None is alice.own("bob/A-1")
    assert None is alice.own("A-1")
    assert "A-1" == UNSCOPED.ledger_id("A-1") == UNSCOPED.own("A-1")


def test_clients_file_names_clients_with_tokens_and_a_policy_kept_for_later(
    tmp_path: Path,
) -> None:
    """Two clients load, scoped; the policy path is resolved beside the file (kept, not
    applied); the verifier maps each token to its client and refuses any other."""
    path = _clients_file(
        tmp_path,
        f'[clients.alice]\ntoken = "{TOKEN_A}"\npolicy = "alice.toml"\n'
        f'[clients.bob]\ntoken = "{TOKEN_B}"\n',
    )
    clients = load_clients(path)
    assert clients.scoped
    assert [("alice", tmp_path / "alice.toml"), ("bob", None)] == [
        (client.name, client.policy) for client in clients.clients
    ]
    assert TOKEN_A not in repr(clients)


async def test_the_verifier_maps_tokens_to_clients() -> None:
    """A known token is an AccessToken of its client; an unknown one is None."""
    clients = Clients(
        clients=(McpClient(name="alice", token=TOKEN_A), McpClient(name="bob", token=TOKEN_B))
    )
    verifier = ClientTokens(clients)
    found = await verifier.verify_token(TOKEN_B)
    assert found is not None and "bob" == found.client_id
    assert None is await verifier.verify_token("c" * 40)
    assert None is await verifier.verify_token(TOKEN_A[:-1])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "at least one client"),
        ("[clients]\n", "at least one client"),
        ("[other]\nx = 1\n", "unknown key"),
        ('[clients."a/b"]\ntoken = "' + TOKEN_A + '"\n', "1 to 32 letters"),
        ("[clients.alice]\n", "token"),
        ('[clients.alice]\ntoken = "short"\n', "at least 32"),
        ('[clients.alice]\ntoken = "' + "a" * 39 + ' "\n', "at least 32"),
        ('[clients.alice]\ntoken = "' + TOKEN_A + '"\nrole = "admin"\n', "unknown key"),
        (
            f'[clients.alice]\ntoken = "{TOKEN_A}"\n[clients.bob]\ntoken = "{TOKEN_A}"\n',
            "share a token",
        ),
        ("[clients.alice\n", "not TOML"),
    ],
)
def test_a_malformed_clients_file_is_refused(tmp_path: Path, text: str, says: str) -> None:
    """Every malformed clients file is an McpAuthError that says what is wrong."""
    with pytest.raises(McpAuthError, match=says):
        load_clients(_clients_file(tmp_path, text))


def test_a_clients_file_others_can_read_or_a_symlink_is_refused(tmp_path: Path) -> None:
    """The file holds tokens: group- or world-readable, or a symlink, it is refused."""
    path = _clients_file(tmp_path, f'[clients.alice]\ntoken = "{TOKEN_A}"\n', mode=0o640)
    with pytest.raises(McpAuthError, match="chmod 600"):
        load_clients(path)
    path.chmod(0o600)
    link = tmp_path / "link.toml"
    link.symlink_to(path)
    with pytest.raises(McpAuthError, match="cannot read"):
        load_clients(link)


def test_the_token_file_is_created_once_private_and_read_back(tmp_path: Path) -> None:
    """Missing, the token file is created (0600, its directory 0700) with a random token;
    then read back as is; the environment wins; an open or empty file is refused."""
    path = tmp_path / "config" / "starebrain" / "mcp-token"
    token, where, created = server_token({}, path)
    assert (where, created) == (path, True)
    assert 0o600 == stat.S_IMODE(path.stat().st_mode)
    assert 0o700 == stat.S_IMODE(path.parent.stat().st_mode)
    assert len(token) >= 40
    assert (token, path, False) == server_token({}, path)
    assert (TOKEN_A, None, False) == server_token({"STAREBRAIN_MCP_TOKEN": TOKEN_A}, path)
    with pytest.raises(McpAuthError, match="at least 32"):
        server_token({"STAREBRAIN_MCP_TOKEN": "short"}, path)
    assert [] == [name for name in os.listdir(path.parent) if name != "mcp-token"]
    path.chmod(0o644)
    with pytest.raises(McpAuthError, match="chmod 600"):
        server_token({}, path)
    path.write_text("")
    path.chmod(0o600)
    with pytest.raises(McpAuthError, match="empty"):
        server_token({}, path)


def test_a_symlink_at_the_token_path_is_never_followed(tmp_path: Path) -> None:
    """A symlink planted at the token path is refused, and its target left alone."""
    target = tmp_path / "target"
    target.write_text("keep me\n")
    path = tmp_path / "mcp-token"
    path.symlink_to(target)
    with pytest.raises(McpAuthError, match="cannot read"):
        server_token({}, path)
    assert "keep me\n" == target.read_text()


def _options(host: str, **more: tuple[str, ...]) -> HttpOptions:
    return HttpOptions(host=host, port=0, clients=Clients(clients=()), **more)


@pytest.mark.parametrize(
    ("host", "hosts"),
    [
        ("127.0.0.1", ["127.0.0.1:8766", "localhost:8766"]),
        ("127.0.0.2", ["127.0.0.2:8766", "localhost:8766"]),
        ("::1", ["[::1]:8766", "localhost:8766"]),
        ("localhost", ["localhost:8766", "127.0.0.1:8766"]),
        ("192.0.2.7", ["192.0.2.7:8766"]),
        ("0.0.0.0", ["0.0.0.0:8766"]),
    ],
)
def test_the_allowed_hosts_and_origins_follow_the_bound_address(
    host: str, hosts: list[str]
) -> None:
    """Allowed: the bind address with its port, localhost's names for a loopback bind (never
    any port, never another address), and the http origins of those; checks are on."""
    settings = transport_security(_options(host), 8766)
    assert settings.enable_dns_rebinding_protection
    assert hosts == settings.allowed_hosts
    assert [f"http://{name}" for name in hosts] == settings.allowed_origins


def test_allow_host_and_allow_origin_add_exactly_what_they_name() -> None:
    """--allow-host and --allow-origin values are added as given."""
    options = _options(
        "127.0.0.1", allow_hosts=("sms.example",), allow_origins=("https://sms.example",)
    )
    settings = transport_security(options, 9000)
    assert ["127.0.0.1:9000", "localhost:9000", "sms.example"] == settings.allowed_hosts
    assert "https://sms.example" == settings.allowed_origins[-1]
