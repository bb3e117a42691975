"""The floor of a send on each send path, stated once for every benchmark.

A floor is what the simulated phone itself makes a send wait, however fast the client: read
off the simulator's settings (``SimulatedPhone(latency_ms=…, send_delay_ms=…)`` and the
messaging app's ``focus_delay_ms``) and off what the simulator does in sequence:

* every command waits ``latency_ms`` before its script runs (``SimulatedPhone._run_script``);
  the reply then comes back at once, so a command costs one latency;
* ``ui`` path: the send command runs ``am start -W``, which returns once the compose
  window has focus, ``focus_delay_ms`` after the launch (``Messaging._wait_lines``); the send
  key makes the app write its row SENT at once (every profile is ``optimistic_sent``, as AOSP
  Messaging writes SENT before sending), and the radio's ``send_delay_ms`` runs in the
  background (``Messaging._complete_later``: it holds neither the read nor the next send). A
  read then finds the row: **latency + focus delay + latency**;
* ``framework`` path: ``service call isms`` returns at once and the framework writes its row
  ``send_delay_ms`` later (``ISms`` ``result``: the row once the radio answered). A read can
  only find it then, but the read's own latency runs while the radio does (a read sent
  ``send_delay_ms`` after the call arrives as the row lands): **latency + send delay**.

A phone sends one message at a time (the agent's per-device lease), so the same floor is
each phone's share of a fleet's throughput: ``phones / floor`` sends a second.
"""

from __future__ import annotations

from typing import Final, Literal

from android_bridge.simulator._device import DEFAULT_FOCUS_DELAY_MS

#: The link and the radio every benchmark's simulated phones are given.
LATENCY_MS: Final = 30
SEND_DELAY_MS: Final = 200

SendPath = Literal["ui", "framework"]


def send_floor_ms(
    path: SendPath,
    *,
    latency_ms: int = LATENCY_MS,
    send_delay_ms: int = SEND_DELAY_MS,
    focus_delay_ms: int = DEFAULT_FOCUS_DELAY_MS,
) -> float:
    """The least time a send on ``path`` can take to be proven, in ms (module docstring)."""
    if path == "ui":
        return float(latency_ms + focus_delay_ms + latency_ms)
    if path == "framework":
        return float(latency_ms + send_delay_ms)
    raise ValueError(f"no floor for the send path {path!r}")


def send_floor_s(path: SendPath, **settings: int) -> float:
    """:func:`send_floor_ms` in seconds."""
    return send_floor_ms(path, **settings) / 1000


def explain(
    path: SendPath,
    *,
    latency_ms: int = LATENCY_MS,
    send_delay_ms: int = SEND_DELAY_MS,
    focus_delay_ms: int = DEFAULT_FOCUS_DELAY_MS,
) -> str:
    """The floor and what it is made of, for a benchmark's printout."""
    floor = send_floor_ms(
        path, latency_ms=latency_ms, send_delay_ms=send_delay_ms, focus_delay_ms=focus_delay_ms
    )
    if path == "ui":
        return (
            f"{floor:.0f} ms = {latency_ms} ms send command + {focus_delay_ms} ms compose focus"
            f" + {latency_ms} ms read (the radio's {send_delay_ms} ms runs after the app's SENT"
            " row)"
        )
    return (
        f"{floor:.0f} ms = {latency_ms} ms send command + {send_delay_ms} ms radio (the read's"
        f" {latency_ms} ms overlaps the radio)"
    )
