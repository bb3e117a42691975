"""A small, honest Android SMS library over adb-shell.

Public names are imported lazily (``_EXPORTS``): importing one module of the bridge
(``android_bridge.recipients``, say) does not load adb-shell and the cryptography it needs.
"""

from __future__ import annotations

import typing as _typing

from android_bridge._lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from android_bridge._device import Device, DeviceFacts
    from android_bridge._dispatcher import MessagingApp, SmsDispatcher
    from android_bridge._fence import (
        FENCE_ROOT,
        Epoch,
        FenceLedgers,
        FenceReport,
        FenceState,
        ensure_epoch,
        forget_ledger_marks,
        list_fences,
        read_ledgers,
        remove_fences,
    )
    from android_bridge._fence import peek as peek_fences
    from android_bridge._fence import void as void_fences
    from android_bridge._framework import (
        SEND_TEXT_CODES,
        FrameworkDispatcher,
        probe_framework_send,
    )
    from android_bridge._keys import KEY_PATH_ENV, default_key_path, ensure_key
    from android_bridge._matching import MatchResult, message_matches_intent, normalize_body
    from android_bridge._parser import parse_int_rows, parse_text_column
    from android_bridge._reader import SmsReader
    from android_bridge._records import (
        OUTGOING_TYPES,
        DispatchEvidence,
        MessageType,
        ProviderRead,
        SmsMessage,
    )
    from android_bridge._shell import posix_quote
    from android_bridge.exceptions import (
        BridgeError,
        CommandRejected,
        DeviceUnreachable,
        DeviceUnusable,
        FenceLost,
        IncompleteRead,
        KeyFileError,
        KeyPermissionError,
        NotSent,
        OutcomeUnknown,
        PhoneNotReady,
        ProviderError,
        ReadFailed,
        UnparseableOutput,
    )
    from android_bridge.recipients import NormalizedRecipient, normalize_recipient

#: Where each public name is defined (``module`` or ``module:attribute``). A name is imported
#: on first use, so that importing one submodule (the command line, say) loads only what it
#: needs; ``from android_bridge import X`` works as with eager imports.
_EXPORTS: dict[str, str] = {
    "Device": "android_bridge._device",
    "DeviceFacts": "android_bridge._device",
    "MessagingApp": "android_bridge._dispatcher",
    "SmsDispatcher": "android_bridge._dispatcher",
    "Epoch": "android_bridge._fence",
    "FENCE_ROOT": "android_bridge._fence",
    "FenceLedgers": "android_bridge._fence",
    "FenceReport": "android_bridge._fence",
    "FenceState": "android_bridge._fence",
    "ensure_epoch": "android_bridge._fence",
    "forget_ledger_marks": "android_bridge._fence",
    "list_fences": "android_bridge._fence",
    "read_ledgers": "android_bridge._fence",
    "peek_fences": "android_bridge._fence:peek",
    "remove_fences": "android_bridge._fence",
    "void_fences": "android_bridge._fence:void",
    "FrameworkDispatcher": "android_bridge._framework",
    "SEND_TEXT_CODES": "android_bridge._framework",
    "probe_framework_send": "android_bridge._framework",
    "KEY_PATH_ENV": "android_bridge._keys",
    "default_key_path": "android_bridge._keys",
    "ensure_key": "android_bridge._keys",
    "MatchResult": "android_bridge._matching",
    "message_matches_intent": "android_bridge._matching",
    "normalize_body": "android_bridge._matching",
    "parse_int_rows": "android_bridge._parser",
    "parse_text_column": "android_bridge._parser",
    "SmsReader": "android_bridge._reader",
    "DispatchEvidence": "android_bridge._records",
    "MessageType": "android_bridge._records",
    "OUTGOING_TYPES": "android_bridge._records",
    "ProviderRead": "android_bridge._records",
    "SmsMessage": "android_bridge._records",
    "posix_quote": "android_bridge._shell",
    "BridgeError": "android_bridge.exceptions",
    "CommandRejected": "android_bridge.exceptions",
    "DeviceUnreachable": "android_bridge.exceptions",
    "IncompleteRead": "android_bridge.exceptions",
    "KeyFileError": "android_bridge.exceptions",
    "KeyPermissionError": "android_bridge.exceptions",
    "NotSent": "android_bridge.exceptions",
    "OutcomeUnknown": "android_bridge.exceptions",
    "PhoneNotReady": "android_bridge.exceptions",
    "ProviderError": "android_bridge.exceptions",
    "ReadFailed": "android_bridge.exceptions",
    "UnparseableOutput": "android_bridge.exceptions",
    "DeviceUnusable": "android_bridge.exceptions",
    "FenceLost": "android_bridge.exceptions",
    "NormalizedRecipient": "android_bridge.recipients",
    "normalize_recipient": "android_bridge.recipients",
}

__all__ = [
    "FENCE_ROOT",
    "KEY_PATH_ENV",
    "OUTGOING_TYPES",
    "SEND_TEXT_CODES",
    "BridgeError",
    "CommandRejected",
    "Device",
    "DeviceFacts",
    "DeviceUnreachable",
    "DeviceUnusable",
    "DispatchEvidence",
    "Epoch",
    "FenceLedgers",
    "FenceLost",
    "FenceReport",
    "FenceState",
    "FrameworkDispatcher",
    "IncompleteRead",
    "KeyFileError",
    "KeyPermissionError",
    "MatchResult",
    "MessageType",
    "MessagingApp",
    "NormalizedRecipient",
    "NotSent",
    "OutcomeUnknown",
    "PhoneNotReady",
    "ProviderError",
    "ProviderRead",
    "ReadFailed",
    "SmsDispatcher",
    "SmsMessage",
    "SmsReader",
    "UnparseableOutput",
    "default_key_path",
    "ensure_epoch",
    "ensure_key",
    "forget_ledger_marks",
    "list_fences",
    "message_matches_intent",
    "normalize_body",
    "normalize_recipient",
    "parse_int_rows",
    "parse_text_column",
    "peek_fences",
    "posix_quote",
    "probe_framework_send",
    "read_ledgers",
    "remove_fences",
    "void_fences",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__, globals())
