"""Webhooks, the pure part: an endpoint's URL rule, which addresses count as private (the SSRF
rule), the retry schedule of Standard Webhooks with its jitter, and the signing secret's form.

Nothing here resolves a name or sends a request: the deliverer (``orchestration.webhooks``)
does, and asks these functions what to make of the answers.
"""

from __future__ import annotations

import base64
import ipaddress
import random
import secrets
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Final
from urllib.parse import urlsplit

import attrs

from starebrain_actions.core.exceptions import InvalidInput

#: The waits before each try of one event, the first immediate: Standard Webhooks' schedule
#: (immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight tries over about 27.5 hours).
#: After the last try fails, the endpoint is turned off.
STANDARD_SCHEDULE: Final[tuple[timedelta, ...]] = (
    timedelta(0),
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=10),
)
#: Each wait is multiplied by a random factor in [1 - JITTER, 1 + JITTER]: endpoints that
#: failed together (a receiver's outage) are not all tried again in the same second.
JITTER: Final = 0.2
#: Random bytes in a new secret (Standard Webhooks asks for 24 to 64).
SECRET_BYTES: Final = 32
#: The prefix of a Standard Webhooks secret.
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 (a prefix, not a secret)
#: The longest URL an endpoint may have.
MAX_URL: Final = 2000


@attrs.frozen(kw_only=True)
class RetrySchedule:
    """When one event is tried again at an endpoint that failed it.

    ``waits[i]`` is the wait before try ``i + 1`` (``waits[0]`` before the first, normally
    zero); once ``len(waits)`` tries have failed the endpoint is turned off. Each wait but
    the first is stretched or shrunk by up to ``jitter`` (a fraction) at random.
    """

    #: the wait before each try
    waits: tuple[timedelta, ...] = attrs.field(default=STANDARD_SCHEDULE)
    #: the fraction by which each wait may be drawn longer or shorter
    jitter: float = attrs.field(default=JITTER)

    @waits.validator
    def _check_waits(self, _attribute: object, value: Sequence[timedelta]) -> None:
        if not value:
            raise InvalidInput("a retry schedule has at least one try")
        if any(wait < timedelta(0) for wait in value):
            raise InvalidInput("a retry schedule's waits are 0 or more")

    @jitter.validator
    def _check_jitter(self, _attribute: object, value: float) -> None:
        if not 0 <= value < 1:
            raise InvalidInput(f"jitter is a fraction in [0, 1), got {value}")

    @property
    def tries(self) -> int:
        """Tries of one event before the endpoint is turned off."""
        return len(self.waits)

    def next_wait(
        self, failures: int, draw: Callable[[], float] = random.random
    ) -> timedelta | None:
        """The wait before the next try of an event that failed ``failures`` times (jitter
        drawn by ``draw``, uniform in [0, 1)); None: the schedule is spent, turn it off."""
        if failures < 0:
            raise InvalidInput(f"failures is 0 or more, got {failures}")
        if failures >= len(self.waits):
            return None
        wait = self.waits[failures]
        factor = 1 + self.jitter * (2 * draw() - 1)
        return wait * factor

    def describe(self) -> str:
        """The schedule as people read it: ``0s, 5s, 5m, …``."""
        return ", ".join(_short(wait) for wait in self.waits)


def _short(wait: timedelta) -> str:
    seconds = wait.total_seconds()
    if seconds and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def new_secret(length: int = SECRET_BYTES) -> str:
    """A new signing secret: ``whsec_`` and ``length`` random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(length)).decode("ascii")


def new_endpoint_id() -> str:
    """A new endpoint id: ``whk_`` and 16 random hex digits."""
    return "whk_" + secrets.token_hex(8)


def check_url(url: str) -> tuple[str, str]:
    """``url`` checked: ``http`` or ``https``, a host, no spaces or control characters, at most
    ``MAX_URL`` characters; its scheme and host (an IPv6 host without brackets).

    Raises:
        InvalidInput: it is not such a URL.
    """
    if not isinstance(url, str) or not url:
        raise InvalidInput("a webhook URL is required")
    if len(url) > MAX_URL:
        raise InvalidInput(f"a webhook URL has at most {MAX_URL} characters")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise InvalidInput(f"a webhook URL holds no spaces or control characters: {url!r}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"not a URL: {url!r} ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InvalidInput(
            f"a webhook URL is http:// or https://, got {parts.scheme or 'no scheme'}: {url!r}"
        )
    if not url.lower().startswith(scheme + "://"):
        raise InvalidInput(f"a webhook URL starts with {scheme}://, got {url!r}")
    host = parts.hostname
    if not host:
        raise InvalidInput(f"a webhook URL names a host: {url!r}")
    if port == 0:
        raise InvalidInput(f"port 0 is not a port: {url!r}")
    return scheme, host


def private_address(address: str) -> str | None:
    """Why ``address`` (an IP address, as text) is not a public one, or None when it is:
    private, loopback, link-local, multicast, reserved, unspecified, shared (CGNAT) or
    anything else not globally routable. An IPv4 address mapped into IPv6 is judged as
    IPv4.

    Raises:
        InvalidInput: ``address`` is not an IP address.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        raise InvalidInput(f"not an IP address: {address!r}") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for name in ("loopback", "link_local", "private", "multicast", "unspecified", "reserved"):
        if getattr(ip, f"is_{name}"):
            return name.replace("_", "-")
    if not ip.is_global:
        return "not globally routable"
    return None


def literal_address(host: str) -> str | None:
    """``host`` as an IP address when it is one (``127.0.0.1``, ``::1``), else None (a name
    to resolve)."""
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        return None


__all__ = [
    "JITTER",
    "MAX_URL",
    "SECRET_PREFIX",
    "STANDARD_SCHEDULE",
    "RetrySchedule",
    "check_url",
    "literal_address",
    "new_endpoint_id",
    "new_secret",
    "private_address",
]
