"""The lookup timed against a reference text, for bench's oracle rows."""

from __future__ import annotations

from typing import Sequence

from ...llama.backend import common_prefix
from ..proposers import Candidate, Oracle, Proposal
from .lookup import Lookup


class TimedLookup:
    """Bench's second reference ("ngram-oracle"): the lookup's own drafts,
    each cut where the target alone's text (`reference`) parts from it and
    offered as sure, so the cost model drafts exactly what will be accepted
    whenever that pays.  Its gain over the lookup's is what better timing
    could still win; the oracle's over it, what better drafts could."""

    name = "ngram-oracle"
    cost_prior: dict[str, float] = {}

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
