"""Messaging app profiles: what each app does with a SENDTO intent and the send key.

A profile is one bundle of behaviours that decide what really leaves the phone and what
lands in the SMS provider: which activity handles ``SENDTO``, whether a second ``SENDTO``
lands in the app's open task (so the new extras are dropped), RCS chat, conversion to MMS,
and changes to the text. ``aosp`` is read from AOSP Messaging (``packages/apps/Messaging``,
as in the LineageOS mirror of it, branch lineage-21.0); Google Messages and Samsung Messages
are closed source, so their values are documented assumptions, each chosen to be no kinder
to the product than a real app could be. Switch one behaviour with ``attrs.evolve``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Final, Literal

import attrs

Channel = Literal["sms", "mms", "rcs"]

#: GSM 03.38 default alphabet (one septet each); ESC (0x1B) introduces the extension table.
_GSM_BASIC: Final = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
#: GSM 03.38 extension table (two septets each: ESC and the character).
_GSM_EXTENSION: Final = frozenset("\f^{}\\[~]|€")
_NON_DIGITS: Final = re.compile(r"[^0-9]")


def sms_segments(text: str) -> int:
    """How many SMS a text needs, as ``SmsMessage.calculateLength`` counts them.

    GSM 7-bit: 160 septets in one message, 153 per part when split (extension characters
    take two); any other character makes the whole text UCS-2: 70 code units, 67 per part
    (frameworks/base ``SmsMessage``/``GsmAlphabet``, android-10.0.0_r1 to 15; national
    language shift tables are off by default and not modelled).
    """
    if all(char in _GSM_BASIC or char in _GSM_EXTENSION for char in text):
        units = sum(2 if char in _GSM_EXTENSION else 1 for char in text)
        single, part = 160, 153
    else:
        units = len(text.encode("utf-16-le")) // 2
        single, part = 70, 67
    if units <= single:
        return 1
    return -(-units // part)


def simple_characters(text: str) -> str:
    """Google Messages' "Use simple characters": accents and other marks are stripped.

    Closed source; modelled as Unicode decomposition with every combining mark dropped
    (``é`` -> ``e``), which is what the setting's description promises.
    """
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(char for char in decomposed if not unicodedata.combining(char))
    return unicodedata.normalize("NFC", stripped)


@attrs.frozen(kw_only=True)
class MessagingAppProfile:
    """One messaging app's behaviours that matter to a sender over ADB."""

    #: Short name (``aosp``, ``google``, ``samsung``).
    name: str
    #: The app's package; also the ``creator`` of the rows it writes.
    package: str
    #: The activity that handles ``SENDTO smsto:``, as ``am start -n`` would name it.
    sendto_activity: str
    #: The activity that shows the compose window: what ``am start -W`` prints as ``Activity:``.
    compose_activity: str
    #: A ``SENDTO`` equal (``Intent.filterEquals``) to the one that opened the app's task lands
    #: in that task: Android brings the task to the front and drops the new intent, extras and
    #: all (``ActivityStarter``), so the compose window keeps its old draft. False when the app
    #: starts a fresh task for each ``SENDTO`` (AOSP: ``documentLaunchMode="always"``).
    sendto_reuses_task: bool
    #: The app closes the compose window after sending on ``--ez exit_on_sent true``.
    exit_on_sent: bool
    #: The app sends RCS chat to recipients reachable by RCS; no row goes to ``content://sms``.
    rcs: bool
    #: A message to several recipients goes as one group MMS.
    group_mms: bool
    #: The app reads a ``subject`` extra; a message with a subject goes as MMS.
    subject_extra: bool
    #: A text needing more than this many SMS goes as MMS; None: length never converts.
    mms_after_segments: int | None
    #: "Use simple characters": accents stripped from SMS text.
    simple_characters: bool
    #: Whitespace around the text is trimmed before sending.
    trim_whitespace: bool
    #: ENTER in the text field sends (an "Enter is send" setting); False: it types a newline.
    enter_sends: bool
    #: Key codes that send from a freshly opened compose window (DPAD_RIGHT to the send
    #: button, then ENTER on it).
    send_keys: tuple[int, ...] = (22, 66)
    #: The app writes its telephony row SENT (type 2; an MMS in the sent box) *before* the
    #: radio has sent anything, keeps it SENT while it sends, resends or waits to retry, and
    #: rewrites it FAILED (5) only on a final failure. AOSP Messaging does
    #: (``InsertNewMessageAction.insertSendingSmsMessage`` inserts MESSAGE_TYPE_SENT;
    #: ``SendMessageAction.updateMessageAndStatus``: "optimistically setting the type/box of
    #: outgoing messages to 'SENT' even before they actually are"; packages/apps/Messaging
    #: android-10.0.0_r30 to android-15.0.0_r1). A message it gives up on while waiting for
    #: service, or one it was sending when it was killed, is marked failed in its own
    #: database only: its row stays SENT for good (``ProcessPendingMessagesAction``,
    #: ``FixupMessageStatusOnStartupAction``). False: the row is written OUTBOX (4) and
    #: moved to SENT once the radio sent it (kinder than any app known: for tests only).
    optimistic_sent: bool = True
    #: A text to several recipients sent as SMS (group MMS off) writes, besides one row per
    #: recipient in that recipient's own conversation, a summary row first: type 2 SENT,
    #: ``address`` every recipient joined by a space, the text, dated 1 ms after the others,
    #: ``status`` 0 (COMPLETE), in the group's conversation, written SENT at once whatever
    #: the radio then does with the real messages. AOSP Messaging does
    #: (``InsertNewMessageAction.executeAction``: "Broadcast SMS - put message in 'fake
    #: conversation' before farming out to real 1:1", ``insertBroadcastSmsMessage``; read
    #: in LineageOS's copy of packages/apps/Messaging, lineage-17.1 to lineage-22.0, i.e.
    #: Android 10 to 15, the same text in each: the AOSP repository could not be fetched
    #: here). Assumed for the closed apps too: a row that says SENT for a message that may
    #: have failed is never kinder.
    broadcast_summary_row: bool = True
    #: How the app writes the inbox row of an SMS it receives (SMS_DELIVER): True as AOSP
    #: Messaging does (``ReceiveSmsMessageAction.executeAction``: ``seen`` 1 "incoming
    #: messages are marked as seen in the telephony db", ``read`` 1 when the sender's
    #: conversation is the one open on screen; ``error_code`` -1 from
    #: ``MmsUtils.parseReceivedSmsMessage``, as no ``errorCode`` extra comes with the
    #: intent; LineageOS's copy of packages/apps/Messaging, lineage-22.0). False: the
    #: values the framework itself would write (``InboundSmsHandler.parseSmsMessage``,
    #: frameworks/opt/telephony android-10.0.0_r46 and 11.0.0_r46): ``read`` 0, ``seen`` 0
    #: and no ``error_code`` (the column's default), the closed apps' own code being
    #: unreadable; an unseen, unread row is never kinder to a reader of replies.
    inbox_as_aosp_messaging: bool = False

    @property
    def sendto_component(self) -> tuple[str, str]:
        """``sendto_activity`` as (package, fully qualified class)."""
        return split_component(self.sendto_activity)

    def alter_text(self, body: str, channel: Channel) -> str:
        """The text the app really sends for ``body`` on ``channel``."""
        if self.trim_whitespace:
            body = body.strip()
        if self.simple_characters and channel != "rcs":
            body = simple_characters(body)
        return body

    def channel_for(
        self,
        addresses: tuple[str, ...],
        body: str,
        subject: str,
        rcs_reachable: Callable[[str], bool],
    ) -> Channel:
        """The channel the app picks: RCS when every recipient has it, else MMS or SMS.

        AOSP: ``DraftMessageData.getIsMms`` (group with group MMS on, a subject, or a text
        over ``smsToMmsTextThreshold`` segments means MMS).
        """
        if self.rcs and addresses and all(rcs_reachable(address) for address in addresses):
            return "rcs"
        if subject and self.subject_extra:
            return "mms"
        if len(addresses) > 1 and self.group_mms:
            return "mms"
        text = self.alter_text(body, "sms")
        if self.mms_after_segments is not None and sms_segments(text) > self.mms_after_segments:
            return "mms"
        return "sms"


