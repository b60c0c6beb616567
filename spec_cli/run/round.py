"""One speculative round, for one request or for many in one target batch:
the only place a round is written.  `generate` (engine.py) runs a batch of
one through it; run/batch.py runs every running request through it, with
the prompt chunks read in the same batch.  Numbered as in the papers
(Leviathan et al. 2022, Chen et al. 2023; the shape of gpt-fast's
`speculative_decode`):

  1. `offer`: what each request's proposer could draft now (its candidates);
  2. `plan`: each request's policy chooses, in order, which candidate drafts
     and how far, told the batch around it (core.batching.Load: the rows and
     drafts of those planned before it, those after it taken to draft as it
     does); a batch's plan is then trimmed where its drafts split it into
     passes over the weights that cost more than they yield
     (core.batching.trim_drafts);
  3. `draft` (run/drafting.py): the proposers draft (a draft model for every
     request that chose it together, one draft batch a position; the others
     each alone), and each draft is cut where the request's constraint
     refuses a token;
  4. `verify`: the target scores every request's [last token, draft...] in
     ONE llama.cpp batch (the prompt chunks beside them); each request's rule
     keeps the longest valid prefix of its draft and adds the target's own
     token (the correction, or the bonus); each sequence is rewound past its
     accepted tokens; the round is priced (on the wall, or on a simulated
     clock) and every policy learns from it.  The result is one `Round` a
     request, which its Generation settles into a Step.

The shape of a round chooses its fast paths, inside these functions: a
request alone with no prompt chunk beside it is planned with no load, its
plain step is one C call that decodes and chooses (pick.alone), its rows are
read as candidates where the rule needs no more, and a draft model drafting
for it alone drafts through its own fast loop (proposers.draft).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..core.batching import Load, expected_tokens, passes, trim_drafts
from .drafting import Drafted, Planned, alone, draft, trim_made


@dataclass
class Round:
    """What one round did for one request."""

    draft: list[int]
    accepted: int
    token: int              # the target's own: correction or bonus
    source: str
    draft_s: float
    verify_s: float
    # the target's k+1 rows (views of llama.cpp's buffers: read before the
    # next decode), whole or as Candidates (sampling.py; see candidates_k);
    # None where the rule chose from the row itself (pick.alone: Model.last_rows has it)
    logits: np.ndarray | list | None
    host_s: float = 0.0
    host_draft_s: float = 0.0


@dataclass(frozen=True)
class Lane:
    """A request in a round: its sequence and its Generation (engine.py).
    run/batch.py's Stream is one too."""

    seq: int
    gen: object


@dataclass(frozen=True)
class Offer:
    """What a request could draft this round: at most `k` tokens from one of
    `cands` (proposers.base.Candidate); `outlook`, the chances of its
    likeliest draft (for those planned before it: Load.following), and the
    host seconds this took."""

    k: int
    cands: tuple = ()
    outlook: tuple[float, ...] = ()
    spent_s: float = 0.0


@dataclass(frozen=True)
class Verified:
    """The round's target batch: one Round a request, the batch's seconds
    (drafting not included; on a simulated clock its price), llama.cpp's own
    seconds in it, its rows (prompt chunks included) and its passes."""

    rounds: tuple[Round, ...]
    verify_s: float
    decoded_s: float
    rows: int
    shape: tuple[int, ...]


# -- 1. offer ------------------------------------------------------------------
def offer(lane, k: int, *, usable: Callable | None = None, outlook: bool = False) -> Offer:
    """What `lane`'s proposer could draft after its context, in at most `k`
    tokens (`usable(lane, candidate)` filters them); `outlook` where requests
    are planned after it."""
    t0 = time.perf_counter()
    g = lane.gen
    cands = g.proposer.candidates(g.context) if k > 0 else []
    if usable is not None:
        cands = [c for c in cands if usable(lane, c)]
    seen = g.policy.outlook(cands, k) if outlook and g.policy is not None else ()
    return Offer(k, tuple(cands), seen, time.perf_counter() - t0)


