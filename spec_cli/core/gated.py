"""What the constraints that wrap another share (core/thinking.py: the
thinking before a constraint starts; core/lazy.py: a tool grammar that
waits for a call to open): the reply's tokens and their text so far, kept
to be stepped back over, and the rule's face where some states let every
token through (rows go unmasked) and others are the inner constraint's
(`_inner_here`) or the wrapper's own mask (`masked`)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .constraint import allows


class Gated:
    def __init__(self, inner, n_vocab: int, piece: Callable[[int], bytes]):
        self.inner, self.piece = inner, piece
        self.tokens: list[int] = []
        self.ends: list[int] = []      # the text's length after each token
        self.text = bytearray()
        self._all = np.full((n_vocab + 31) // 32, -1, dtype=np.int32)  # every token allowed

    def _append(self, token: int) -> int:
        """`token` and its text kept; the text's length before it."""
        before = len(self.text)
        self.tokens.append(token)
        self.text += self.piece(token)
        self.ends.append(len(self.text))
        return before

    def _remove(self) -> None:
        """The last token and its text dropped."""
        self.tokens.pop()
        self.ends.pop()
        del self.text[self.ends[-1] if self.ends else 0:]

    # -- what a wrapper says of its state -------------------------------------------------
    def _inner_here(self):
        """The inner constraint where it decides the next token, else None."""
        raise NotImplementedError

    def _free(self) -> bool:
        """Every token is allowed here: rows go unmasked."""
        raise NotImplementedError

    def masked(self, row: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def legal(self, tokens: Sequence[int]) -> int:
        raise NotImplementedError

    def advance(self, tokens: Sequence[int]) -> None:
        raise NotImplementedError

    def rollback(self, n: int) -> None:
        raise NotImplementedError

    # -- the rule's rows (core.constraint.Constraint's face) ---------------------------------
    allows = staticmethod(allows)

    def choose(self, row: np.ndarray, pick: Callable[[np.ndarray], int], *, greedy: bool,
               keep: list | None = None) -> int:
        inner = self._inner_here()
        if inner is not None:
            return inner.choose(row, pick, greedy=greedy, keep=keep)
        if not self._free():
            row = self.masked(row)
        if keep is not None:
            keep.append(row)
        return pick(row)

    def rows_along(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        """Every row of a verify batch as the rule reads it, row i at the
        state after draft[:i], as far as the draft is legal; the state is
        back where it was after."""
        out = np.array(rows[:len(draft) + 1], dtype=np.float32)
        n = self.legal(draft)
        for i in range(n + 1):
            if not self._free():
                out[i] = self.masked(rows[i])
            if i < n:
                self.advance([draft[i]])
        self.rollback(n)
        return out
