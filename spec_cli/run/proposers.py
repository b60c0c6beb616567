"""Proposers: what drafts the next tokens.  They know nothing of the cost
model: each step the engine asks what they could draft, the policy chooses
one candidate and how far (once, in one place), and the chosen proposer
drafts up to that many tokens.

    candidates(context) -> [Candidate(source, limit, setup_s)]
    draft(context, candidate, k, keep_going) -> Proposal(tokens, probs or None)

`context` is every token so far (prompt and output).  `source` names what
the policy learns acceptance for (a core.source.Source, or a plain name:
"draft", "oracle", and for the lookup in suffix/ where it matched and how
long: "prompt8", "output4", "hist16").  `probs` holds the draft distribution of each proposed
token, row by row, or is None for a point mass (n-gram lookup, greedy and
Gumbel-coupled drafts).  `keep_going(confidences so far)` lets a draft
model stop early where it is unsure.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..llama.backend import Model, common_prefix
from ..core.config import Decoding
from ..core.sampling import SamplingConfig, choice, probs as to_probs, sample


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
    # a draft model's work, for a simulated clock (clock.py): tokens it
    # drafted, and tokens it read in the batch that yielded the first
    model_tokens: int = 0
    model_read: int = 0


EMPTY = Proposal([])
LEARN = 0.3  # how fast a draft model's cost per token follows what its drafts measured
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


KeepGoing = Callable[[list[float]], bool]


class Proposer(Protocol):
    name: str
    cost_prior: dict[str, float]  # seconds per draft token, by source, before any is measured

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        """A new generation starts after `prompt`, decoded with `decoding`
        (the same object the target's rule uses)."""

    def candidates(self, context: Sequence[int]) -> list[Candidate]: ...

    def draft(self, context: Sequence[int], cand: Candidate, k: int,
              keep_going: KeepGoing | None = None) -> Proposal: ...


class NoDraft:
    """The target alone: the baseline, through the same loop."""

    name = "none"
    cost_prior: dict[str, float] = {}

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
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

    Sampling, seed and rule come from the generation's `Decoding`, given
    to `prepare`: "gumbel" drafts each output position's Gumbel-max choice
    with the same noise the target uses (seed, position, token), so a draft
    token is accepted when it is the target's own choice; "residual"
    samples from the draft's distribution and returns its rows for the
    residual rule.  `sampling`, where given, replaces the draft's own
    transform only (a draft distribution that differs on purpose, as the
    statistical tests use); the seed and rule are always the generation's.
    """

    name = "draft"

    def __init__(self, model: Model, *, p_min: float = 0.0, sampling: SamplingConfig | None = None):
        self.model = model
        self.p_min = p_min  # stop drafting when the top draft probability falls below
        self.own_sampling = sampling
        self.prepare((), Decoding(SamplingConfig(), 0))
        self.clock = None  # a simulated clock (clock.py) prices the catch-up instead of the probe

    @property
    def cost_prior(self) -> dict[str, float]:
        """Seconds per draft token, from the model's load-time probe."""
        if self.clock is not None:
            return {self.name: self.clock.draft_per_token_s}
        from ..llama.probe import ensure
        return {self.name: ensure(self.model)[1]}

    def catch_up_s(self, tokens: int) -> float:
        """What reading `tokens` new tokens costs the draft model (in
        batches, at the probe's widest batch's cost per token)."""
        if tokens <= 2:
            return 0.0  # the usual step: the last accepted tokens
        if self.clock is not None:
            return self.clock.catch_up_s(tokens)
        from ..llama.probe import ensure
        curve = ensure(self.model)
        widest = max(curve)
        return tokens * curve[widest] / widest

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        self._prompt_len, self._behind = len(prompt), 0
        if decoding is not None:
            self.decoding = decoding
            self.rng = np.random.default_rng([decoding.seed, 1])
            self._rows(decoding)

    def _rows(self, decoding: Decoding) -> None:
        """The draft's rows as candidates where its own choice needs no more."""
        self.model.candidates_k = dataclasses.replace(decoding, sampling=self.sampling).candidates_k

    @property
    def sampling(self) -> SamplingConfig:
        """The draft's own transform: the generation's, unless one was given."""
        return self.own_sampling or self.decoding.sampling

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        self._behind = len(context) - common_prefix(self._cached(), context)  # draft() reuses it
        return [Candidate(self.name, self.model.n_ctx - len(context), self.catch_up_s(self._behind))]

    def draft(self, context: Sequence[int], cand: Candidate, k: int,
              keep_going: KeepGoing | None = None) -> Proposal:
        t0 = time.perf_counter()
        behind = self._behind  # this step's, from candidates()
        pos = len(context) - self._prompt_len  # output position of the first draft token
        sampling, seed = self.sampling, self.decoding.seed
        coupled = sampling.greedy or self.decoding.rule == "gumbel"
        unsure = self.p_min > 0.0 or keep_going is not None  # the draft's confidence is asked for
        if coupled:
            chosen = self._start_choose(context, sampling, seed, pos, unsure)
        else:
            logits = self._start(context)
        t_sync = time.perf_counter() - t0
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        chain: list[float] = []
        for i in range(k):
            if coupled:
                x, conf = chosen
            else:
                p = to_probs(logits, sampling)
                x, conf = sample(p, self.rng), float(p.max())
                rows.append(p)
            tokens.append(x)
            if i + 1 == k:
                break
            if unsure:
                chain.append(conf)
                if conf < self.p_min or (keep_going is not None and not keep_going(chain)):
                    break
            if coupled:  # read x and choose the next token in one call
                chosen = self._then_choose(x, sampling, seed, pos + i + 1, unsure)
            else:
                logits = self._then(x)
        self._end()
        seconds = time.perf_counter() - t0
        # a step normally feeds the draft 1-2 new tokens; a longer catch-up
        # is charged as that much, not as the draft's usual cost
        steady = seconds if behind <= 2 else seconds - t_sync * (1 - 2 / behind)
        if self.clock is None:
            self._learn(steady / len(tokens))
        return Proposal(tokens, np.stack(rows) if rows else None, self.name, steady,
                        model_tokens=len(tokens), model_read=max(behind, 1))

    # what the loop above asks of the model: the logits after `context`,
    # then after each draft token; the KV cache keeps the drafts (the next
    # call cuts it back to what it shares with the context)
    def _cached(self) -> list[int]:
        """The tokens the drafting cache holds (what a draft need not read again)."""
        return self.model.tokens

    def _start(self, context: Sequence[int]) -> np.ndarray:
        return self.model.catch_up(context, logits_last=True, copy=False, candidates=True)

    def _start_choose(self, context: Sequence[int], sampling: SamplingConfig, seed: int, pos: int,
                      confidence: bool) -> tuple[int, float]:
        """_start(context), then the choice at output position `pos`
        (sampling.choice); in one call where a single token is new (the
        usual step: the target's correction)."""
        m = self.model
        if common_prefix(m.tokens, context) >= len(context) - 1:
            m.truncate(len(context) - 1)
            return m.decode_choose(context[-1], sampling, seed, pos, confidence)
        return choice(self._start(context), sampling, seed, pos, confidence)

    def _then(self, token: int) -> np.ndarray:
        return self.model.decode([token], logits_from=0, copy=False, candidates=True)[0]

    def _then_choose(self, token: int, sampling: SamplingConfig, seed: int, pos: int,
                     confidence: bool) -> tuple[int, float]:
        """_then(token), then the choice at output position `pos` (sampling.choice)."""
        return self.model.decode_choose(token, sampling, seed, pos, confidence)

    def _end(self) -> None:
        pass

    def _learn(self, per_token: float) -> None:
        """What the next run's prior per token will be."""
        if self.model.curve:
            self.model.curve[1] = learned_cost(self.model.curve[1], per_token)


class MTPDraft(DraftModel):
    """The target's own multi-token-prediction block drafts (backend.MTPHead):
    no second model.  Its first draft token reads the context's last token
    beside the target's hidden state before it, which the target's last
    batch left; each further one reads the previous draft token beside the
    block's own output.  Its KV cache follows the context by prefix where
    the target's states fed it, and drops the chain after each draft.
    Sampling, seed, rule and the early stop are the draft model's.

    Its cost per token is timed once (the fastest of three one-token
    reads) and then learned from its drafts; catching up after steps it
    did not draft is a batch of the tokens it missed."""

    name = "mtp"

    def __init__(self, target: Model, *, p_min: float = 0.0, sampling: SamplingConfig | None = None):
        self.target = target
        self.head = target.mtp_head()
        super().__init__(target, p_min=p_min, sampling=sampling)

    @property
    def cost_prior(self) -> dict[str, float]:
        if self.clock is not None:
            return {self.name: self.clock.draft_per_token_s}
        return {self.name: self.per_token()}

    def per_token(self) -> float:
        """Seconds the block takes to read one token and predict the next
        (kept with the block, for every generation on this target)."""
        head = self.head
        if head.per_token_s is None:
            h = np.zeros((1, head.n_embd), np.float32)
            keep, best = len(head.tokens), float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                head.read([max(self.target.bos, 0)], h, logits=True)
                best = min(best, time.perf_counter() - t0)
                head.truncate(keep)
            head.per_token_s = best
        return head.per_token_s

    def _rows(self, decoding: Decoding) -> None:
        pass  # the block's rows are its own context's; the target's are the engine's to set

    def catch_up_s(self, tokens: int) -> float:
        if self.clock is not None:
            return super().catch_up_s(tokens)
        if tokens <= 2:
            return 0.0
        return 0.25 * tokens * self.per_token()  # a batch reads a token for a fraction of one alone

    def _cached(self) -> list[int]:
        return self.head.tokens

    def _start(self, context: Sequence[int]) -> np.ndarray:
        head, target = self.head, self.target
        fed = len(target.tokens)  # the target's states are known for these positions
        assert fed < len(context) and (fed == 0 or target.tokens[-1] == context[fed - 1])
        keep = min(common_prefix(head.tokens, context), fed)
        head.truncate(keep)
        # entries keep..fed read the context beside the target's state before each
        hidden = target.hidden(max(keep - 1, 0), fed)
        if keep == 0:  # the first token has no state before it
            hidden = np.vstack([np.zeros((1, head.n_embd), np.float32), hidden])
        logits = head.read(list(context[keep:fed + 1]), hidden, logits=True)
        self._sure = fed + 1
        for token in context[fed + 1:]:  # tokens the target has not read (a lookup draft to extend)
            logits = self._then(token)
        return logits

    def _then(self, token: int) -> np.ndarray:
        return self.head.read([token], self.head.out_hidden()[None, :], logits=True)

    def _then_choose(self, token: int, sampling: SamplingConfig, seed: int, pos: int,
                     confidence: bool) -> tuple[int, float]:
        return choice(self._then(token), sampling, seed, pos, confidence)

    def _start_choose(self, context: Sequence[int], sampling: SamplingConfig, seed: int, pos: int,
                      confidence: bool) -> tuple[int, float]:
        return choice(self._start(context), sampling, seed, pos, confidence)

    def _end(self) -> None:
        self.head.truncate(self._sure)  # the chain read the block's own states, not the target's

    def _learn(self, per_token: float) -> None:
        self.head.per_token_s = learned_cost(self.per_token(), per_token)


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


class Hybrid:
    """The free lookup (suffix.Lookup) and the draft model side by side: the
    policy picks whichever pays more this step, and where a lookup draft
    ends confident -- its continuation ran out, not its certainty -- the
    draft model extends it, token by token while the cost model says one
    more pays (with a sampled draft under the residual rule, which needs
    the draft's rows, it does not)."""

    name = "hybrid"
    CONFIDENT = 0.9  # the lookup's last share at or above this: worth extending

    def __init__(self, lookup, draft: DraftModel):
        self.lookup, self.draft_model = lookup, draft

    @property
    def cost_prior(self) -> dict[str, float]:
        return self.draft_model.cost_prior

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        self.lookup.prepare(prompt, decoding)
        self.draft_model.prepare(prompt, decoding)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        return self.lookup.candidates(context) + self.draft_model.candidates(context)

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        if cand.source == self.draft_model.name:
            return self.draft_model.draft(context, cand, k, keep_going)
        prop = self.lookup.draft(context, cand, k, keep_going)
        shares = self.lookup.shares
        n = len(prop.tokens)
        dm = self.draft_model
        if (n == 0 or n >= k or keep_going is None or shares[-1] < self.CONFIDENT
                or (dm.decoding.rule == "residual" and not dm.sampling.greedy)
                or not keep_going(shares, dm.name)):
            return prop
        ext = dm.draft(list(context) + prop.tokens, Candidate(dm.name, k - n), k - n,
                       lambda chain: keep_going(shares + chain, dm.name))
        return Proposal(prop.tokens + ext.tokens, None, prop.source, model_tokens=ext.model_tokens,
                        model_read=ext.model_read)

