"""One checked assumption (:class:`Check`) and its verdict, shared by doctor's modules."""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = ["Check", "Verdict"]

Verdict = Literal["ok", "warn", "fail"]


@attrs.frozen(kw_only=True)
class Check:
    """One assumption, checked on the phone."""

    #: a stable name (``shell-uid``, ``clock``…), what ``--json`` keys on
    name: str
    #: what is checked, in a few words
    title: str
    #: ``ok``: as the product assumes; ``warn``: it works, with the limit ``consequence``
    #: says; ``fail``: a send would not work, or its proof would not hold, until it is mended
    verdict: Verdict
    #: what the phone printed, in a line
    evidence: str
    #: the AOSP source the fact is compared with (file, and the tags it was read at)
    source: str
    #: what the product does because of it (and, when not ok, what to do)
    consequence: str
