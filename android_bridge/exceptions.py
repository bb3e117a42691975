"""The bridge's error tree: every failure says whether a command could have reached the phone.

adb-shell, asyncio and the socket layer raise unrelated exceptions; the bridge maps each of
them (``raise … from exc``) into this tree at the transport boundary, so callers decide
FAILED-vs-PENDING by class alone::

    BridgeError
    ├── NotSent                  the command provably never reached the phone
    │   ├── DeviceUnreachable    connect refused/timed out, auth refused, link dead before writing
    │   │   └── DeviceUnusable   and waiting will not mend it: not an ADB device, another phone
    │   │                        than the one known there, no USB support installed
    │   └── CommandRejected      refused locally or by the phone before anything ran
    │       │                    (e.g. ``am``: "Error: Activity not started")
    │       ├── FenceLost        the send's fence claim failed because its epoch is gone
    │       │                    from the same phone (the folder was cleared): nothing ran
    │       └── PhoneNotReady    the send script's checks before the first key failed:
    │                            locked, screen off, no or another SMS app, another window
    ├── OutcomeUnknown           the command may have run: timeout, reset or garbage after writing
    ├── ReadFailed               a read that proves nothing (never a proof of absence)
    │   ├── ProviderError        the content provider refused or failed (stack trace, error text)
    │   ├── UnparseableOutput    output the parser cannot read *exactly*; it refuses, never guesses
    │   └── IncompleteRead       the output is truncated or changed while it was being read
    └── KeyPermissionError       the ADB private key file or its directory is readable by others
        └── KeyFileError         the key file is unreadable or not an RSA private key

Only :class:`NotSent` (and its subclasses) may turn a dispatch into FAILED. A read that raises
:class:`ReadFailed` leaves every pending attempt pending.
"""

from __future__ import annotations

__all__ = [
    "BridgeError",
    "CommandRejected",
    "DeviceUnreachable",
    "DeviceUnusable",
    "FenceLost",
    "IncompleteRead",
    "KeyFileError",
    "KeyPermissionError",
    "NotSent",
    "OutcomeUnknown",
    "PhoneNotReady",
    "ProviderError",
    "ReadFailed",
    "UnparseableOutput",
]


class BridgeError(Exception):
    """Base class of every error the bridge raises."""


class NotSent(BridgeError):
    """The command provably did not reach the phone: nothing can have been sent."""


class DeviceUnreachable(NotSent):
    """The device could not be reached or refused us before any command was written."""


class DeviceUnusable(DeviceUnreachable):
    """The device cannot be used, and unlike a phone that does not answer yet, waiting does
    not mend it: the address is not an ADB device (another service on that port), another
    phone than the one this handle read first answers there (wiped, reset or replaced), or
    a ``usb:`` phone needs USB support that is not installed."""


class CommandRejected(NotSent):
    """The request was refused before anything could be sent (locally or by the phone)."""


class FenceLost(CommandRejected):
    """A fenced send's claim failed because the attempt's fence epoch is gone from the phone,
    which is still the phone this handle read first (its identity, read at once): the fence
    folder was cleared (``rm -rf /data/local/tmp/*``). The script claimed nothing and ran
    nothing, so nothing was sent; the attempt failed for want of the phone's current epoch,
    not for anything about the message (ask :func:`~android_bridge.ensure_epoch` again). A
    claim refused by another phone at the address is :class:`DeviceUnusable` instead."""


class PhoneNotReady(CommandRejected):
    """The phone is not ready for a send, as the send script's checks before the first key
    found it: the keyguard showing, the screen off, no default SMS app or another one than
    configured, another window in focus. Nothing was sent; a person must act on the phone.

    ``reason`` names the failed check (``keyguard_showing``, ``screen_off``,
    ``no_default_sms_app``, ``not_default_sms_app``, ``focus_lost``); ``remedy`` says what
    to do, in a sentence."""

    def __init__(self, message: str, *, reason: str, remedy: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.remedy = remedy


class OutcomeUnknown(BridgeError):
    """The command may have reached the phone, but its outcome was not observed."""


class ReadFailed(BridgeError):
    """A read of the phone that proves nothing; never evidence of absence."""


class ProviderError(ReadFailed):
    """The content provider refused the query or failed while answering it."""


class UnparseableOutput(ReadFailed):
    """The phone's output could not be parsed exactly, so it was refused."""


class IncompleteRead(ReadFailed):
    """The output was truncated, or the data changed between the queries of one read."""


class KeyPermissionError(BridgeError):
    """The ADB private key (or its directory) has permissions looser than the owner's."""


class KeyFileError(KeyPermissionError):
    """The ADB private key file cannot be used: not a regular file, unreadable, or not an
    unencrypted RSA private key in PEM form. (A ``KeyPermissionError``, so every caller that
    stops on a key it must not use stops on this one too.)"""
