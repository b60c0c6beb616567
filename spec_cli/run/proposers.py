"""Proposers: what drafts the next tokens.  They know nothing of the cost
model: each step the engine asks what they could draft, the policy chooses
one candidate and how far (once, in one place), and the chosen proposer
drafts up to that many tokens.

    candidates(context) -> [Candidate(source, limit, setup_s)]
    draft(context, candidate, k, keep_going) -> Proposal(tokens, probs or None)

`context` is every token so far (prompt and output).  `source` names what
the policy learns acceptance for ("draft", "ngram1".."ngram8" by match
length, "oracle").  `probs` holds the draft distribution of each proposed
token, row by row, or is None for a point mass (n-gram lookup, greedy and
Gumbel-coupled drafts).  `keep_going(confidences so far)` lets a draft
model stop early where it is unsure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..llama.backend import Model, common_prefix
from ..core.sampling import SamplingConfig, choose_from_probs, probs as to_probs, sample


@dataclass(frozen=True)
class Candidate:
    """What a proposer could draft now, for the policy to weigh."""

    source: str
    limit: int             # the most tokens it can draft here
    setup_s: float = 0.0   # a one-time cost before drafting (a draft model's catch-up)


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    probs: np.ndarray | None = None  # (len(tokens), V) or None for a point mass
    source: str = "none"
    # seconds a proposer pays per step when it drafts every step (a draft
    # model catching up on many tokens after a pause costs more, once)
    steady_s: float | None = None


EMPTY = Proposal([])
KeepGoing = Callable[[list[float]], bool]


class Proposer(Protocol):
    name: str
    cost_prior: dict[str, float]  # seconds per draft token, by source, before any is measured

    def prepare(self, prompt: Sequence[int]) -> None:
        """A new generation starts after `prompt`."""

    def candidates(self, context: Sequence[int]) -> list[Candidate]: ...

    def draft(self, context: Sequence[int], cand: Candidate, k: int,
              keep_going: KeepGoing | None = None) -> Proposal: ...


class NoDraft:
    """The target alone: the baseline, through the same loop."""

    name = "none"
    cost_prior: dict[str, float] = {}

    def prepare(self, prompt: Sequence[int]) -> None:
        pass

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        return []

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        return EMPTY


class DraftModel:
    """A small model of the same vocabulary drafts autoregressively.

    It reads the prompt only when it is first asked to draft (a draft the
    cost model never chooses never costs a prefill); the policy is told
    what that catch-up costs before it chooses.  Its KV cache then follows
    the accepted text by prefix: on each call the cache is cut back to what
    `context` shares with it and only the new tokens are evaluated, which
    also covers the fully-accepted case (the last draft token and the bonus
    token are fed before drafting again).

    Rules: "gumbel" drafts each output position's Gumbel-max choice with the
    same noise the target uses (seed, position, token), so a draft token is
    accepted when it is the target's own choice; "residual" samples from the
    draft's distribution with `rng` and returns its rows for the residual
    rule.
    """

    name = "draft"

    def __init__(self, model: Model, sampling: SamplingConfig, rng: np.random.Generator,
                 *, p_min: float = 0.0, rule: str = "gumbel", seed: int = 0):
        self.model = model
        self.sampling = sampling
        self.rng = rng
        self.p_min = p_min  # stop drafting when the top draft probability falls below
        self.rule, self.seed = rule, seed
        self._prompt_len = self._behind = 0

    @property
    def cost_prior(self) -> dict[str, float]:
        """Seconds per draft token, from the model's load-time probe."""
        from ..llama.probe import ensure
        return {self.name: ensure(self.model)[1]}

    def catch_up_s(self, tokens: int) -> float:
        """What reading `tokens` new tokens costs the draft model (in
        batches, at the probe's widest batch's cost per token)."""
        if tokens <= 2:
            return 0.0  # the usual step: the last accepted tokens
        from ..llama.probe import ensure
        curve = ensure(self.model)
        widest = max(curve)
        return tokens * curve[widest] / widest

    def prepare(self, prompt: Sequence[int]) -> None:
        self._prompt_len = len(prompt)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        self._behind = len(context) - common_prefix(self.model.tokens, context)  # draft() reuses it
        return [Candidate(self.name, self.model.n_ctx - len(context), self.catch_up_s(self._behind))]

    def draft(self, context: Sequence[int], cand: Candidate, k: int,
              keep_going: KeepGoing | None = None) -> Proposal:
        t0 = time.perf_counter()
        behind = self._behind  # this step's, from candidates()
        logits = self.model.catch_up(context, logits_last=True)
        t_sync = time.perf_counter() - t0
        pos = len(context) - self._prompt_len  # output position of the first draft token
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        chain: list[float] = []
        for i in range(k):
            p = None if self.sampling.greedy else to_probs(logits, self.sampling)
            if p is None:
                x = int(np.argmax(logits))
            elif self.rule == "gumbel":
                x = choose_from_probs(p, self.seed, pos + i)
            else:
                x = sample(p, self.rng)
                rows.append(p)
            tokens.append(x)
            if i + 1 == k:
                break
            if self.p_min > 0.0 or keep_going is not None:
                conf = confidence(logits, p, self.sampling)
                chain.append(conf)
                if conf < self.p_min or (keep_going is not None and not keep_going(chain)):
                    break
            logits = self.model.decode([x], logits_from=0)[0]
        seconds = time.perf_counter() - t0
        # a step normally feeds the draft 1-2 new tokens; a longer catch-up
        # is charged as that much, not as the draft's usual cost
        steady = seconds if behind <= 2 else seconds - t_sync * (1 - 2 / behind)
        return Proposal(tokens, np.stack(rows) if rows else None, self.name, steady)


