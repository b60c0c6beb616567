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


class _Rows:
    """Row i of a verify batch as the request sees it, and what is kept of it."""

    def __init__(self, decoding: Decoding, out, history: Callable[[], Sequence[int]]):
        self.d, self.out, self.history = decoding, out, history
        self.keep = [] if out.cfg.margins else None  # the rows read, for bench's margins (pick.rows)
        self.n_probs = getattr(out.cfg, "logprobs", None)
        self.logprobs: list = []

    def row(self, logits, i: int, draft: Sequence[int]) -> np.ndarray:
        """Row i adjusted by the bias and penalties of the context and draft[:i]."""
        row, adjust = logits[i], self.d.adjust
        if adjust is not None and adjust.active:
            context = self.history()
            row = adjust.row(row, [*context, *draft[:i]] if i else context)
        return row

    def choose(self, row: np.ndarray, pos: int) -> int:
        """The target's token from `row` at output position `pos`, masked by the constraint here."""
        sampling, seed, c = self.d.sampling, self.d.seed, self.d.constraint
        if c is not None:
            return c.choose(row, lambda r: choose(r, sampling, seed, pos).token, greedy=sampling.greedy,
                            keep=self.keep)
        if self.keep is not None:
            self.keep.append(row)
        return choose(row, sampling, seed, pos).token

    def read(self, logits, draft: Sequence[int], n: int, token: int) -> None:
        """The emitted tokens' logprobs, from the raw rows (GenConfig.logprobs)."""
        if self.n_probs is not None:
            emitted = [*draft[:n], token]
            self.logprobs[:] = [logprob_of(np.asarray(logits[i]), t, self.n_probs) for i, t in enumerate(emitted)]


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
    rows = _Rows(decoding, out, history)
    if decoding.sampling.greedy or decoding.rule == "gumbel":
        pick = _coupled(rows)
    else:
        pick = _residual(rows)
    pick.rows, pick.logprobs = rows.keep, rows.logprobs
    return pick


def _coupled(rows: _Rows):
    c = rows.d.constraint

    def pick(logits, draft, prop):
        if rows.keep is not None:
            rows.keep.clear()

        def choice(i):
            if i and c is not None:
                c.advance(draft[i - 1:i])  # draft[i-1] was the choice at row i-1
            return rows.choose(rows.row(logits, i, draft), rows.out.produced + i)
        n, token = verify_choices(draft, choice)
        if c is not None:
            c.advance([token])
        rows.read(logits, draft, n, token)
        return n, token
    if c is not None:
        pick.legal = lambda draft, prop: c.legal(draft)
    return pick


def _residual(rows: _Rows):
    c, sampling = rows.d.constraint, rows.d.sampling
    rng = np.random.default_rng(rows.d.seed)

    def pick(logits, draft, prop):
        p = None if prop.probs is None else prop.probs[:len(draft)]
        made = np.stack([rows.row(logits, i, draft) for i in range(len(draft) + 1)])
        if c is not None:
            made = c.rows_along(made, draft)
        if rows.keep is not None:
            rows.keep[:] = list(made)
        n, token = verify(draft, p, to_probs(made, sampling), rng)
        if c is not None:
            c.advance([*draft[:n], token])
        rows.read(logits, draft, n, token)
        return n, token

    if c is not None:
        def legal(draft, prop):
            # a sampled draft keeps its first refused token: the rule rejects it (the
            # target gives it no mass) and draws from the residual there, which an
            # exact correction needs (drawn from the masked row instead, the tokens
            # that follow a refused draft token would not be the target's)
            n = c.legal(draft)
            return n if prop.probs is None or n == len(draft) else n + 1
        pick.legal = legal
    return pick
