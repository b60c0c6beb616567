"""Proposers: what drafts the next tokens.

    propose(context, k) -> Proposal(tokens, probs or None)

`context` is every token so far (prompt and output); `k` the most tokens
wanted.  `probs` holds the draft distribution of each proposed token, row by
row, or is None for a point-mass draft (n-gram lookup).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from .backend import Model
from .sampling import SamplingConfig, probs as to_probs, sample


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    probs: np.ndarray | None  # (len(tokens), V) or None for a point mass
    seconds: float = 0.0


EMPTY = Proposal([], None)


class Proposer(Protocol):
    name: str

    def propose(self, context: Sequence[int], k: int) -> Proposal: ...


class NoDraft:
    """The target alone: the baseline, through the same loop."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return EMPTY


class DraftModel:
    """A small model of the same vocabulary drafts autoregressively.

    Its KV cache follows the accepted text by prefix: on each call the cache
    is cut back to what `context` shares with it and only the new tokens are
    evaluated, which also covers the fully-accepted case (the last draft
    token and the bonus token are fed before drafting again).
    """

    name = "draft"

    def __init__(self, model: Model, sampling: SamplingConfig, rng: np.random.Generator,
                 *, p_min: float = 0.0):
        self.model = model
        self.sampling = sampling
        self.rng = rng
        self.p_min = p_min  # stop drafting when the top draft probability falls below

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if k <= 0:
            return EMPTY
        t0 = time.perf_counter()
        room = self.model.n_ctx - len(context)
        k = min(k, room)
        if k <= 0:
            return EMPTY
        logits = self.model.sync(context)
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        for i in range(k):
            p = to_probs(logits, self.sampling)
            if self.p_min > 0.0 and i > 0 and confidence(logits, p, self.sampling) < self.p_min:
                break
            x = int(np.argmax(p)) if self.sampling.greedy else sample(p, self.rng)
            tokens.append(x)
            rows.append(p)
            if i + 1 < k:
                logits = self.model.decode([x], logits_from=0)[0]
        return Proposal(tokens, np.stack(rows), time.perf_counter() - t0)


class NGram:
    """Prompt lookup: find the latest n tokens earlier in the context and
    propose what followed them there.  Costs no model call.

    An index maps every n-gram (n = n_min..n_max) to the position after its
    latest occurrence; it grows with the context and is rebuilt if the
    context is rewritten (a new chat turn that edits history).
    """

    name = "ngram"

    def __init__(self, *, n_max: int = 4, n_min: int = 1):
        self.n_max, self.n_min = n_max, n_min
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _update(self, context: Sequence[int]) -> None:
        start = len(self._seen)
        if start > len(context) or list(context[:start]) != self._seen:
            self._seen, self._index, start = [], {}, 0
        # index n-grams that end at positions < len(context) - 1: the final
        # n-gram of the context is the query, never its own match
        self._seen.extend(context[start:])
        lo = max(start - 1, 0)
        for end in range(lo, len(context) - 1):
            for n in range(self.n_min, self.n_max + 1):
                if end + 1 >= n:
                    self._index[tuple(context[end + 1 - n:end + 1])] = end + 1

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        if k <= 0 or len(context) < 2:
            return EMPTY
        t0 = time.perf_counter()
        self._update(context)
        for n in range(min(self.n_max, len(context) - 1), self.n_min - 1, -1):
            nxt = self._index.get(tuple(context[-n:]))
            if nxt is not None:
                tokens = list(context[nxt:nxt + k])
                if tokens:
                    return Proposal(tokens, None, time.perf_counter() - t0)
        return Proposal([], None, time.perf_counter() - t0)


def confidence(logits: np.ndarray, p: np.ndarray, sampling: SamplingConfig) -> float:
    """The draft's top probability; under greedy decoding (where p is one-hot)
    it is read from the softmax of the raw logits."""
    if not sampling.greedy:
        return float(p.max())
    z = logits.astype(np.float64)
    m = z.max()
    return float(1.0 / np.exp(z - m).sum())
