"""The server's phones: one connected ``SmsAgent`` per phone, and the ledger's key of each."""

from __future__ import annotations

import asyncio
import contextlib

from starebrain_actions._logging import get_logger
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.mcp.config import ServerConfig
from starebrain_actions.mcp.send_cap import SendCap
from starebrain_actions.orchestration.agent import SmsAgent, vet_new_phone
from starebrain_actions.orchestration.phone_ledger import check_phone_ledger
from starebrain_actions.orchestration.reconciler import void_after_for
from starebrain_actions.phone.send_path import ledger_proof

__all__ = ["Phones"]

_log = get_logger("starebrain.mcp")


class Phones:
    """One connected ``SmsAgent`` per phone, connected on first use and kept."""

    def __init__(self, ledger: Ledger, config: ServerConfig) -> None:
        self._ledger = ledger
        self._config = config
        self._agents: dict[str, SmsAgent] = {}
        self._locks = {device: asyncio.Lock() for device in config.devices}
        #: address -> the phone's key in the ledger, once it connected
        self.keys: dict[str, str] = {}

    async def agent(self, device: str, *, within_s: float) -> SmsAgent:
        """The agent of ``device``, connecting within ``within_s`` seconds if needed.

        Raises:
            PhoneUnavailable: the phone cannot be reached now (nothing is recorded).
        """
        from starebrain_actions.phone.android import AndroidPhone, PhoneUnavailable

        config = self._config
        async with self._locks[device]:
            known = self._agents.get(device)
            if known is not None:
                return known
            try:
                async with asyncio.timeout(within_s):
                    phone = await AndroidPhone.connect(
                        device,
                        key_path=config.key_path,
                        connect_timeout_s=max(0.1, min(config.connect_timeout_s, within_s)),
                        command_timeout_s=config.command_timeout_s,
                        read_as_system=config.read_as_system,
                        send_path=config.send_path,
                        framework_proof=ledger_proof(self._ledger),
                    )
            except TimeoutError:
                raise PhoneUnavailable(
                    f"{device}: did not answer within {within_s:.1f} s"
                ) from None
            try:
                await vet_new_phone(self._ledger, phone)
                # another ledger's attempts open on the phone: refused (PhoneUnavailable's
                # kin, a tool error naming both ledgers), unless --share-phone
                await check_phone_ledger(
                    self._ledger, phone, phone.address, share_phone=config.share_phone
                )
            except BaseException:
                await phone.close()
                raise
            binding = await phone.bind_in(self._ledger)
            self.keys[device] = binding.key
            cap = getattr(self._ledger, "cap", None)
            if isinstance(cap, SendCap):
                cap.know(device, binding.key)
            agent = SmsAgent(
                self._ledger,
                phone,
                policy=config.policy,
                region=config.region,
                poll_interval_s=config.poll_interval_s,
                rate_limit=config.rate_limit,
                actor="mcp",
                void_after=void_after_for(config.command_timeout_s),
            )
            agent.binding = binding
            self._agents[device] = agent
            _log.info("mcp_phone_connected", device=device, phone=binding.key)
            return agent

    async def key_of(self, address: str) -> str:
        """The ledger's key of the phone at ``address`` (bound when it connected; before, the
        phone the ledger last met there, else the address itself)."""
        known = self.keys.get(address)
        if known is None:
            known = await self._ledger.phone_key_for(address)
        return known

    async def address_of(self, key: str) -> str | None:
        """This server's address of the phone ``key`` (None: not one of its phones).
        ``key`` may also be an address, as an action's ``planned_device`` is when its phone
        was never met before: then the phone the ledger maps that address to (as
        ``check_route`` does when it writes a receipt)."""
        wanted = {key, await self._ledger.phone_key_for(key)}
        for address in self._config.devices:
            if await self.key_of(address) in wanted:
                return address
        return None

    async def close(self) -> None:
        for agent in self._agents.values():
            with contextlib.suppress(Exception):
                await agent.phone.close()
        self._agents.clear()
