"""The exact rule under a constraint (core/constraint.py; docs/design.md,
"Constraints"): the verify rows masked as the rule reads them.  `out` is
the generation's output (engine._Output: how many tokens it holds, and
its config's `margins`)."""

from __future__ import annotations

import numpy as np

from ..core.config import Decoding
from ..core.sampling import choose, probs as to_probs
from ..core.verify import verify, verify_choices


def masked_rule(decoding: Decoding, out):
    """The rule under a constraint (core/constraint.py): row i is masked by
    the constraint's state after the draft's first i tokens, and the rule
    runs on the masked rows -- the coupled rule reads them one at a time, up
    to the first mismatch, so each row's mask is computed only once it is
    read, with the constraint advanced over the draft token accepted before
    it; the residual rule masks every row first.  The constraint ends at the
    tokens emitted.  No fast path reads a row unmasked: there is no
    pick.alone, and the rows are whole (Generation.candidates_k)."""
    sampling, seed, constraint = decoding.sampling, decoding.seed, decoding.constraint
    keep = [] if out.cfg.margins else None  # the masked rows read, for bench's margins (pick.rows)
    if sampling.greedy or decoding.rule == "gumbel":
        def pick(logits, draft, prop):
            if keep is not None:
                keep.clear()

            def choice(i):
                if i:
                    constraint.advance(draft[i - 1:i])  # draft[i-1] was the choice at row i-1
                return constraint.choose(logits[i], lambda row: choose(row, sampling, seed, out.produced + i).token,
                                         greedy=sampling.greedy, keep=keep)
            n, token = verify_choices(draft, choice)
            constraint.advance([token])
            return n, token
    else:
        rng = np.random.default_rng(seed)

        def pick(logits, draft, prop):
            p = None if prop.probs is None else prop.probs[:len(draft)]
            rows = constraint.rows_along(logits, draft)
            if keep is not None:
                keep[:] = list(rows)
            n, token = verify(draft, p, to_probs(rows, sampling), rng)
            constraint.advance([*draft[:n], token])
            return n, token

        def legal(draft, prop):
            # a sampled draft keeps its first refused token: the rule rejects it (the
            # target gives it no mass) and draws from the residual there, which an
            # exact correction needs (drawn from the masked row instead, the tokens
            # that follow a refused draft token would not be the target's)
            n = constraint.legal(draft)
            return n if prop.probs is None or n == len(draft) else n + 1
        pick.legal, pick.rows = legal, keep
        return pick
    pick.legal, pick.rows = (lambda draft, prop: constraint.legal(draft)), keep
    return pick
