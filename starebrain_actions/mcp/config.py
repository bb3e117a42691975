"""What ``starebrain mcp``'s options decided: the server's configuration, checked when it is
made."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from starebrain_actions.core.derived_ids import DERIVED_ID_WINDOW
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import RetryPolicy
from starebrain_actions.ledger.queue import check_pool
from starebrain_actions.orchestration.agent import RATE_LIMIT_PER_MINUTE

__all__ = ["WAIT_CEILING_S", "ServerConfig"]

#: The most ``wait_seconds`` may ask for in the tool's schema; ``--max-wait`` lowers it.
WAIT_CEILING_S: Final = 600.0


@attrs.frozen(kw_only=True)
class ServerConfig:
    """What ``starebrain mcp``'s options decided."""

    #: the ledger: a SQLite file path, or a PostgreSQL URL (a ``str``)
    db: Path | str
    #: the phones, ``host:port``; the first is the default for a new action
    devices: tuple[str, ...]
    #: the ADB private key (None: the default key)
    key_path: Path | None = None
    #: read phones through ``su 1000`` (userdebug/eng builds)
    read_as_system: bool = False
    #: the retry policy of actions this server creates
    policy: RetryPolicy = attrs.field(factory=RetryPolicy)
    #: region for national numbers (None: international numbers only)
    region: str | None = None
    #: the longest ``wait_seconds`` honoured
    max_wait_s: float = 60.0
    #: ``wait_seconds`` when the call gives none
    default_wait_s: float = 20.0
    #: sends started on the server's phones per hour at most (None: no limit)
    max_sends_per_hour: int | None = None
    #: sends started on one phone per minute at most (Android's SmsUsageMonitor)
    rate_limit: int = RATE_LIMIT_PER_MINUTE
    #: "ui", "framework" or "auto" (``phone.send_path``)
    send_path: str = "auto"
    #: send even when the fence on a phone names another ledger with attempts still open
    #: there (``--share-phone``; without it the phone is refused, nothing recorded)
    share_phone: bool = False
    #: seconds to connect to a phone
    connect_timeout_s: float = 5.0
    #: seconds one command on a phone may take
    command_timeout_s: float = 20.0
    #: offer the ``resolve`` tool (an operator's ruling)
    allow_resolve: bool = False
    #: the name ``resolve`` records as the operator
    operator: str = "mcp"
    #: show numbers and bodies in results' ``record`` (redacted by default)
    show_private: bool = False
    #: the longest wait between two reads while waiting for proof (the first read after a
    #: send comes when the phone's messages have shown up before: ``SmsAgent``)
    poll_interval_s: float = 0.25
    #: seconds after its latest attempt during which a settled action answers a send_sms
    #: that names no action_id (``derived_ids.derived_id_resumable``); past them the same text to
    #: the same number is a new action
    derived_id_window_s: float = DERIVED_ID_WINDOW.total_seconds()
    #: the policy gate (``core.policy.Policy``) every send of the server passes (None: none;
    #: ``starebrain mcp`` always gives one: its approval mode is "new" unless the file says
    #: otherwise)
    gate: Any = None
    #: a client's own gate (``policy = "FILE"`` in ``--clients``), by client name: it
    #: replaces the server's for that client's sends
    client_gates: Mapping[str, Any] = attrs.field(factory=dict)
    #: the pools ``send_sms`` may queue an action for (``--pool``), for the workers beside
    #: their phones to send (``starebrain worker``); empty: the server queues nothing
    pools: tuple[str, ...] = ()
    #: the clients of ``--clients``, by name: the server records them in the ledger as the
    #: owners of their namespaces when it starts (``Ledger.register_owners``), so that only
    #: a client's own calls create ids under ``NAME/``, whoever else uses the ledger
    owners: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.devices:
            raise InvalidInput("the MCP server needs at least one phone (--device HOST:PORT)")
        if not 0 <= self.derived_id_window_s < float("inf"):
            raise InvalidInput("derived_id_window_s must be a finite number of seconds >= 0")
        if not 1.0 <= self.max_wait_s <= WAIT_CEILING_S:
            raise InvalidInput(f"max_wait_s must be between 1 and {WAIT_CEILING_S:g}")
        if self.max_sends_per_hour is not None and self.max_sends_per_hour < 1:
            raise InvalidInput("max_sends_per_hour must be at least 1")
        for pool in self.pools:
            check_pool(pool)
