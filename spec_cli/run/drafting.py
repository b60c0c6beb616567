"""Stage 3 of a round (run/round.py): the planned drafts made.  A draft
model drafts for every request that chose it together, one draft batch a
position (proposers.draft.draft_together), or through its own fast loop
where only one did; the other proposers (a lookup, an MTP block) draft for
each request alone.  Each draft is cut where the request's constraint
refuses a token, priced (on the wall, or on a simulated clock), and a
batch's drafts as made are trimmed again where they would split the batch
into passes that cost more than they yield."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ..core.batching import ALONE, Load, pooled_s, trim_drafts
from .proposers.base import EMPTY, Proposal
from .proposers.draft import draft_together


@dataclass(frozen=True)
class Planned:
    """A request's draft as planned: the candidate that drafts and how far
    (None, 0: a plain step), what its policy expects of it (for the batch's
    trimming), and the host seconds spent so far."""

    cand: object = None
    k: int = 0
    chances: tuple[float, ...] = ()
    d: float = 0.0          # seconds a drafted token, alone
    pooled: bool = False    # drafted together with the others' (a draft model's)
    spent_s: float = 0.0


@dataclass(frozen=True)
class Drafted:
    """A request's draft as made: the proposal, the tokens to verify (cut
    where its constraint refuses one, and by the batch's trimming), and what
    it cost: the user's wait (`draft_s`, on a simulated clock what the clock
    charges), what the policy learns (`steady_s`, proposers.base.Proposal),
    a token's seconds alone where it was drafted with others (`unit_s`), and
    the host's part of the wait."""

    prop: Proposal = EMPTY
    draft: tuple[int, ...] = ()
    draft_s: float = 0.0
    steady_s: float = 0.0
    host_draft_s: float = 0.0
    unit_s: float | None = None


def alone(lanes: Sequence, fixed: Sequence) -> bool:
    """The round's shape: one request and nothing else in the batch."""
    return len(lanes) == 1 and not fixed


def legal_draft(pick, draft: Sequence[int], prop: Proposal) -> list[int]:
    """`draft` as far as the rule's constraint admits it (all of it where
    there is none): a token it refuses cannot be accepted, so what follows
    it would be verify rows for nothing (pick.legal says how much to keep)."""
    draft = list(draft)
    legal = getattr(pick, "legal", None)
    if legal is not None and draft:
        draft = draft[:legal(draft, prop)]
    return draft if len(draft) >= getattr(pick, "draft_min", 0) else []


def to_end(vocab, draft: Sequence[int]) -> Sequence[int]:
    """`draft` up to its first end-of-generation token, that token kept:
    the text ends there, so rows after it would verify nothing.  (A copy of
    the prompt that reaches the end of the user's message runs on into the
    chat template: a code edit's last draft was 31 tokens where 2 could
    be accepted, 15 tokens' time lost on a 59-token answer.)"""
    for i, t in enumerate(draft):
        if vocab.is_eog(t):
            return draft[:i + 1]
    return draft


def keep_going(policy, cand, load: Load = ALONE) -> Callable | None:
    """The proposer's keep_going for candidate `cand`: one more token while
    the policy says it pays at `load` (a hybrid's extension names its own
    source, and what it must pay before its first token)."""
    if policy is None:
        return None
    return lambda chain, source=None, setup_s=0.0: policy.keep_going(source or cand.source, chain, load, setup_s)


def draft(lanes: Sequence, plans: Sequence[Planned], loads: Sequence[Load], *, timer,
          use: Callable | None = None, clock=None, price: Callable | None = None) -> list[Drafted]:
    """Every planned draft made: a draft model's for all the lanes that
    chose it together (a draft batch a position), the others each alone
    (`use(seq)` first, where there are several lanes).  `timer`: llama.cpp's
    seconds (both models'), so that the host's part is known."""
    out: list[Drafted | None] = [None] * len(lanes)
    use = use if len(lanes) > 1 else None  # one lane: its sequence is the one in use
    together = []
    for i, (lane, p) in enumerate(zip(lanes, plans)):
        if p.cand is None or p.k <= 0:
            out[i] = Drafted(draft_s=p.spent_s, steady_s=p.spent_s, host_draft_s=p.spent_s)
            continue
        dm = lane.gen.proposer.batched(p.cand)
        if dm is not None:
            together.append((i, dm))
            continue
        out[i] = _draft_one(lane, p, loads[i], timer, use, clock)
    if len(together) == 1:  # one draft model's draft: its own fast loop
        i, _ = together[0]
        out[i] = _draft_one(lanes[i], plans[i], loads[i], timer, use, clock)
    elif together:
        for i, d in zip([i for i, _ in together], _draft_pooled(lanes, plans, loads, together, timer, clock, price)):
            out[i] = d
    return out


