"""A small model of the same vocabulary drafts autoregressively ("draft").

`DraftModel` is the drafting loop: sampling, seed, rule, the early stop
and the cost it learns.  What it drafts *from* is a `Drafts` source: a
draft model's own context here (`ModelDrafts`), the target's own MTP block
in mtp.py (`HeadDrafts`).  A source answers five questions: what its cache
holds, the logits after a context (`start`), after one more token
(`then`), each with the seeded choice in one call where it can
(`start_choose`, `then_choose`), and what drafting costs it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol, Sequence

import numpy as np

from ...core.config import Decoding
from ...core.sampling import SamplingConfig, choose, probs as to_probs, sample
from ...core.tokens import common_prefix
from .base import Candidate, KeepGoing, Proposal, flat_prior

PRIOR = 0.8    # acceptance expected of a draft model before its first draft is seen
LEARN = 0.3    # how fast a draft model's cost per token follows what its drafts measured
OUTLIER = 3.0  # one draft counts as at most this many times (or this fraction of) the cost known so far


def learned_cost(known: float, measured: float) -> float:
    """A draft model's cost per token after one more draft measured
    `measured`.  One draft moves it by a bounded step: the first draft
    after a load can read the weights from disk, and a busy moment can
    stall one, and a single such draft must not make the next runs leave
    the draft model out for good (its cost is remembered, and a model left
    out is never measured again).  Drafts that keep measuring the same
    still get there, a factor of 1.6 a draft."""
    measured = min(max(measured, known / OUTLIER), known * OUTLIER)
    return known + LEARN * (measured - known)


def steady_per_token(curve: dict[int, float]) -> float:
    """A draft model's seconds per draft token from its remembered curve:
    what its drafts measured (curve[1]), but never more than its own batch
    of two.  More than that is a stall remembered (a busy spell, a first
    draft reading the weights from disk), not what a token costs: believed,
    it would keep the draft model from drafting at all, and so from ever
    being measured again."""
    one = curve[1]
    return min(one, curve.get(2, one))


class Drafts(Protocol):
    """What DraftModel drafts from (see the module's docstring)."""

    def cached(self) -> list[int]: ...
    def start(self, context: Sequence[int]): ...
    def start_choose(self, context: Sequence[int], sampling: SamplingConfig, seed: int, pos: int,
                     confidence: bool) -> tuple[int, float]: ...
    def then(self, token: int): ...
    def then_choose(self, token: int, sampling: SamplingConfig, seed: int, pos: int,
                    confidence: bool) -> tuple[int, float]: ...
    def end(self) -> None: ...
    def per_token_s(self) -> float: ...
    def learn(self, per_token: float) -> None: ...
    def catch_up_s(self, tokens: int) -> float: ...
    def rows_for(self, decoding: Decoding) -> None: ...


class ModelDrafts:
    """A draft model's own context.  Its KV cache follows the accepted text
    by prefix: each call cuts it back to what the context shares with it
    and evaluates only the new tokens, which also covers the fully
    accepted case (the last draft token and the bonus token are fed before
    drafting again)."""

    def __init__(self, model):
        self.model = model

    def cached(self) -> list[int]:
        return self.model.tokens

    def start(self, context: Sequence[int]):
        return self.model.catch_up(context, logits_last=True, copy=False, candidates=True)

    def start_choose(self, context, sampling, seed, pos, confidence) -> tuple[int, float]:
        """start(context), then the choice at output position `pos`; in one
        call where a single token is new (the usual step: the target's
        correction)."""
        m = self.model
        if common_prefix(m.tokens, context) >= len(context) - 1:
            m.truncate(len(context) - 1)
            return m.decode_choose(context[-1], sampling, seed, pos, confidence)
        return choose(self.start(context), sampling, seed, pos, confidence=confidence)

    def then(self, token: int):
        return self.model.decode([token], logits_from=0, copy=False, candidates=True)[0]

    def then_choose(self, token, sampling, seed, pos, confidence) -> tuple[int, float]:
        return self.model.decode_choose(token, sampling, seed, pos, confidence)

    def end(self) -> None:
        pass

    def per_token_s(self) -> float:
        """Seconds per draft token, from the model's remembered curve (steady_per_token)."""
        from ...llama.probe import ensure
        return steady_per_token(ensure(self.model))

    def learn(self, per_token: float) -> None:
        """What the next run's prior per token will be (steady_per_token bounds it)."""
        curve = self.model.curve
        if curve:
            curve[1] = learned_cost(steady_per_token(curve), per_token)

    def catch_up_s(self, tokens: int) -> float:
        """What reading `tokens` new tokens costs (in batches, at the
        probe's widest batch's cost per token)."""
        from ...llama.probe import ensure
        curve = ensure(self.model)
        widest = max(curve)
        return tokens * curve[widest] / widest

    def rows_for(self, decoding: Decoding) -> None:
        """The draft's rows as candidates where its own choice needs no more."""
        self.model.candidates_k = decoding.candidates_k


class DraftModel:
    """Drafts autoregressively from `source` (a model, or ModelDrafts/HeadDrafts).

    It reads the prompt only when it is first asked to draft (a draft the
    cost model never chooses never costs a prefill); the policy is told
    what that catch-up costs before it chooses.

    Sampling, seed and rule come from the generation's `Decoding`, given
    to `prepare`: "gumbel" drafts each output position's Gumbel-max choice
    with the same noise the target uses (seed, position, token), so a draft
    token is accepted when it is the target's own choice; "residual"
    samples from the draft's distribution and returns its rows for the
    residual rule.  `sampling`, where given, replaces the draft's own
    transform only (a draft distribution that differs on purpose, as the
    statistical tests use); the seed and rule are always the generation's.
    """

    def __init__(self, source, *, p_min: float = 0.0, sampling: SamplingConfig | None = None,
                 name: str = "draft", prior: float = PRIOR):
        self.source = source if hasattr(source, "then_choose") else ModelDrafts(source)
        self.name = name
        self.acceptance_prior = flat_prior(prior)  # what the policy expects before a draft is seen
        self.p_min = p_min  # stop drafting when the top draft probability falls below
        self.own_sampling = sampling
        self.prepare((), Decoding(SamplingConfig(), 0))
        self.clock = None  # a simulated clock (clock.py) prices the catch-up instead of the probe

    @property
    def model(self):
        return self.source.model

    @property
    def cost_prior(self) -> dict[str, float]:
        """Seconds per draft token: the simulated clock's, else the source's."""
        if self.clock is not None:
            return {self.name: self.clock.draft_per_token_s}
        return {self.name: self.source.per_token_s()}

    def catch_up_s(self, tokens: int) -> float:
        if tokens <= 2:
            return 0.0  # the usual step: the last accepted tokens
        if self.clock is not None:
            return self.clock.catch_up_s(tokens)
        return self.source.catch_up_s(tokens)

    def lag_s(self) -> float:
        """What reading the part of this step's context it lacks (as
        candidates() found it, as draft() reuses it) would cost before it
        drafts after it (nothing for a step's usual few tokens)."""
        return self.catch_up_s(self._behind)

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        self._prompt_len, self._behind = len(prompt), 0
        if decoding is not None:
            self.decoding = decoding
            self.rng = np.random.default_rng([decoding.seed, 1])
            self.source.rows_for(dataclasses.replace(decoding, sampling=self.sampling))

    @property
    def sampling(self) -> SamplingConfig:
        """The draft's own transform: the generation's, unless one was given."""
        return self.own_sampling or self.decoding.sampling

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        self._behind = len(context) - common_prefix(self.source.cached(), context)  # draft() reuses it
        return [Candidate(self.name, self.model.n_ctx - len(context), self.catch_up_s(self._behind),
                          pooled=isinstance(self.source, ModelDrafts))]

    @property
    def coupled(self) -> bool:
        """A draft token is the seeded choice (greedy, or the coupled rule's
        noise), not a sample from the draft's distribution."""
        return self.sampling.greedy or self.decoding.rule == "gumbel"

    def sampled(self, logits) -> tuple[int, float, np.ndarray]:
        """A token sampled from the draft's distribution (the residual rule),
        its top probability, and the distribution's row."""
        p = to_probs(logits, self.sampling)
        return sample(p, self.rng), float(p.max()), p

    def stops(self, chain: list[float], keep_going: KeepGoing | None) -> bool:
        """After tokens of these confidences, does the draft stop here?"""
        return chain[-1] < self.p_min or (keep_going is not None and not keep_going(chain))

    @property
    def follower(self) -> "DraftModel | None":
        """This, where it drafts from a model of its own (which can read a
        request's text beside the target); an MTP block reads the target's rows."""
        return self if isinstance(self.source, ModelDrafts) else None

    def position(self, context: Sequence[int]) -> int:
        """The output position of the token after `context`."""
        return len(context) - self._prompt_len

    def batched(self, cand: Candidate) -> "DraftModel | None":
        """Who drafts `cand` where several sequences draft together
        (draft_together): this, when it drafts from a model of its own."""
        if self.decoding.adjusted:  # its rows are adjusted one by one (_draft_rows)
            return None
        return self if isinstance(self.source, ModelDrafts) and cand.source == self.name else None

    def draft(self, context: Sequence[int], cand: Candidate, k: int,
              keep_going: KeepGoing | None = None) -> Proposal:
        if self.decoding.constraint is not None or self.decoding.adjusted:
            return self._draft_rows(context, k, keep_going)
        t0 = time.perf_counter()
        src = self.source
        behind = self._behind  # this step's, from candidates()
        pos = len(context) - self._prompt_len  # output position of the first draft token
        sampling, seed = self.sampling, self.decoding.seed
        coupled = self.coupled
        unsure = self.p_min > 0.0 or keep_going is not None  # the draft's confidence is asked for
        if coupled:
            chosen = src.start_choose(context, sampling, seed, pos, unsure)
        else:
            logits = src.start(context)
        t_sync = time.perf_counter() - t0
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        chain: list[float] = []
        for i in range(k):
            if coupled:
                x, conf = chosen
            else:
                x, conf, p = self.sampled(logits)
                rows.append(p)
            tokens.append(x)
            if i + 1 == k:
                break
            if unsure:
                chain.append(conf)
                if self.stops(chain, keep_going):
                    break
            if coupled:  # read x and choose the next token in one call
                chosen = src.then_choose(x, sampling, seed, pos + i + 1, unsure)
            else:
                logits = src.then(x)
        src.end()
        seconds = time.perf_counter() - t0
        # a step normally feeds the draft 1-2 new tokens; a longer catch-up
        # is charged as that much, not as the draft's usual cost
        steady = seconds if behind <= 2 else seconds - t_sync * (1 - 2 / behind)
        if self.clock is None:
            src.learn(steady / len(tokens))
        return Proposal(tokens, np.stack(rows) if rows else None, self.name, steady,
                        model_tokens=len(tokens), model_read=max(behind, 1))


    def _draft_rows(self, context: Sequence[int], k: int, keep_going: KeepGoing | None) -> Proposal:
        """The draft from rows changed as the target's are (run/rows.py): the
        request's logit bias and penalties (over the context and the draft so
        far), and its constraint: each token the draft model's own choice
        among those the constraint allows there, so that it drafts only legal
        text.  The constraint follows the context past the tokens it holds (a
        lookup draft this extends) and the draft, and is put back after.
        Under a constraint it drafts only where it holds the text but for a
        step's usual catch-up (proposers.grammar: reading a constrained
        request's whole prompt does not pay back), a lookup draft it would
        extend included."""
        t0 = time.perf_counter()
        c, src, adjust = self.decoding.constraint, self.source, self.decoding.adjust
        adjusted = self.decoding.adjusted
        ahead = list(context[self._prompt_len + c.count:]) if c is not None else []
        if c is not None and (self._behind > 2 or c.legal(ahead) < len(ahead)):
            return Proposal([], None, self.name)
        if c is not None:
            c.advance(ahead)
        pos, sampling, seed = len(context) - self._prompt_len, self.sampling, self.decoding.seed
        unsure = self.p_min > 0.0 or keep_going is not None
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        chain: list[float] = []
        try:
            logits = src.start(context)
            while len(tokens) < k and not (c is not None and c.done):
                masked = np.asarray(logits)
                if adjusted:
                    masked = adjust.row(masked, [*context, *tokens])
                if c is not None:
                    masked = c.masked(masked)
                if self.coupled:
                    x, conf = choose(masked, sampling, seed, pos + len(tokens), confidence=unsure)
                else:
                    x, conf, p = self.sampled(masked)
                    rows.append(p)
                tokens.append(x)
                if c is not None:
                    c.advance([x])
                chain.append(conf)
                if len(tokens) == k or (unsure and self.stops(chain, keep_going)):
                    break
                logits = src.then(x)
        finally:
            src.end()
            if c is not None:
                c.rollback(len(ahead) + len(tokens))
        seconds = time.perf_counter() - t0
        if self.clock is None and tokens:
            src.learn(seconds / len(tokens))
        return Proposal(tokens, np.stack(rows) if rows else None, self.name, seconds,
                        model_tokens=len(tokens), model_read=max(self._behind, 1))


def draft_together(items) -> list[Proposal]:
    """Several sequences' drafts from one draft model, one draft batch a
    position (Model.decode_batch): item (DraftModel, seq, context,
    candidate, k, keep_going), every DraftModel drafting from the same
    model (`batched` said so).  Each draft is the one `DraftModel.draft`
    would make for its sequence alone, but for the rounding of a batch of
    another shape; the seconds are shared by the tokens drafted."""
    if not items:
        return []
    model = items[0][0].model
    t0 = time.perf_counter()
    jobs = []
    for dm, seq, context, cand, k, keep_going in items:
        model.use(seq)
        keep = min(common_prefix(model.tokens, context), len(context) - 1)
        model.truncate(keep)
        behind = len(context) - keep
        if behind > 1:  # what it missed (a first draft after the prompt): read alone, then in the batch
            model.decode(list(context[keep:-1]))
        jobs.append(dict(dm=dm, seq=seq, k=k, keep_going=keep_going, feed=context[-1], behind=behind,
                         pos=dm.position(context), unsure=dm.p_min > 0.0 or keep_going is not None,
                         tokens=[], rows=[], chain=[]))
    active = list(jobs)
    while active:
        rows = model.decode_batch([(j["seq"], [j["feed"]]) for j in active])
        going = []
        for j, row in zip(active, rows):
            dm = j["dm"]
            if dm.coupled:
                x, conf = choose(row[0], dm.sampling, dm.decoding.seed, j["pos"] + len(j["tokens"]),
                                 confidence=j["unsure"])
            else:
                x, conf, p = dm.sampled(row[0])
                j["rows"].append(p)
            j["tokens"].append(x)
            if len(j["tokens"]) >= j["k"]:
                continue
            if j["unsure"]:
                j["chain"].append(conf)
                if dm.stops(j["chain"], j["keep_going"]):
                    continue
            j["feed"] = x
            going.append(j)
        active = going
    seconds = time.perf_counter() - t0
    total = sum(len(j["tokens"]) for j in jobs)
    return [Proposal(j["tokens"], np.stack(j["rows"]) if j["rows"] else None, j["dm"].name,
                     seconds * len(j["tokens"]) / total, model_tokens=len(j["tokens"]),
                     model_read=max(j["behind"], 1)) for j in jobs]
