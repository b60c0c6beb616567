"""The exact rule over whole rows, where a request changes or reads them:
a constraint masks them (core/constraint.py; docs/design.md,
"Constraints"), logit bias and penalties adjust them (core/adjust.py), and
logprobs are read from them.  `out` is the generation's output
(engine._Output: how many tokens it holds, and its config's `margins` and
`logprobs`); `history()` is the context the round's first row follows."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..core.adjust import logprob_of
from ..core.config import Decoding
from ..core.sampling import choose, probs as to_probs
from ..core.verify import verify, verify_choices


def rows_rule(decoding: Decoding, out, history: Callable[[], Sequence[int]] = list):
    """The rule on rows as the request sees them: row i is adjusted by the
    bias and the penalties of the context and the draft's first i tokens,
    then masked by the constraint's state after those tokens, and the rule
    runs on the result -- the coupled rule reads them one at a time, up to
    the first mismatch, so each row is made only once it is read (the
    constraint advanced over the draft token accepted before it); the
    residual rule makes every row first.  The constraint ends at the tokens
    emitted.  No fast path reads a row unchanged: there is no pick.alone,
    and the rows are whole (Decoding.candidates_k).  With GenConfig.logprobs,
    `pick.logprobs` holds the emitted tokens' (core.adjust.TokenLogprob),
    from the raw rows."""
    sampling, seed, constraint, adjust = decoding.sampling, decoding.seed, decoding.constraint, decoding.adjust
    keep = [] if out.cfg.margins else None  # the rows read, for bench's margins (pick.rows)
    n_probs = getattr(out.cfg, "logprobs", None)
    probs_out: list = []

    def adjusted(logits, i, draft):
        row = logits[i]
        if adjust is not None and adjust.active:
            context = history()
            row = adjust.row(row, [*context, *draft[:i]] if i else context)
        return row

    def chosen(row, i, pos):
        if constraint is not None:
            return constraint.choose(row, lambda r: choose(r, sampling, seed, pos).token,
                                     greedy=sampling.greedy, keep=keep)
        if keep is not None:
            keep.append(row)
        return choose(row, sampling, seed, pos).token

    def read(logits, draft, n, token):
        if n_probs is not None:
            emitted = [*draft[:n], token]
            probs_out[:] = [logprob_of(np.asarray(logits[i]), t, n_probs) for i, t in enumerate(emitted)]

    if sampling.greedy or decoding.rule == "gumbel":
        def pick(logits, draft, prop):
            if keep is not None:
                keep.clear()

            def choice(i):
                if i and constraint is not None:
                    constraint.advance(draft[i - 1:i])  # draft[i-1] was the choice at row i-1
                return chosen(adjusted(logits, i, draft), i, out.produced + i)
            n, token = verify_choices(draft, choice)
            if constraint is not None:
                constraint.advance([token])
            read(logits, draft, n, token)
            return n, token
    else:
        rng = np.random.default_rng(seed)

        def pick(logits, draft, prop):
            p = None if prop.probs is None else prop.probs[:len(draft)]
            rows = np.stack([adjusted(logits, i, draft) for i in range(len(draft) + 1)])
            if constraint is not None:
                rows = constraint.rows_along(rows, draft)
            if keep is not None:
                keep[:] = list(rows)
            n, token = verify(draft, p, to_probs(rows, sampling), rng)
            if constraint is not None:
                constraint.advance([*draft[:n], token])
            read(logits, draft, n, token)
            return n, token

        if constraint is not None:
            def legal(draft, prop):
                # a sampled draft keeps its first refused token: the rule rejects it (the
                # target gives it no mass) and draws from the residual there, which an
                # exact correction needs (drawn from the masked row instead, the tokens
                # that follow a refused draft token would not be the target's)
                n = constraint.legal(draft)
                return n if prop.probs is None or n == len(draft) else n + 1
            pick.legal = legal
        pick.rows, pick.logprobs = keep, probs_out
        return pick
    if constraint is not None:
        pick.legal = lambda draft, prop: constraint.legal(draft)
    pick.rows, pick.logprobs = keep, probs_out
    return pick