# -- 2. plan -------------------------------------------------------------------
def plan(lanes: Sequence, offers: Sequence[Offer], *, fixed: Sequence[tuple[int, int]] = (),
         price: Callable | None = None) -> tuple[list[Planned], list[Load]]:
    """Each lane's draft, chosen in order, each told the batch around it
    (`fixed`: the (sequence, rows) parts beside the drafts, prompt chunks);
    then trimmed where it would make the batch slower (`price(n)`: one pass
    of n rows; None: no trimming).  Returns the plans, and the load each
    was chosen at (its draft's keep_going weighs the same)."""
    if alone(lanes, fixed):
        t0 = time.perf_counter()
        load = Load(horizon=lanes[0].gen.remaining)
        return [_choose(lanes[0], offers[0], load, t0)], [load]
    rows_of = dict(fixed)
    rows_of.update({lane.seq: 1 for lane in lanes})
    tokens = extra = pool_d = 0.0
    pool: list[int] = []
    plans, loads = [], []
    for i, (lane, o) in enumerate(zip(lanes, offers)):
        t0 = time.perf_counter()
        load = Load(rows=sum(rows_of.values()) - 1, tokens=tokens, extra_s=extra, pool=tuple(pool),
                    pool_d=pool_d, others=len(lanes) - 1, shape=tuple(rows_of.items()), seq=lane.seq,
                    following=tuple((lanes[j].seq, offers[j].outlook) for j in range(i + 1, len(lanes))),
                    horizon=lane.gen.remaining)
        p = _choose(lane, o, load, t0)
        tokens += 1.0
        if p.k > 0 and lane.gen.policy is not None:
            rows_of[lane.seq] += p.k
            tokens += expected_tokens(list(p.chances)) - 1.0
            if p.pooled:
                pool.append(p.k)
                pool_d = max(pool_d, p.d)
            else:
                extra += p.d * p.k
        plans.append(p)
        loads.append(load)
    # trimmed where every request's policy chose its draft; a fixed length
    # (--fixed, bench's draft@K) is what was asked for, and stays
    if price is not None and all(lane.gen.policy for lane in lanes) and any(p.k > 0 for p in plans):
        ks = trim_drafts(fixed, [(lane.seq, p.k, p.chances, p.d, p.pooled) for lane, p in zip(lanes, plans)],
                         price)
        plans = [p if k == p.k else Planned(p.cand, k, p.chances[:k], p.d, p.pooled, p.spent_s)
                 for p, k in zip(plans, ks)]
    return plans, loads


def _choose(lane, o: Offer, load: Load, t0: float) -> Planned:
    policy = lane.gen.policy
    if policy is None:
        cand, k = (o.cands[0] if o.cands else None), o.k
    else:
        cand, k = policy.choose(list(o.cands), o.k, load)
    k = min(k, cand.limit) if cand is not None else 0
    spent = o.spent_s + time.perf_counter() - t0
    if cand is None or k <= 0:
        return Planned(spent_s=spent)
    if policy is None:
        return Planned(cand, k, spent_s=spent)
    return Planned(cand, k, tuple(policy.chances(cand.source)[:k]), policy.draft_s.get(cand.source, 0.0),
                   cand.pooled, spent)


# -- 4. verify -----------------------------------------------------------------
def verify(target, lanes: Sequence, drafted: Sequence[Drafted], *, reading: Sequence[tuple[int, list]] = (),
           clock=None) -> Verified:
    """The target's one batch: every lane's [last token, draft...] (and the
    `reading` parts, (sequence, prompt tokens), whose rows are not read);
    each lane's rule, rewind, price, and what its policy learns."""
    timer = target.timer
    t1, d1 = time.perf_counter(), timer.seconds
    one = alone(lanes, reading)
    if one:
        picks, rows = _verify_alone(target, lanes[0], drafted[0])
        shape: tuple[int, ...] = (len(drafted[0].draft) + 1,)
    else:
        picks, rows = _verify_batch(target, lanes, drafted, reading)
        shape = tuple(passes([(seq, len(tokens)) for seq, tokens in reading]
                             + [(lane.seq, len(d.draft) + 1) for lane, d in zip(lanes, drafted)]))
    t2 = time.perf_counter()
    decoded = timer.seconds - d1
    verify_s, host_verify = t2 - t1, max(t2 - t1 - decoded, 0.0)
    if clock is not None:  # the simulated machine's price of llama.cpp's passes, whoever's rows
        verify_s = sum(clock.verify_s(n) for n in shape) + host_verify
    n_rows = sum(len(d.draft) + 1 for d in drafted)
    _learn(lanes, drafted, picks, verify_s, shape, n_rows, one=one, reading=bool(reading))
    rounds = tuple(Round(list(d.draft), n_acc, token, d.prop.source, d.draft_s, verify_s, r,
                         d.host_draft_s + host_verify, d.host_draft_s)
                   for d, r, (n_acc, token) in zip(drafted, rows, picks))
    return Verified(rounds, verify_s, decoded, n_rows + sum(len(t) for _, t in reading), shape)


