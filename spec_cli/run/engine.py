"""One generation.  Never prints; yields one frozen `Step` per target batch.

A round (run/round.py, the one place it is written, for one request or
many) drafts, verifies in one target batch, and keeps the longest valid
prefix of the draft by the rule: by default each position's token is the
target's Gumbel-max choice for (seed, position) -- the argmax when greedy
-- so the text is the target's whatever was drafted; `--rule residual` is
the classic rule.  The target's own token follows: the correction at the
first rejected position, or the bonus token when everything was accepted.

`Generation` is a request's state between rounds (context, rule, policy,
output); `generate` runs one as a batch of one: end-of-generation tokens,
stop strings, max tokens and a full context end it with a finish reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from ..errors import SpecError
from .proposers.base import Proposer
from .stops import StopMatcher
from ..core.config import Decoding
from ..core.sampling import SamplingConfig, choose, choose_rows, margin, probs as to_probs
from ..core.cost import CostModel
from ..core.acceptance import Learned
from ..core.policy import Policy
from ..core.verify import verify, verify_choices
from . import round as rounds
from .round import Lane, Round
from .rows import rows_rule

if TYPE_CHECKING:
    from ..llama.model import Model


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
    clock: object = None   # a simulated clock (clock.Clock): it prices the steps, not the wall
    # a compiled constraint (core.constraint.Grammar): each token is the target's
    # choice from its row masked by it, drafts are cut where it refuses a token,
    # and the tokens it forces are free drafts (proposers.grammar)
    grammar: object = None
    adjust: object = None       # core.adjust.Adjust: logit bias and penalties on every row the rule reads
    logprobs: int | None = None  # each token's logprob and this many alternatives (Step.logprobs); None: off
    draft_min: int = 0          # a shorter draft is not verified (llama-server's speculative.n_min)


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
    host_s: of the step's seconds, those outside llama.cpp's decode calls
        (the rule, sampling, the lookup, Python): measured on the wall.
    With a simulated clock (GenConfig.clock) draft_s, verify_s and
    prefill_s are what the clock charges for the device, plus the host
    time measured here (each phase its own), not what the wall showed.
    finish_reason: None while going on; else "stop" (end-of-generation token
        or stop string), "length" (max tokens) or "context" (context full).
    stop_type: with a finish reason, llama-server's word for it: "eos" (an
        end-of-generation token), "word" (a stop string) or "limit".
    pieces: each of `tokens`' text, as far as it was written (a stop
        string's held-back text lands on a later token; the text after a
        stop string is on none).
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
    source: str = "none"   # what drafted (the policy's source name), "none" for a plain step
    host_s: float = 0.0
    host_draft_s: float = 0.0   # the part of host_s spent drafting
    stop_type: str | None = None
    stop_word: str | None = None   # with stop_type "word": the stop string found
    pieces: tuple[str, ...] = ()
    aside_s: float = 0.0   # spent on `margins` (bench's bookkeeping, not generation): no clock counts it
    mask_s: float = 0.0    # of host_s, the constraint's masks and checks (GenConfig.grammar)
    logprobs: tuple = ()   # with GenConfig.logprobs: each of `tokens`' core.adjust.TokenLogprob


def generate(target: Model, proposer: Proposer, prompt: Sequence[int],
             cfg: GenConfig = GenConfig()) -> Iterator[Step]:
    """Generate after `prompt` (token ids), one Step per target batch."""
    g = Generation(target, proposer, prompt, cfg)
    g.read_prompt()
    lane = Lane(target.seq, g)
    while True:
        s = g.settle(rounds.one(target, lane, cfg.clock))
        yield s
        if s.finish_reason is not None:
            return


class Generation:
    """One generation's state between its rounds: the context so far, the
    rule, the policy, the output.  `generate` drives one alone, run/batch.py
    several, one target batch for all of them a round, both through
    run/round.py.  Each round: `limit()` caps the draft, the round decodes,
    `settle(round)` applies it and says what it added (a Step)."""

    def __init__(self, target: Model, proposer: Proposer, prompt: Sequence[int], cfg: GenConfig = GenConfig()):
        prompt = list(prompt)
        _check_prompt(target, prompt, cfg)
        self.target, self.proposer, self.cfg, self.prompt = target, proposer, cfg, prompt
        seed = cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
        # with a constraint, the rule masks whole rows (a top-k of candidates
        # taken before the mask may hold no legal token), and its forced tokens draft
        self.constraint = cfg.grammar.start() if cfg.grammar is not None else None
        # one state for the rule and the proposer
        self.decoding = decoding = Decoding(cfg.sampling, seed, cfg.rule, self.constraint, cfg.adjust)
        if self.constraint is not None and getattr(proposer, "name", "none") != "none":
            from .proposers.grammar import GrammarDrafts

            self.proposer = proposer = GrammarDrafts(proposer, self.constraint)
        # with top-k, llama.cpp's sampler leaves each verify row's candidates
        # only, unless bench's margins, the residual rule or a constraint (Decoding) read whole rows
        self.candidates_k = decoding.candidates_k if not cfg.margins and cfg.logprobs is None else None
        self.prefill = (0, 0.0)  # prompt tokens evaluated, and the seconds: the first Step carries them
        # --deterministic: keep target batches where their logits are bitwise one-token logits
        draft_max = cfg.draft_max
        if target.deterministic:
            draft_max = min(draft_max, _verify_cap(target) - 1)
        self.draft_max = draft_max
        self.policy = _policy(target, proposer, draft_max, cfg.clock) if cfg.adaptive and draft_max > 0 else None
        self.out = _Output(target, cfg)
        whole = self.constraint is not None or decoding.adjusted or cfg.logprobs is not None
        self.pick = rows_rule(decoding, self.out, lambda: self.context) if whole else _rule(decoding, self.out)
        if cfg.draft_min > 1:
            self.pick.draft_min = cfg.draft_min  # legal_draft drops a shorter draft
        self._mask_s = 0.0  # the constraint's seconds at the last settle
        self.context = prompt

    def read_prompt(self) -> None:
        """Evaluate the prompt but its last token (it goes with the first
        batch), reusing the cached prefix, and ready the proposer."""
        t0 = time.perf_counter()
        evaluated = self.target.catch_up(self.prompt[:-1])
        self.prompt_read(evaluated, time.perf_counter() - t0)

    def prompt_read(self, evaluated: int, seconds: float) -> None:
        """The prompt is in the target's cache (`evaluated` tokens of it read
        now, in `seconds`): the proposer gets ready."""
        self.target.candidates_k = self.candidates_k
        self.proposer.prepare(self.prompt, self.decoding)  # a draft model reads the prompt only once it is chosen
        clock = self.cfg.clock
        self.prefill = (evaluated, seconds if clock is None else clock.prefill_s(evaluated))

    @property
    def remaining(self) -> int:
        """The tokens still to come, at most."""
        return self.cfg.max_tokens - self.out.produced

    def limit(self) -> int:
        """The longest draft this round may verify: the draft, the correction
        and what came before must fit the context and the tokens asked for."""
        return max(0, min(self.draft_max, self.remaining - 1, self.target.n_ctx - len(self.context) - 1))

    def settle(self, r: Round) -> Step:
        """What round `r` added."""
        cfg, decoding, out = self.cfg, self.decoding, self.out
        margins, aside_s = (), 0.0
        if cfg.margins:
            t_aside = time.perf_counter()
            masked = getattr(self.pick, "rows", None)  # under a constraint, the rows as the rule read them
            rows = masked if masked is not None else r.logits if r.logits is not None else self.target.last_rows(1)
            margins = tuple(margin(rows[i], decoding.sampling, decoding.seed, out.produced + i)
                            for i in range(r.accepted + 1))
            aside_s = time.perf_counter() - t_aside
        a = out.add([*r.draft[:r.accepted], r.token], r.accepted, len(self.context), margins)
        logprobs = tuple(self.pick.logprobs[:len(a.tokens)]) if cfg.logprobs is not None else ()
        mask_s = 0.0
        if self.constraint is not None:
            mask_s, self._mask_s = self.constraint.seconds - self._mask_s, self.constraint.seconds
        self.context = self.context + a.tokens
        prefill, self.prefill = self.prefill, (0, 0.0)
        return Step(tokens=tuple(a.tokens), from_draft=tuple(a.origin), text=a.text, segments=a.segments,
                    drafted=len(r.draft), accepted=r.accepted, draft_s=r.draft_s,
                    verify_s=r.verify_s, prefill_tokens=prefill[0], prefill_s=prefill[1],
                    finish_reason=a.finish, margins=a.margins, source=r.source if r.draft else "none",
                    host_s=r.host_s, host_draft_s=r.host_draft_s, stop_type=out.stop_type,
                    stop_word=out.stops.matched, pieces=a.pieces,
                    aside_s=aside_s, mask_s=mask_s, logprobs=logprobs)


def _check_prompt(target: Model, prompt: list[int], cfg: GenConfig) -> None:
    if not prompt:
        raise SpecError("the prompt is empty")
    if len(prompt) >= target.n_ctx:
        raise SpecError(f"the prompt is {len(prompt)} tokens but the context holds {target.n_ctx}",
                        hint="Use a larger --ctx (the model was trained for "
                             f"{target.n_ctx_train}), or a shorter prompt.")
    check_rule(cfg.rule)


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise SpecError(f"unknown rule {rule!r}", hint=f"Choose one of: {', '.join(RULES)}.")
    return rule


def _rule(decoding: Decoding, out: "_Output"):
    """The acceptance rule as pick(logits, draft, proposal) -> (accepted,
    token); for the coupled rule also pick.alone(target, last) -> token: a
    step without a draft, the target's row read and chosen in one call
    (Model.decode_choose)."""
    sampling, seed, threads = decoding.sampling, decoding.seed, out.target.n_threads
    if sampling.greedy or decoding.rule == "gumbel":
        def pick(logits, draft, prop):
            walked = choose_rows(logits, draft, sampling, seed, out.produced, threads=threads)
            # the rule may read past the walk (it does not, but the rule is the definition)
            return verify_choices(draft, lambda i: walked[i] if i < len(walked)
                                  else choose(logits[i], sampling, seed, out.produced + i).token)
        pick.alone = lambda target, last: target.decode_choose(last, sampling, seed, out.produced)[0]
    else:
        rng = np.random.default_rng(seed)

        def pick(logits, draft, prop):
            p = None if prop.probs is None else prop.probs[:len(draft)]
            return verify(draft, p, to_probs(logits, sampling), rng)
    return pick


@dataclass(frozen=True)
class Added:
    """What a round added to the output (_Output.add): its tokens, each one's
    origin (drafted?), their text whole and by origin, the finish reason,
    the margins kept, and each token's piece of text."""

    tokens: list[int]
    origin: list[bool]
    text: str
    segments: tuple[tuple[str, bool], ...]
    finish: str | None
    margins: tuple[float, ...]
    pieces: tuple[str, ...]


