"""One checked assumption (:class:`Check`) and its verdict, shared by doctor's modules."""

from __future__ import annotations

from typing import Literal, Protocol

import attrs

__all__ = ["Check", "CheckMaker", "Verdict", "checker"]

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


class CheckMaker(Protocol):
    """Makes one check's result from its verdict, evidence and consequence."""

    def __call__(self, verdict: Verdict, evidence: str, consequence: str) -> Check: ...


def checker(*, name: str, title: str, source: str) -> CheckMaker:
    """The maker of one check's results: its name, title and source are fixed, each result
    brings its ``verdict``, ``evidence`` and ``consequence``."""

    def made(verdict: Verdict, evidence: str, consequence: str) -> Check:
        return Check(
            name=name,
            title=title,
            verdict=verdict,
            evidence=evidence,
            source=source,
            consequence=consequence,
        )

    return made