def split_component(component: str) -> tuple[str, str]:
    """``pkg/.Cls`` or ``pkg/full.Cls`` as (package, fully qualified class)."""
    package, _, cls = component.partition("/")
    if cls.startswith("."):
        cls = package + cls
    return package, cls


#: AOSP Messaging (packages/apps/Messaging). ``LaunchConversationActivity`` handles SENDTO,
#: is ``documentLaunchMode="always"`` and restarts ``ConversationActivity`` through a
#: ``TaskStackBuilder`` (which clears the task), so each SENDTO opens a fresh compose window
#: with the new draft (``AndroidManifest.xml``, ``UIIntentsImpl``); it reads ``sms_body``,
#: ``address``, ``EXTRA_EMAIL`` and, for text/plain, ``EXTRA_TEXT``, but no subject and no
#: ``exit_on_sent`` (``LaunchConversationActivity``). Group MMS is on by default
#: (``group_mms_pref_default``); ``smsToMmsTextThreshold`` is -1 in ``mms_config.xml`` (a
#: carrier config may set one). The text is sent as typed (``ComposeMessageView`` only uses
#: the trimmed length to enable the send button). No RCS.
AOSP_MESSAGING: Final = MessagingAppProfile(
    name="aosp",
    package="com.android.messaging",
    inbox_as_aosp_messaging=True,
    sendto_activity="com.android.messaging/.ui.conversation.LaunchConversationActivity",
    compose_activity="com.android.messaging/.ui.conversation.ConversationActivity",
    sendto_reuses_task=False,
    exit_on_sent=False,
    rcs=False,
    group_mms=True,
    subject_extra=False,
    mms_after_segments=None,
    simple_characters=False,
    trim_whitespace=False,
    enter_sends=False,
)

