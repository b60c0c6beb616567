"""Earlier outputs kept for the lookup: a server's requests, in one
suffix index, least recently used out."""

from __future__ import annotations

from typing import Sequence

from .index import DEPTH, SEPARATOR, SuffixIndex


class Store:
    """Earlier outputs of this process (a server's requests), each with the
    end of its prompt, in one SuffixIndex; bounded in tokens, the least
    recently stored or drafted-from entries go first."""

    PROMPT_TAIL = 64

    def __init__(self, *, max_tokens: int = 1 << 16, depth: int = DEPTH):
        self.max_tokens = max_tokens
        self.index = SuffixIndex(depth)
        self._entries: dict[int, tuple[int, int]] = {}  # start -> (end, last use)
        self._keys: dict[tuple[int, ...], int] = {}
        self._clock = 0
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, prompt: Sequence[int], output: Sequence[int]) -> None:
        if not output:
            return
        doc = tuple(prompt[-self.PROMPT_TAIL:]) + tuple(output)
        self._clock += 1
        if doc in self._keys:
            start = self._keys[doc]
            self._entries[start] = (self._entries[start][0], self._clock)
            return
        self._append(doc, self._clock)
        while self.tokens > self.max_tokens and len(self._entries) > 1:
            old = min(self._entries, key=lambda s: self._entries[s][1])
            end, _ = self._entries.pop(old)
            del self._keys[tuple(self.index.tokens[old:end])]
            self.index.forget(old, end)
            self.tokens -= end - old
        if len(self.index) > 2 * self.max_tokens + 1024:
            self._compact()

    def _compact(self) -> None:
        """Re-index the live entries alone (the evicted ones' tokens go)."""
        entries = sorted(self._entries.items(), key=lambda kv: kv[1][1])
        docs = [(tuple(self.index.tokens[s:e]), used) for s, (e, used) in entries]
        self.index = SuffixIndex(self.index.depth)
        self._entries, self._keys, self.tokens = {}, {}, 0
        for doc, used in docs:
            self._append(doc, used)

    def _append(self, doc: tuple[int, ...], used: int) -> None:
        """Index an entry after the others (a separator between them)."""
        if self.index.tokens:
            self.index.extend([SEPARATOR])
        start = len(self.index)
        self.index.extend(doc)
        self._entries[start] = (len(self.index), used)
        self._keys[doc] = start
        self.tokens += len(doc)

    def touch(self, pos: int) -> None:
        """The entry holding position `pos` was drafted from."""
        self._clock += 1
        for start, (end, _) in self._entries.items():
            if start <= pos < end:
                self._entries[start] = (end, self._clock)
                return
