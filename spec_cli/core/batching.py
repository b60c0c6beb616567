"""A target batch of several requests priced as llama.cpp runs it: its
passes over the weights, drafts made together by one draft model, what else
shares a request's batch (`Load`), and a batch's plan trimmed where its
drafts cost more than they yield.  Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from .cost import expected_tokens


def passes(parts) -> list[int]:
    """The rows of each pass llama.cpp makes over the weights for a batch of
    (sequence, rows) parts, each sequence a KV cache of its own
    (llama_batch_allocr::split_equal, sequential): a pass takes the lowest
    sequence with rows left and the ones that follow it by one with rows
    left, the same number of rows from each (the fewest any has left).  So
    four sequences of one row each are one pass, [5, 1, 1, 1] two (4 rows,
    then 4), sequences 0 and 2 two."""
    left: dict[int, int] = {}
    for seq, rows in parts:
        if rows > 0:
            left[seq] = left.get(seq, 0) + rows
    out = []
    while left:
        seqs = sorted(left)
        run = seqs[:1]
        for seq in seqs[1:]:
            if seq != run[-1] + 1:
                break
            run.append(seq)
        n = min(left[seq] for seq in run)
        out.append(n * len(run))
        for seq in run:
            left[seq] -= n
            if not left[seq]:
                del left[seq]
    return out


def pooled_s(lengths, d: float, price) -> float:
    """Seconds of drafts of these lengths made together by one draft model,
    a draft batch a position (proposers.draft.draft_together), at `d`
    seconds a token alone: a batch of r rows costs d x price(r)/price(1),
    the target's curve standing for the draft's (the same machine, a model
    of the same family; on a GPU nearly flat, on a CPU nearly linear)."""
    if d <= 0 or not lengths:
        return 0.0
    c1 = price(1)
    return sum(d * price(sum(n > j for n in lengths)) / c1 for j in range(max(lengths)))


def pays_together(price, d: float, n: int, k_max: int, margin: float = 1.0) -> bool:
    """Could `n` requests each drafting k tokens (1 <= k <= k_max) that are
    all accepted, made together by one draft model (pooled_s, `d` seconds a
    token alone) and verified in one pass, make `margin` times the tokens a
    second of their plain steps?  (Where not, a draft model is no use to a
    batch that keeps n requests running: on a CPU, rows cost nearly what
    tokens do from a few requests on.)"""
    plain = n / price(n)
    return any(n * (k + 1) / (price(n * (k + 1)) + pooled_s([k] * n, d, price)) > margin * plain
               for k in range(1, k_max + 1))


def trim_drafts(fixed, drafts, price) -> list[int]:
    """The batch's plan made no slower: each request chose its draft in turn
    (Load), so together the drafts may split the batch into passes that
    cost more than they yield.  `fixed`: (sequence, rows) parts that stay
    (prompt chunks, an editor's rows); `drafts`: per request (sequence, k,
    chances, seconds a drafted token, drafted together with the other
    pooled ones: a draft model's, pooled_s); `price(n)`: one pass of n
    rows.  Shortens drafts -- to nothing, or to another request's length so
    that they share passes -- while that makes more tokens a second for
    the whole batch; returns each request's k.

    Where the round has fixed parts, their seconds are paid whatever the
    drafts, and a round's tokens a second would count them against no
    token: the drafts would look cheap beside a prompt's chunk, and the
    passes they split it into cost more than they yield.  There a draft
    must yield, for the seconds it adds, the tokens a second the batch
    makes without the fixed parts (its best plan), as a second spent
    elsewhere would."""
    ks = [k for _, k, _, _, _ in drafts]
    pool_d = max((d for *_, d, pooled in drafts if pooled), default=0.0)

    def cost(ks, fixed) -> tuple[float, float]:  # (tokens made, seconds)
        parts = list(fixed) + [(seq, k + 1) for (seq, *_), k in zip(drafts, ks)]
        seconds = (sum(price(n) for n in passes(parts))
                   + sum(k * d for (*_, d, pooled), k in zip(drafts, ks) if not pooled)
                   + pooled_s([k for (*_, pooled), k in zip(drafts, ks) if pooled], pool_d, price))
        made = sum(expected_tokens(list(chances[:k])) for (_, _, chances, _, _), k in zip(drafts, ks))
        return made, seconds

    def rate(ks) -> float:
        made, seconds = cost(ks, ())
        return made / seconds if seconds > 0 else 0.0

    best = _shortened(ks, rate)
    if not fixed:
        return best
    r = rate(best)

    def value(ks) -> float:
        made, seconds = cost(ks, fixed)
        return made - r * seconds
    return _shortened(ks, value)


def _shortened(ks: list[int], score) -> list[int]:
    """Shorten drafts -- one (to nothing, or to another's length), or all
    to at most one length (nothing included: passes are shared, so one
    draft cut alone may only split them further) -- while that raises
    `score`; the plan where no such move does."""
    best = score(ks)
    while True:
        move = None
        lengths = {0, *ks}
        trials = [ks[:i] + [shorter] + ks[i + 1:] for i, k in enumerate(ks) for shorter in lengths if shorter < k]
        trials += [[min(k, cap) for k in ks] for cap in lengths]
        for trial in trials:
            v = score(trial)
            if v > best + 1e-9 * abs(best):
                best, move = v, trial
        if move is None:
            return ks
        ks = move


@dataclass(frozen=True)
class Load:
    """What else runs in the same target batch (several requests at once,
    run/batch.py): the other sequences' rows, the tokens they are expected
    to yield, and the seconds their drafting adds to the step.  Alone, all
    three are 0 and every formula below is the one-sequence one.

    Where `shape` is given (the batch's parts as (sequence, rows), this
    request's `seq` among them with one row), a step costs what llama.cpp's
    passes over those parts cost (`passes`), not c(all rows): a draft that
    makes its sequence longer than the others' costs a pass of its own.
    `following`: the requests not planned yet, as (sequence, the chances of
    the draft each could make), each taken to draft as many tokens as this
    one (where its chances reach), so that the first to plan sees what a
    batch drafting together costs and yields, not only what drafting alone
    among plain rows does.  `pool`: the lengths of the drafts planned before
    this one that a draft model makes together (a draft batch a position,
    pooled_s), at `pool_d` seconds a token alone; `extra_s` is the others'
    drafting, made each alone.  `horizon`: this request's tokens still to
    come, over which a one-time cost must pay back."""

    rows: int = 0
    tokens: float = 0.0
    extra_s: float = 0.0
    pool: tuple[int, ...] = ()
    pool_d: float = 0.0
    others: int = 0   # the other sequences: a one-time cost (a draft model's catch-up) stalls them too
    shape: tuple[tuple[int, int], ...] = ()
    seq: int = -1
    following: tuple[tuple[int, tuple[float, ...]], ...] = ()
    horizon: int = 1 << 30   # this request's tokens still to come


ALONE = Load()