def _verify_alone(target, lane, d: Drafted):
    """One request alone: its rows read as candidates where its rule needs
    no more, and a plain step's row read and its token chosen in one call."""
    g = lane.gen
    context, pick = g.context, g.pick
    target.candidates_k = g.candidates_k
    quick = getattr(pick, "alone", None)
    if not d.draft and quick is not None:
        logits, n_acc, token = None, 0, quick(target, context[-1])
    else:
        logits = target.decode([context[-1], *d.draft], logits_from=0, copy=False, candidates=True)
        n_acc, token = pick(logits, list(d.draft), d.prop)
    target.truncate(len(context) + n_acc)
    return [(n_acc, token)], [logits]


def _verify_batch(target, lanes, drafted, reading):
    parts = [(seq, tokens, False) for seq, tokens in reading]
    parts += [(lane.seq, [lane.gen.context[-1], *d.draft]) for lane, d in zip(lanes, drafted)]
    rows = target.decode_batch(parts)[len(reading):]
    picks = []
    for lane, d, r in zip(lanes, drafted, rows):
        picks.append(lane.gen.pick(r, list(d.draft), d.prop))
        target.use(lane.seq)
        target.truncate(len(lane.gen.context) + picks[-1][0])
    return picks, rows


def _learn(lanes, drafted, picks, verify_s: float, shape, n_rows: int, *, one: bool, reading: bool) -> None:
    """The cost model learns c(the batch's rows) once, from a round that was
    one pass with no prompt chunk in it; each policy learns its request's
    acceptance and its share of the seconds: what its own rows alone would
    have cost at the pace the batch showed (the prompts' chunks' passes
    included in the price, not their seconds, which are not its own)."""
    if not reading and len(shape) == 1:  # each cost model once (requests on one target share one)
        for cost in {id(lane.gen.policy.cost): lane.gen.policy.cost
                     for lane in lanes if lane.gen.policy is not None}.values():
            cost.observe_verify(n_rows, verify_s)
    for lane, d, (n_acc, _) in zip(lanes, drafted, picks):
        policy = lane.gen.policy
        if policy is None:
            continue
        share = verify_s
        if not one:
            c = policy.cost.c
            share = verify_s * c(len(d.draft) + 1) / max(sum(c(n) for n in shape), 1e-9)
        policy.observe(d.prop.source, drafted=len(d.draft), accepted=n_acc, draft_s=d.steady_s,
                       verify_s=share, batch=True, unit_s=d.unit_s)


# -- the whole round -----------------------------------------------------------
def run(target, lanes: Sequence, ks: Sequence[int], *, usable: Callable | None = None,
        reading: Sequence[tuple[int, list]] = (), use: Callable | None = None, clock=None,
        price: Callable | None = None) -> tuple[Verified, list[Drafted]]:
    """One round for `lanes`, each drafting at most its `ks` tokens, with
    the `reading` prompt chunks in the same target batch.  Where there are
    several lanes, `usable(lane, candidate)` filters what may draft, and
    `price(n)`, one pass of n rows, prices the batch for its trimming.
    `use(seq)`, where given, makes the pair decode in a lane's sequence
    (else the lane's is the one in use).  Returns the target batch and the
    drafts as made."""
    fixed = [(seq, len(tokens)) for seq, tokens in reading]
    several = not alone(lanes, fixed)
    offers = []
    for lane, k in zip(lanes, ks):
        if use is not None:
            use(lane.seq)
        offers.append(offer(lane, k, usable=usable if several else None, outlook=several))
    plans, loads = plan(lanes, offers, fixed=fixed, price=price if several else None)
    drafted = draft(lanes, plans, loads, timer=target.timer, use=use, clock=clock, price=price)
    drafted = trim_made(lanes, drafted, fixed, price)
    return verify(target, lanes, drafted, reading=reading, clock=clock), drafted


def one(target, lane, clock=None) -> Round:
    """A round of one request alone (engine.generate's)."""
    return run(target, [lane], [lane.gen.limit()], clock=clock)[0].rounds[0]
