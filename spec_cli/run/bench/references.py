"""Bench's references: proposers that draft from the target alone's text,
to measure against (never a user's choice).  "oracle" drafts that text
itself, perfect drafts at no cost (the ceiling); "ngram-oracle" the
lookup's own drafts cut to it (the lookup with perfect timing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ...core.tokens import common_prefix
from ..proposers.base import Candidate, DraftsAlone, Proposal, flat_prior
from ..suffix import Lookup

if TYPE_CHECKING:
    from ...core.config import Decoding

NAMES = ("oracle", "ngram-oracle")


class Oracle(DraftsAlone):
    """Bench's ceiling: drafts the tokens the target alone wrote for the
    same prompt -- perfect drafts at no cost -- with lengths chosen by the
    cost model as for any proposer.  Drafts nothing once the output has
    parted from that reference."""

    name = "oracle"
    cost_prior: dict[str, float] = {}
    acceptance_prior = staticmethod(flat_prior(1.0))

    def __init__(self, reference: Sequence[int]):
        self.reference = list(reference)
        self._prompt_len = 0

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        self._prompt_len = len(prompt)

    def ahead(self, context: Sequence[int]) -> list[int]:
        """The reference's tokens after `context`; none once the output has
        parted from it."""
        done = len(context) - self._prompt_len
        if context[self._prompt_len:] != self.reference[:done]:
            return []
        return self.reference[done:]

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        ahead = self.ahead(context)
        return [Candidate(self.name, len(ahead))] if ahead else []

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        done = len(context) - self._prompt_len
        return Proposal(self.reference[done:done + k], None, self.name)


class TimedLookup(DraftsAlone):
    """Bench's second reference ("ngram-oracle"): the lookup's own drafts,
    each cut where the target alone's text (`reference`) parts from it and
    offered as sure, so the cost model drafts exactly what will be accepted
    whenever that pays.  Its gain over the lookup's is what better timing
    could still win; the oracle's over it, what better drafts could."""

    name = "ngram-oracle"
    cost_prior: dict[str, float] = {}
    acceptance_prior = staticmethod(flat_prior(1.0))

    def __init__(self, reference: Sequence[int]):
        self.reference = Oracle(reference)
        self.lookup = Lookup()
        self._pick: tuple[Candidate, int] | None = None

    def prepare(self, prompt: Sequence[int], decoding=None) -> None:
        self.reference.prepare(prompt)
        self.lookup.prepare(prompt)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        self._pick = None
        ahead = self.reference.ahead(context)
        if not ahead:
            return []  # parted from the reference (a near-tie), or at its end: nothing to measure
        for cand in self.lookup.candidates(context):
            n = common_prefix(self.lookup.peek(context, cand, cand.limit), ahead)
            if n and (self._pick is None or n > self._pick[1]):
                self._pick = (cand, n)
        return [Candidate(self.name, self._pick[1])] if self._pick else []

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        chosen, n = self._pick
        prop = self.lookup.draft(context, chosen, min(k, n))  # the lookup's copies and edits go on as its own
        return Proposal(prop.tokens, None, self.name)
