"""The speculative loop.  Never prints; yields one frozen `Step` per target
batch.

Each step:
  1. the proposer drafts up to k tokens after the context;
  2. the target scores [last context token, draft...] in one batch: k+1 rows;
  3. the rule keeps the longest valid prefix and emits the next token:
     by default each position's token is the target's Gumbel-max choice
     for (seed, position) -- the argmax when greedy -- so the text is the
     target's whatever was drafted; `--rule residual` is the classic rule;
  4. the target's KV cache is cut back past the accepted tokens (the next
     token is fed with the next batch);
  5. end-of-generation tokens, stop strings, max tokens and a full context
     end the loop with a finish reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from .backend import Detokenizer, Model, common_prefix
from .errors import SpecError
from .proposers import EMPTY, Proposer
from .sampling import SamplingConfig, choose, margin, probs as to_probs
from .policy import CostModel, Policy
from .verify import verify, verify_choices


RULES = ("gumbel", "residual")


@dataclass(frozen=True)
class GenConfig:
    sampling: SamplingConfig = SamplingConfig()
    max_tokens: int = 256
    draft_max: int = 16
    stop: tuple[str, ...] = ()
    seed: int | None = None
    adaptive: bool = True  # draft length and on/off from the cost model (policy.py)
    # "gumbel": each position's token is fixed by (seed, position) and the
    # target alone, whatever was drafted; "residual": the classic rule
    rule: str = "gumbel"
    margins: bool = False  # record each decision's top-1 minus top-2 margin (bench)


@dataclass(frozen=True)
class Step:
    """One target batch.

    tokens: the ids this step added to the output, in order.
    from_draft: for each of `tokens`, True if the draft proposed it and the
        target accepted it; the last token of a step is the target's own.
    text: the text this step adds (stop strings cut, partial UTF-8 held back).
    segments: `text` split by origin: (piece, from the draft?) pairs.
    drafted / accepted: draft tokens proposed / accepted in this step.
    draft_s / verify_s: seconds spent drafting / in the target batch and rule.
    prefill_tokens / prefill_s: prompt tokens evaluated before the first step
        (0 on later steps; a reused KV cache makes it small).
    margins: with GenConfig.margins, the target's top-1 minus top-2 margin
        (sampling.margin) at each decision of the step, an end-of-generation
        token included; else empty.
    finish_reason: None while going on; else "stop" (end-of-generation token
        or stop string), "length" (max tokens) or "context" (context full).
    """

    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]
    text: str
    segments: tuple[tuple[str, bool], ...]
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    finish_reason: str | None = None
    margins: tuple[float, ...] = ()


class StopMatcher:
    """Holds back text that may be the start of a stop string."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._buf = ""

    def feed(self, text: str) -> tuple[str, bool]:
        self._buf += text
        for s in self.stops:
            i = self._buf.find(s)
            if i >= 0:
                out, self._buf = self._buf[:i], ""
                return out, True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self._buf)), 0, -1):
                if self._buf.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        out = self._buf[:len(self._buf) - hold]
        self._buf = self._buf[len(self._buf) - hold:]
        return out, False

    def flush(self) -> str:
        out, self._buf = self._buf, ""
        return out


