"""Earlier outputs, for the free lookup to draft from across requests.

A server keeps one `History`: after each request it stores the end of the
prompt and the output; the n-gram lookup (proposers.NGram) also searches
it, so a regenerated answer, a repeated edit or a completion asked for
again drafts for free (SuffixDecoding, Oliaro et al. 2024, keeps such a
store across requests).  Bounded in tokens; the least recently used
entries (stored or drafted from) go first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

PROMPT_TAIL = 64  # prompt tokens kept before each output: what a repeated request matches on


class History:
    def __init__(self, *, max_tokens: int = 1 << 16, n_min: int = 2, n_max: int = 4):
        self.max_tokens, self.n_min, self.n_max = max_tokens, n_min, n_max
        self._docs: OrderedDict[int, list[int]] = OrderedDict()
        self._keys: dict[tuple[int, ...], int] = {}   # whole entry -> id (a repeat is not stored twice)
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}  # n-gram -> (id, position after it)
        self._size = self._stale = self._next = 0

    def __len__(self) -> int:
        return len(self._docs)

    @property
    def tokens(self) -> int:
        return self._size

    def add(self, prompt: Sequence[int], output: Sequence[int]) -> None:
        """Store an output with the end of its prompt."""
        if not output:
            return
        doc = list(prompt[-PROMPT_TAIL:]) + list(output)
        key = tuple(doc)
        if key in self._keys:
            self._docs.move_to_end(self._keys[key])
            return
        doc_id, self._next = self._next, self._next + 1
        self._docs[doc_id] = doc
        self._keys[key] = doc_id
        self._size += len(doc)
        self._index_doc(doc_id, doc)
        while self._size > self.max_tokens and len(self._docs) > 1:
            old_id, old = self._docs.popitem(last=False)
            del self._keys[tuple(old)]
            self._size -= len(old)
            self._stale += len(old)
        if self._stale > self._size:  # most index entries point at evicted entries: rebuild
            self._index, self._stale = {}, 0
            for i, d in self._docs.items():
                self._index_doc(i, d)

    def _index_doc(self, doc_id: int, doc: list[int]) -> None:
        for end in range(len(doc) - 1):
            for n in range(self.n_min, self.n_max + 1):
                if end + 1 >= n:
                    self._index[tuple(doc[end + 1 - n:end + 1])] = (doc_id, end + 1)

    def lookup(self, context: Sequence[int], *, extend_to: int = 16) -> tuple[list[int], int, int] | None:
        """The latest stored place where the context's last tokens occur:
        (entry, position after the match, match length up to `extend_to`),
        the longest n-gram first; None if nothing matches."""
        for n in range(min(self.n_max, len(context)), self.n_min - 1, -1):
            hit = self._index.get(tuple(context[-n:]))
            if hit is None or hit[0] not in self._docs:
                continue
            doc_id, nxt = hit
            doc = self._docs[doc_id]
            if nxt >= len(doc):
                continue
            length = n
            while (length < extend_to and nxt - length - 1 >= 0 and len(context) - length - 1 >= 0
                   and doc[nxt - length - 1] == context[len(context) - length - 1]):
                length += 1
            self._docs.move_to_end(doc_id)
            return doc, nxt, length
        return None
