"""The lookup proposer ("ngram"): drafts from the suffix index over the
prompt and the output, from the store of earlier outputs, from a text the
client predicts (OpenAI's Predicted Outputs: `predict`), and from copies."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ...core.source import Source
from ...core.tokens import common_prefix
from ..proposers.base import EMPTY, Candidate, DraftsAlone, Proposal
from .copy import MAX_COPIES, Copy, edit_before
from .index import DEPTH, SuffixIndex, bucket
from .priors import PREDICTION, lookup_prior
from .store import Store

ALPHA = 2.0        # most tokens offered per token of match
THRESHOLD = 0.3    # a continuation whose share falls below this ends the draft


@dataclass
class _Offer:
    index: SuffixIndex
    origin: str          # "prompt" | "output" | "hist"
    run: bool = False    # the copy (Copy) drafts, not a lookup
    matched: int = 0     # a lookup's match length


class Lookup(DraftsAlone):
    """The free proposer: the suffix index over this generation's context
    (prompt and output) and, given one, a `Store` of earlier outputs.  A
    lookup draft starts a `Copy`; while the output follows it, the copy
    drafts ("prompt-run"), its known edits applied."""

    name = "ngram"
    cost_prior: dict[str, float] = {}
    acceptance_prior = staticmethod(lookup_prior)

    def __init__(self, *, store: Store | None = None, depth: int = DEPTH, threshold: float = THRESHOLD,
                 alpha: float = ALPHA):
        self.store, self.threshold, self.alpha = store, threshold, alpha
        self.index = SuffixIndex(depth)
        self._prompt_len = 0
        self._offers: dict[str, _Offer] = {}
        self.copies: list[Copy] = []   # followed now, or waiting to resume after an edit
        self.copy: Copy | None = None  # the one that drafts this step
        self.edits: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}
        self.shares: list[float] = []  # the last draft's shares (the hybrid reads them)
        self.prediction: SuffixIndex | None = None  # the client's predicted answer ("prediction")
        self._predicted: list[int] = []

    def predict(self, tokens: Sequence[int]) -> None:
        """Draft from `tokens` too: what the client expects the answer to
        repeat (its origin "prediction"; copies of it follow as
        "prediction-run").  It is indexed after the prompt's last tokens,
        so that the answer's first tokens draft from its start."""
        self._predicted = list(tokens)

    def prepare(self, prompt: Sequence[int], decoding=None) -> None:
        self._prompt_len = len(prompt)
        if self._predicted:
            self.prediction = SuffixIndex(self.index.depth)
            self.prediction.extend([*prompt[-self.index.depth:], *self._predicted])
        self._sync(prompt)
        self.copy, self.copies, self.edits = None, [], {}

    def _sync(self, context: Sequence[int]) -> None:
        """Keep the index equal to the context; the usual step only appends.
        The check reads the last indexed token and the length: O(1)."""
        n = len(self.index)
        if n > len(context) or (n and context[n - 1] != self.index.tokens[n - 1]):
            self.index.truncate(common_prefix(self.index.tokens, context))
            self.copy, self.copies = None, []
        self.index.extend(context[len(self.index):])

    def _origin(self, pos: int) -> str:
        return "prompt" if pos < self._prompt_len else "output"

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        if len(context) < 2:
            return []
        self._sync(context)
        self._offers = {}
        out = []
        for c in self.copies:
            c.feed(context)
        self.copies = [c for c in self.copies if not c.lost][-MAX_COPIES:]
        running = [c for c in self.copies if c.aligned and c.pos < len(c.index.tokens)]
        self.copy = max(running, key=lambda c: (c.matched, c.origin == PREDICTION)) if running else None
        if self.copy is not None:
            # how long the output has followed the copy says how far it will: learned apart
            source = Source(self.copy.origin, "patch" if self.copy.patchy else "run", bucket(self.copy.matched))
            self._offers[source] = _Offer(self.copy.index, self.copy.origin, run=True)
            out.append(Candidate(source, max(1, math.ceil(self.alpha * self.copy.matched))))
        # the client's prediction first: where no cost model chooses (a fixed draft
        # length), the first candidate drafts
        sources = ([(self.prediction, PREDICTION)] if self.prediction is not None else []) + (
            [] if self.copy else [(self.index, None)]) + (
            [(self.store.index, "hist")] if self.store is not None else [])
        for index, origin in sources:
            n, key = index.match(context)
            if n == 0:
                continue
            origin = origin or self._origin(index.last[key])
            seen = sum(index.next[key].values())  # how often the context occurred
            source = Source(origin, "" if seen == 1 else "multi", bucket(n))
            self._offers[source] = _Offer(index, origin, matched=n)
            out.append(Candidate(source, max(1, math.ceil(self.alpha * n))))
        return out

    def peek(self, context: Sequence[int], cand: Candidate, k: int) -> list[int]:
        """What `draft` would propose for `cand`, changing nothing."""
        offer = self._offers[cand.source]
        return self.copy.draft(k) if offer.run else offer.index.follow(context, k, self.threshold)[0]

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        offer = self._offers[cand.source]
        if offer.run:
            tokens = self.copy.draft(k)
            self.shares = [1.0] * len(tokens)
        else:
            tokens, self.shares, where = offer.index.follow(context, k, self.threshold)
            if keep_going is not None:
                for i in range(1, len(tokens)):
                    if not keep_going(self.shares[:i]):
                        del tokens[i:], self.shares[i:], where[i:]
                        break
            # a lookup that copies its match's latest occurrence starts a copy there
            # (beside those that wait to resume after an edit)
            if tokens and where[0] > 0:
                self.copies.append(Copy(offer.index, offer.origin, where[0] - 1, len(context), self.edits,
                                        offer.matched))
                edit_before(offer.index.tokens, where[0] - 1 - offer.matched, context,
                             len(context) - offer.matched, self.edits)
            if tokens and offer.origin == "hist" and self.store is not None and where[0] > 0:
                self.store.touch(where[0] - 1)
        return Proposal(tokens, None, cand.source) if tokens else EMPTY