def _draft_one(lane, p: Planned, load: Load, timer, use, clock) -> Drafted:
    g = lane.gen
    t0, d0 = time.perf_counter(), timer.seconds
    if use is not None:
        use(lane.seq)
    prop = g.proposer.draft(g.context, p.cand, p.k, keep_going(g.policy, p.cand, load))
    return _made(g, p, prop, p.spent_s + time.perf_counter() - t0, timer.seconds - d0, clock)


def _draft_pooled(lanes, plans, loads, together, timer, clock, price) -> list[Drafted]:
    """The drafts a draft model makes together; each is charged its share
    of the draft batches by its tokens, and told what a token would have
    cost alone (for its policy to learn: it prices drafting together
    itself, pooled_s)."""
    t0, d0 = time.perf_counter(), timer.seconds
    props = draft_together([(dm, lanes[i].seq, lanes[i].gen.context, plans[i].cand, plans[i].k,
                             keep_going(lanes[i].gen.policy, plans[i].cand, loads[i])) for i, dm in together])
    spent, decoded = time.perf_counter() - t0, timer.seconds - d0
    lengths = [len(prop.tokens) for prop in props]
    total = max(sum(lengths), 1)
    charged = clock.draft_batch_s(lengths) if clock is not None else None  # a draft batch a position
    units = pooled_s(lengths, 1.0, price) if price is not None else 0.0
    out = []
    for (i, _), prop in zip(together, props):
        share = len(prop.tokens) / total
        d = _made(lanes[i].gen, plans[i], prop, plans[i].spent_s + spent * share, decoded * share, None)
        if charged is not None:
            d = replace(d, draft_s=charged * share + d.host_draft_s, steady_s=charged * share + d.host_draft_s)
        if units > 0:
            d = replace(d, unit_s=(charged if charged is not None else spent) / units)
        out.append(d)
    return out


def _made(g, p: Planned, prop: Proposal, seconds: float, decoded: float, clock) -> Drafted:
    """A draft made in `seconds` (`decoded` of them in llama.cpp), its tokens
    cut where the rule's constraint refuses one."""
    tokens = legal_draft(g.pick, to_end(g.target.vocab, prop.tokens[:p.k]), prop)
    host = max(seconds - decoded, 0.0)
    steady = seconds if prop.steady_s is None else prop.steady_s
    if clock is not None:  # what the simulated draft model charges, the host's time included
        seconds = steady = clock.draft_s(prop.model_tokens, prop.model_read) + host
    return Drafted(prop, tuple(tokens), seconds, steady, host)


def trim_made(lanes: Sequence, drafted: list[Drafted], fixed: Sequence[tuple[int, int]],
              price: Callable | None) -> list[Drafted]:
    """The drafts as made, trimmed again: a draft model stops where it is
    unsure, so drafts planned to one length come back uneven and would
    split the batch into passes again; their drafting is spent, their rows
    are not.  Only where every request's policy planned (a fixed length stays)."""
    if price is None or alone(lanes, fixed) or not any(d.draft for d in drafted) \
            or not all(lane.gen.policy for lane in lanes):
        return drafted
    made = [(lane.seq, len(d.draft), tuple(lane.gen.policy.chances(d.prop.source)[:len(d.draft)]), 0.0, False)
            for lane, d in zip(lanes, drafted)]
    ks = trim_drafts(fixed, made, price)
    return [d if k == len(d.draft) else replace(d, draft=d.draft[:k]) for d, k in zip(drafted, ks)]