#: Google Messages (closed source). Assumed, none kinder than the app could be: the AOSP
#: activity names it descends from; its row written SENT before the send, as AOSP
#: Messaging's (``optimistic_sent``); SENDTO lands in the open task (Android's task reuse, no
#: document mode); no ``exit_on_sent``; RCS chat to reachable recipients; group MMS; the
#: ``subject`` extra read; MMS past 3 segments (a carrier-config value); whitespace trimmed.
#: "Use simple characters" is off by default in the app's settings.
GOOGLE_MESSAGES: Final = MessagingAppProfile(
    name="google",
    package="com.google.android.apps.messaging",
    sendto_activity="com.google.android.apps.messaging/.ui.conversation.LaunchConversationActivity",
    compose_activity="com.google.android.apps.messaging/.ui.conversation.ConversationActivity",
    sendto_reuses_task=True,
    exit_on_sent=False,
    rcs=True,
    group_mms=True,
    subject_extra=True,
    mms_after_segments=3,
    simple_characters=False,
    trim_whitespace=True,
    enter_sends=False,
)

#: Samsung Messages (closed source). Assumed as for Google Messages: the row written SENT
#: before the send; SENDTO lands in the open task; Samsung "Chat" (RCS); group MMS; subject
#: read; MMS past 3 segments; whitespace trimmed; the compose activity named as in Samsung's
#: ``com.android.mms`` heritage.
SAMSUNG_MESSAGES: Final = MessagingAppProfile(
    name="samsung",
    package="com.samsung.android.messaging",
    sendto_activity="com.samsung.android.messaging/com.android.mms.ui.ConversationComposer",
    compose_activity="com.samsung.android.messaging/com.android.mms.ui.ConversationComposer",
    sendto_reuses_task=True,
    exit_on_sent=False,
    rcs=True,
    group_mms=True,
    subject_extra=True,
    mms_after_segments=3,
    simple_characters=False,
    trim_whitespace=True,
    enter_sends=False,
)

#: Every profile by name; the phone's default is Google Messages.
APP_PROFILES: Final = {
    profile.name: profile for profile in (AOSP_MESSAGING, GOOGLE_MESSAGES, SAMSUNG_MESSAGES)
}
DEFAULT_APP: Final = "google"


def app_profile(app: str | MessagingAppProfile) -> MessagingAppProfile:
    """The profile named ``app`` (or ``app`` itself).

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if isinstance(app, MessagingAppProfile):
        return app
    profile = APP_PROFILES.get(app)
    if profile is None:
        raise ValueError(f"unknown messaging app {app!r}; choose one of {', '.join(APP_PROFILES)}")
    return profile


def second_app_for(app: MessagingAppProfile) -> MessagingAppProfile:
    """The other SMS app installed with ``--second-sms-app``: AOSP Messaging, or Google
    Messages when the default already is AOSP Messaging."""
    return GOOGLE_MESSAGES if app.package == AOSP_MESSAGING.package else AOSP_MESSAGING


def phone_digits(address: str) -> str:
    """The digits of a phone number, for comparing recipients."""
    return _NON_DIGITS.sub("", address)


class RcsDirectory:
    """Which recipients are reachable by RCS chat: a set of numbers, or everyone."""

    def __init__(self, recipients: Iterable[str] | Literal["all"] = ()) -> None:
        self.everyone = recipients == "all"
        self._digits = set() if recipients == "all" else {phone_digits(r) for r in recipients}

    def add(self, number: str) -> None:
        """Make ``number`` reachable by RCS from now on."""
        self._digits.add(phone_digits(number))

    def __call__(self, address: str) -> bool:
        """Whether ``address`` is reachable by RCS."""
        return self.everyone or phone_digits(address) in self._digits


@attrs.frozen(kw_only=True)
class Transmission:
    """One message that really left the phone, on whatever channel (test ground truth)."""

    #: ``sms``, ``mms`` or ``rcs``.
    channel: Channel
    #: Recipients as the app addressed them.
    addresses: tuple[str, ...]
    #: The text that went out (after the app's changes).
    body: str
    #: The provider row: ``content://sms`` ``_id`` or ``content://mms`` ``_id``; None for RCS.
    provider_id: int | None
    #: Device clock (ms) when it went out.
    time_ms: int
    #: The package that sent it.
    app: str
    #: Of a text of several SMS: how many of its parts went out, when not all did (the app's
    #: row then says FAILED: see ``Fault.SEND_FAILS``); None: the whole message.
    parts_out: int | None = None