class _Output:
    """The tokens a round adds, turned into text: end-of-generation tokens,
    max tokens, stop strings and a full context end it."""

    def __init__(self, target: Model, cfg: GenConfig):
        from ..llama.vocab import Detokenizer

        self.target, self.cfg = target, cfg
        self.detok = Detokenizer(target.vocab)
        self.stops = StopMatcher(cfg.stop)
        self.produced = 0
        self.stop_type: str | None = None

    def add(self, new: list[int], n_draft: int, n_context: int, margins: tuple) -> Added:
        origin = [True] * n_draft + [False]
        finish = None
        for i, t in enumerate(new):
            if self.target.vocab.is_eog(t):
                new, origin, finish, self.stop_type = new[:i], origin[:i], "stop", "eos"
                margins = margins[:i + 1]
                break
        remaining = self.cfg.max_tokens - self.produced
        if len(new) >= remaining:  # max_tokens reached first (an end token after it is not generated)
            new, origin = new[:remaining], origin[:remaining]
            finish, self.stop_type = "length", None
        segments, hit = [], False
        for j, (t, o) in enumerate(zip(new, origin)):
            piece, hit = self.stops.feed(self.detok.add(t))
            segments.append((piece, o))
            if hit:  # the tokens after the stop string are not the output's
                new, origin = new[:j + 1], origin[:j + 1]
                break
        self.produced += len(new)
        if hit:
            finish, self.stop_type = "stop", "word"
        elif finish is None and n_context + len(new) >= self.target.n_ctx:
            finish = "context"
        pieces = [p for p, _ in segments]
        if finish is not None and not hit:
            tail = self.stops.feed(self.detok.flush())[0] + self.stops.flush()
            segments.append((tail, False))
            if pieces:
                pieces[-1] += tail
        if finish is not None and self.stop_type is None:
            self.stop_type = "limit"
        segments = tuple((p, o) for p, o in segments if p)
        return Added(new, origin, "".join(p for p, _ in segments), segments, finish, margins, tuple(pieces))


def _verify_cap(target: Model) -> int:
    from ..llama.probe import ensure

    ensure(target)
    return target.verify_cap


def _policy(target: Model, proposer: Proposer, draft_max: int, clock=None) -> Policy:
    """A policy for this generation.  What was learned of the machine's
    costs and of each draft source's acceptance carries over from earlier
    generations on the same target (a server's requests, a chat's turns,
    bench's runs).  On a simulated clock the costs are the clock's."""
    from ..llama.probe import ensure

    n = max(draft_max + 1, 17)
    if getattr(target, "learned", None) is None:
        target.learned = Learned()
    kw = dict(k_max=draft_max, draft_s=proposer.cost_prior, prior=proposer.acceptance_prior, learned=target.learned)
    if clock is not None:
        return Policy(CostModel.from_timings(clock.timings(), n), **kw)
    if target.costs is None:
        target.costs = CostModel.from_timings(ensure(target), n)
    return Policy(target.costs, **kw)
