"""A simulated Android phone that speaks the real ADB protocol over loopback TCP.

Test and demo code only: production bridge code never imports this package.
"""

from __future__ import annotations

from android_bridge.simulator._faults import Fault, parse_fault
from android_bridge.simulator._phone import SimulatedPhone
from android_bridge.simulator._store import SmsRow, SmsStore

__all__ = ["Fault", "SimulatedPhone", "SmsRow", "SmsStore", "parse_fault"]