def generate(target: Model, proposer: Proposer, prompt: Sequence[int],
             cfg: GenConfig = GenConfig()) -> Iterator[Step]:
    """Generate after `prompt` (token ids), one Step per target batch."""
    prompt = list(prompt)
    if not prompt:
        raise SpecError("the prompt is empty")
    if len(prompt) >= target.n_ctx:
        raise SpecError(f"the prompt is {len(prompt)} tokens but the context holds {target.n_ctx}",
                        hint="Use a larger --ctx (the model was trained for "
                             f"{target.n_ctx_train}), or a shorter prompt.")
    if cfg.rule not in RULES:
        raise SpecError(f"unknown rule {cfg.rule!r}", hint=f"Choose one of: {', '.join(RULES)}.")
    seed = cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    rng = np.random.default_rng(seed)
    detok = Detokenizer(target)
    stops = StopMatcher(cfg.stop)

    t0 = time.perf_counter()
    evaluated = _prefill(target, prompt)
    proposer.prepare(prompt)  # a draft model reads the prompt only once it is chosen
    prefill = (evaluated, time.perf_counter() - t0)

    # --deterministic: keep target batches where their logits are bitwise one-token logits
    draft_max = cfg.draft_max
    if target.deterministic:
        draft_max = min(draft_max, _verify_cap(target) - 1)
    policy = _policy(target, proposer, draft_max) if cfg.adaptive and draft_max > 0 else None
    sampling = cfg.sampling
    context = prompt
    produced = 0
    while True:
        remaining = cfg.max_tokens - produced
        if policy is not None:
            policy.horizon = remaining
        k = max(0, min(draft_max, remaining - 1, target.n_ctx - len(context)))
        prop = proposer.propose(context, k, policy) if k > 0 else EMPTY
        draft = prop.tokens[:k]

        t1 = time.perf_counter()
        logits = target.decode([context[-1], *draft], logits_from=0)
        if sampling.greedy or cfg.rule == "gumbel":
            n_acc, nxt = verify_choices(draft, lambda i: choose(logits[i], sampling, seed, produced + i))
        else:
            p = None if prop.probs is None else prop.probs[:len(draft)]
            n_acc, nxt = verify(draft, p, to_probs(logits, sampling), rng)
        target.truncate(len(context) + n_acc)
        verify_s = time.perf_counter() - t1
        if policy is not None:
            policy.observe(prop.source, drafted=len(draft), accepted=n_acc,
                           draft_s=prop.seconds if prop.steady_s is None else prop.steady_s,
                           verify_s=verify_s)
        margins = tuple(margin(logits[i], sampling, seed, produced + i)
                        for i in range(n_acc + 1)) if cfg.margins else ()

        new = [*draft[:n_acc], nxt]
        origin = [True] * n_acc + [False]
        finish = None
        for i, t in enumerate(new):
            if target.is_eog(t):
                new, origin, finish = new[:i], origin[:i], "stop"
                margins = margins[:i + 1]
                break
        if len(new) >= remaining:
            new, origin = new[:remaining], origin[:remaining]
            finish = finish or "length"
        context = context + new
        produced += len(new)

        segments, hit = [], False
        for t, o in zip(new, origin):
            piece, hit = stops.feed(detok.add(t))
            segments.append((piece, o))
            if hit:
                break
        if hit:
            finish = "stop"
        elif finish is None and len(context) >= target.n_ctx:
            finish = "context"
        if finish is not None and not hit:
            segments.append((stops.feed(detok.flush())[0] + stops.flush(), False))
        segments = tuple((p, o) for p, o in segments if p)
        text = "".join(p for p, _ in segments)

        yield Step(tokens=tuple(new), from_draft=tuple(origin), text=text, segments=segments,
                   drafted=len(draft), accepted=n_acc, draft_s=prop.seconds,
                   verify_s=verify_s, prefill_tokens=prefill[0], prefill_s=prefill[1],
                   finish_reason=finish, margins=margins)
        prefill = (0, 0.0)
        if finish is not None:
            return


def _prefill(target: Model, prompt: list[int]) -> int:
    """Evaluate everything but the last prompt token (it goes with the first
    batch), reusing the cached prefix; returns the tokens evaluated."""
    keep = common_prefix(target.tokens, prompt[:-1])
    target.truncate(keep)
    if len(prompt) - 1 > keep:
        target.decode(prompt[keep:-1])
    return len(prompt) - 1 - keep


def _verify_cap(target: Model) -> int:
    from .probe import ensure

    ensure(target)
    return target.verify_cap


def _policy(target: Model, proposer: Proposer, draft_max: int) -> Policy:
    from .probe import ensure

    policy = Policy(CostModel.from_timings(ensure(target), draft_max + 1), k_max=draft_max)
    policy.cost.draft_s.update(proposer.cost_prior)
    return policy
