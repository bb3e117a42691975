"""A small, honest Android SMS library over adb-shell."""

from __future__ import annotations

from android_bridge._device import Device, DeviceFacts
from android_bridge._dispatcher import MessagingApp, SmsDispatcher
from android_bridge._fence import (
    FENCE_ROOT,
    Epoch,
    FenceReport,
    FenceState,
    ensure_epoch,
    list_fences,
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
    IncompleteRead,
    KeyFileError,
    KeyPermissionError,
    NotSent,
    OutcomeUnknown,
    ProviderError,
    ReadFailed,
    UnparseableOutput,
)
from android_bridge.recipients import NormalizedRecipient, normalize_recipient

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
    "DispatchEvidence",
    "Epoch",
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
    "list_fences",
    "message_matches_intent",
    "normalize_body",
    "normalize_recipient",
    "parse_int_rows",
    "parse_text_column",
    "peek_fences",
    "posix_quote",
    "probe_framework_send",
    "remove_fences",
    "void_fences",
]
