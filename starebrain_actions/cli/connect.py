"""Reaching a phone within a command's ``--wait``: ``SmsAgent.open`` tried again while time
is left, for ``send`` and ``resume``; a phone another ledger holds refused (exit 7), one it
only used before warned of once on stderr."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

from starebrain_actions.cli.context import EXIT_NOT_READY, CliError

if TYPE_CHECKING:
    from starebrain_actions.cli.progress import Progress
    from starebrain_actions.orchestration.agent import SmsAgent

#: Seconds between two tries to connect to a phone that does not answer (doubling up to
#: ``_CONNECT_RETRY_MAX_S``), while ``send``'s ``--wait`` lasts.
_CONNECT_RETRY_S: Final = 0.5
_CONNECT_RETRY_MAX_S: Final = 5.0


class PhoneNotReadyError(CliError):
    """The phone did not answer or was not ready within ``--wait``; exit status 7."""

    exit_code = EXIT_NOT_READY


class PhoneHeldError(CliError):
    """Another ledger's attempts are open on the phone (``PhoneHeldByAnotherLedger``);
    exit status 7: nothing was recorded or sent, a person decides (``--share-phone``)."""

    exit_code = EXIT_NOT_READY


@contextlib.asynccontextmanager
async def agent_within(
    device: str,
    left: Callable[[], float],
    progress: Progress,
    *,
    connect_timeout: float,
    command_timeout: float,
    **options: Any,
) -> AsyncIterator[SmsAgent]:
    """``SmsAgent.open``, tried again while ``left()`` seconds remain when the phone does not
    answer (its link is down, it has not authorised the key yet, it is restarting).

    Raises:
        PhoneNotReadyError: it did not answer within the time left (nothing was recorded).
    """
    import asyncio

    from starebrain_actions.core.exceptions import PhoneHeldByAnotherLedger
    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.phone.android import PhoneUnavailable

    pause = _CONNECT_RETRY_S
    while True:
        progress.step(f"connecting to {device}")
        async with contextlib.AsyncExitStack() as stack:
            try:
                agent = await stack.enter_async_context(
                    SmsAgent.open(
                        device=device,
                        connect_timeout_s=min(connect_timeout, left()),
                        command_timeout_s=command_timeout,
                        deadline_s=left(),
                        **options,
                    )
                )
            except PhoneHeldByAnotherLedger as exc:
                raise PhoneHeldError(str(exc)) from exc
            except PhoneUnavailable as exc:
                if not exc.retryable:
                    raise
                if left() <= pause:
                    raise PhoneNotReadyError(
                        f"the phone did not answer within --wait: {exc}. Nothing was sent or"
                        " recorded; check its connection (adb devices), then rerun the command"
                    ) from exc
                progress.step(f"waiting for {device} to answer ({exc})")
                await asyncio.sleep(pause)
                pause = min(_CONNECT_RETRY_MAX_S, pause * 2)
                continue
            warn_shared(agent)
            yield agent
            return


def warn_shared(agent: SmsAgent) -> None:
    """The warning, on stderr, that another ledger sent from the agent's phone last (once:
    this ledger's next send makes it the last); nothing with ``--share-phone``."""
    import click

    shared = agent.shared_phone
    if shared is not None and not shared.allowed:
        click.echo(
            f"starebrain: warning: {shared.message()}; pass --share-phone if that is meant",
            err=True,
        )