class Oracle:
    """Bench's ceiling: drafts the tokens the target alone wrote for the
    same prompt -- perfect drafts at no cost -- with lengths chosen by the
    cost model as for any proposer.  Drafts nothing once the output has
    parted from that reference."""

    name = "oracle"
    cost_prior: dict[str, float] = {}

    def __init__(self, reference: Sequence[int]):
        self.reference = list(reference)
        self._prompt_len = 0

    def prepare(self, prompt: Sequence[int]) -> None:
        self._prompt_len = len(prompt)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        done = len(context) - self._prompt_len
        if done >= len(self.reference) or context[self._prompt_len:] != self.reference[:done]:
            return []
        return [Candidate(self.name, len(self.reference) - done)]

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        done = len(context) - self._prompt_len
        return Proposal(self.reference[done:done + k], None, self.name)


class NGram:
    """Prompt lookup: find the latest n tokens earlier in the context and
    propose what followed them there.  Costs no model call.

    An index maps every n-gram (n = n_min..n_max) to the position after its
    latest occurrence; it grows with the context and is rebuilt if the
    context is rewritten (a new chat turn that edits history).  With a
    `history` (a server's earlier outputs, history.History) it looks there
    too, and offers both to the policy, which learns their acceptance
    apart ("ngramN" and "histN", by match length).
    """

    name = "ngram"
    cost_prior: dict[str, float] = {}

    def __init__(self, *, n_max: int = 4, n_min: int = 1, history=None):
        self.n_max, self.n_min = n_max, n_min
        self.history = history
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self._found: dict[str, tuple[Sequence[int], int]] = {}  # source -> (tokens, where its draft starts)

    def _update(self, context: Sequence[int]) -> None:
        start = len(self._seen)
        # the context still extends what was indexed (checked at its end: a
        # rewritten history only costs drafts, never correctness)
        if start > len(context) or (start and context[start - 1] != self._seen[-1]):
            self._seen, self._index, start = [], {}, 0
        # index n-grams that end at positions < len(context) - 1: the final
        # n-gram of the context is the query, never its own match
        self._seen.extend(context[start:])
        lo = max(start - 1, 0)
        for end in range(lo, len(context) - 1):
            for n in range(self.n_min, self.n_max + 1):
                if end + 1 >= n:
                    self._index[tuple(context[end + 1 - n:end + 1])] = end + 1

    def prepare(self, prompt: Sequence[int]) -> None:
        self._update(prompt)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        if len(context) < 2:
            return []
        self._update(context)
        self._found = {}
        out = []
        for n in range(min(self.n_max, len(context) - 1), self.n_min - 1, -1):
            nxt = self._index.get(tuple(context[-n:]))
            if nxt is not None:
                # longer matches predict better: the cost model learns the
                # acceptance of each match length apart (ngram1..3, 4 = 4-7,
                # 8 = 8 or more tokens matching before the proposal)
                length = n
                while (length < 16 and nxt - length - 1 >= 0
                       and context[nxt - length - 1] == context[len(context) - length - 1]):
                    length += 1
                source = f"ngram{_bucket(length)}"
                self._found[source] = (context, nxt)
                out.append(Candidate(source, len(context) - nxt))
                break
        if self.history is not None:
            hit = self.history.lookup(context)
            if hit is not None:
                doc, nxt, length = hit
                source = f"hist{_bucket(length)}"
                self._found[source] = (doc, nxt)
                out.append(Candidate(source, len(doc) - nxt))
        return out

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        tokens, at = self._found[cand.source]
        return Proposal(list(tokens[at:at + k]), None, cand.source)


def _bucket(length: int) -> int:
    return length if length < 4 else 4 if length < 8 else 8


class Hybrid:
    """The free n-gram lookup and the draft model side by side: the policy
    picks whichever pays more this step (the lookup, where it matches)."""

    name = "hybrid"

    def __init__(self, ngram: NGram, draft: DraftModel):
        self.ngram, self.draft_model = ngram, draft

    @property
    def cost_prior(self) -> dict[str, float]:
        return self.draft_model.cost_prior

    def prepare(self, prompt: Sequence[int]) -> None:
        self.ngram.prepare(prompt)
        self.draft_model.prepare(prompt)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        return self.ngram.candidates(context) + self.draft_model.candidates(context)

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        chosen = self.draft_model if cand.source == self.draft_model.name else self.ngram
        return chosen.draft(context, cand, k, keep_going)


def confidence(logits: np.ndarray, p: np.ndarray | None, sampling: SamplingConfig) -> float:
    """The draft's top probability; under greedy decoding (where p is one-hot)
    it is read from the softmax of the raw logits."""
    if not sampling.greedy and p is not None:
        return float(p.max())
    m = logits.max()
    return float(1.0 / np.exp(logits - m, dtype=np.float32).sum(dtype=np.float64))
