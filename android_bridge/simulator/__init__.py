"""A simulated Android phone that speaks the real ADB protocol over loopback TCP.

Test and demo code only: production bridge code never imports this package.
"""

from __future__ import annotations

from android_bridge.simulator._apps import (
    APP_PROFILES,
    MessagingAppProfile,
    Transmission,
    app_profile,
)
from android_bridge.simulator._faults import Fault, parse_fault
from android_bridge.simulator._files import FileStat, FilesView
from android_bridge.simulator._phone import SimulatedPhone
from android_bridge.simulator._store import MmsMessage, SmsRow, SmsStore

__all__ = [
    "APP_PROFILES",
    "Fault",
    "FileStat",
    "FilesView",
    "MessagingAppProfile",
    "MmsMessage",
    "SimulatedPhone",
    "SmsRow",
    "SmsStore",
    "Transmission",
    "app_profile",
    "parse_fault",
]
