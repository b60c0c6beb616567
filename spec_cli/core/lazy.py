"""A tool grammar under tool_choice "auto", lazy: free text goes unmasked
until a call's opening shows in the reply (a trigger: the family's
marker, or `{"name"` where a JSON call starts); then every token so far is
given to the grammar (which admits any text before a call) and from there
on each row is masked, so that the call parses and its arguments follow
its tool's schema.  An answer that calls nothing costs no mask at all.

A reply whose free text the grammar would not take (it never will once a
call is under way: llguidance refuses it) goes on unconstrained, and its
calls are read after the fact (core/calls.py).  `Lazy` has Constraint's
face (core/constraint.py), so the rule and the drafters use it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .gated import Gated


@dataclass(frozen=True, eq=False)
class LazyGrammar:
    """The compiled grammar, the trigger texts, and `piece(token) -> bytes`."""

    inner: object   # core.constraint.Grammar
    triggers: tuple[bytes, ...]
    piece: Callable[[int], bytes]

    @property
    def spec(self):
        return self.inner.spec

    @property
    def warnings(self):
        return self.inner.warnings

    @property
    def compile_s(self) -> float:
        return self.inner.compile_s

    def start(self) -> "Lazy":
        return Lazy(self, self.inner.start())


class Lazy(Gated):
    def __init__(self, g: LazyGrammar, inner):
        super().__init__(inner, inner.n_vocab, g.piece)
        self.g = g
        self.active = False           # the grammar has every token and masks the rows
        self.broken = False           # the free text left the grammar: unconstrained to the end
        self.longest = max(len(t) for t in g.triggers)

    def _seen(self, since: int) -> bool:
        """A trigger ends in the text after byte `since`."""
        window = self.text[max(0, since - self.longest + 1):]
        return any(t in window for t in self.g.triggers)

    def _push(self, token: int) -> None:
        before = self._append(token)
        if not self.active and not self.broken and self._seen(before):
            if self.inner.legal(self.tokens) == len(self.tokens):  # the grammar takes the text so far
                self.inner.advance(self.tokens)
                self.active = True
            else:
                self.broken = True

    def _pop(self) -> None:
        self._remove()
        if self.active:
            self.inner.rollback(1)
            if not self._seen(0):  # back before the trigger: free again
                self.inner.rollback(self.inner.count)
                self.active = False
        elif self.broken and not self._seen(0):
            self.broken = False

    def _inner_here(self):
        return self.inner if self.active else None

    def _free(self) -> bool:
        return not self.active

    # -- Constraint's face --------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.tokens)

    @property
    def seconds(self) -> float:
        return self.inner.seconds

    @property
    def masks(self) -> int:
        return self.inner.masks

    @property
    def done(self) -> bool:
        return self.active and self.inner.done

    def legal(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` may come in a row (the state is left as it was)."""
        if self.active:
            return self.inner.legal(tokens)
        mark, n = len(self.tokens), 0
        while n < len(tokens) and not self.active:
            self._push(tokens[n])
            n += 1
        if self.active and n < len(tokens):  # the rest under the grammar
            n += self.inner.legal(tokens[n:])
        while len(self.tokens) > mark:
            self._pop()
        return n

    def forced(self) -> list[int]:
        return self.inner.forced() if self.active else []

    def mask(self) -> np.ndarray:
        return self.inner.mask() if self.active else self._all

    def masked(self, row: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        return self.inner.masked(row, mask) if self.active else np.asarray(row, dtype=np.float32)

    def advance(self, tokens: Sequence[int]) -> None:
        for i, t in enumerate(tokens):
            if self.active:  # the rest in one go
                rest = list(tokens[i:])
                for t2 in rest:
                    self._append(t2)
                self.inner.advance(rest)
                return
            self._push(t)

    def rollback(self, n: int) -> None:
        for _ in range(n):
            self._pop()
