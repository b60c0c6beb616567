"""A constraint that starts where the thinking ends, and a thinking budget.

A reasoning model's reply opens with its thinking (core/reasoning.py); a
JSON schema, a grammar or a tool grammar (`inner`, a core.constraint
Constraint) applies to the answer after it, so the model thinks freely and
still answers in the shape asked.  The thinking ends at the token that
completes the close marker's text; with a budget, once `budget` thinking
tokens are out the marker's tokens are the only ones allowed, and they are
forced (free drafts, as any constraint's forced tokens).  `Thinking` has
Constraint's face, so the rule and the drafters use it unchanged: while
thinking (not forcing) every token is allowed and rows go unmasked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .constraint import apply_mask
from .gated import Gated


@dataclass(frozen=True, eq=False)
class ThinkingGrammar:
    """What a generation's constraint starts from (GenConfig.grammar):
    the inner Grammar (None: free after the thinking), the close marker's
    text and tokens, the budget (None: none), and `piece(token) -> bytes`."""

    inner: object
    close: bytes
    close_tokens: tuple[int, ...]
    budget: int | None
    piece: Callable[[int], bytes]
    n_vocab: int

    @property
    def spec(self):
        return None if self.inner is None else self.inner.spec

    @property
    def warnings(self) -> tuple[str, ...]:
        return () if self.inner is None else self.inner.warnings

    @property
    def compile_s(self) -> float:
        return 0.0 if self.inner is None else self.inner.compile_s

    def start(self) -> "Thinking":
        return Thinking(self, None if self.inner is None else self.inner.start())


class Thinking(Gated):
    def __init__(self, g: ThinkingGrammar, inner):
        super().__init__(inner, g.n_vocab, g.piece)  # tokens and text: the thinking's, as far as it goes
        self.g = g
        self.ended = False
        self.after = 0                  # tokens the inner constraint has followed
        self._seconds = 0.0

    # -- the thinking's own state -----------------------------------------------
    def _push(self, token: int) -> None:
        before = self._append(token)
        # the marker completed by this token (it may hold the marker's last bytes only)
        if self.g.close in self.text[max(0, before - len(self.g.close) + 1):]:
            self.ended = True

    def _pop(self) -> None:
        self._remove()
        self.ended = False

    def _forcing(self) -> list[int] | None:
        """The close marker's tokens still to come where the budget is spent, else None."""
        b = self.g.budget
        if self.ended or b is None or len(self.tokens) < b:
            return None
        out, want = self.tokens[b:], self.g.close_tokens
        return list(want[len(out):]) if tuple(out) == want[:len(out)] else None

    @property
    def count(self) -> int:
        return len(self.tokens) + self.after

    @property
    def seconds(self) -> float:
        return self._seconds + (self.inner.seconds if self.inner is not None else 0.0)

    @property
    def masks(self) -> int:
        return self.inner.masks if self.inner is not None else 0

    @property
    def done(self) -> bool:
        return self.ended and self.inner is not None and self.inner.done

    # -- what may come ---------------------------------------------------------------
    def legal(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` (a draft after the tokens emitted) may come in a row."""
        n = pushed = 0
        while n < len(tokens) and not self.ended:
            f = self._forcing()
            if f is not None and tokens[n] != f[0]:
                break
            self._push(tokens[n])
            n = pushed = n + 1
        if self.ended and n < len(tokens):
            n += self.inner.legal(tokens[n:]) if self.inner is not None else len(tokens) - n
        for _ in range(pushed):
            self._pop()
        return n

    def forced(self) -> list[int]:
        if not self.ended:
            return self._forcing() or []
        return self.inner.forced() if self.inner is not None else []

    def mask(self) -> np.ndarray:
        if self.ended:
            return self.inner.mask() if self.inner is not None else self._all
        f = self._forcing()
        if f is None:
            return self._all
        out = np.zeros_like(self._all)
        out[f[0] >> 5] = np.int32(np.uint32(1 << (f[0] & 31)).view(np.int32))
        return out

    def _inner_here(self):
        return self.inner if self.ended else None

    def _free(self) -> bool:
        return (not self.ended and self._forcing() is None) or (self.ended and self.inner is None)

    def masked(self, row: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is None and self._free():
            return np.asarray(row, dtype=np.float32)
        if self.ended and self.inner is not None:
            return self.inner.masked(row, mask)
        t0 = time.perf_counter()
        out = apply_mask(row, self.mask() if mask is None else mask)
        self._seconds += time.perf_counter() - t0
        return out

    # -- moving on -------------------------------------------------------------------
    def advance(self, tokens: Sequence[int]) -> None:
        n = 0
        while n < len(tokens) and not self.ended:
            self._push(tokens[n])
            n += 1
        if n < len(tokens):
            if self.inner is not None:
                self.inner.advance(tokens[n:])
            self.after += len(tokens) - n

    def rollback(self, n: int) -> None:
        back = min(n, self.after)
        if back:
            if self.inner is not None:
                self.inner.rollback(back)
            self.after -= back
        for _ in range(n - back):
            self._pop()
