"""The free lookup: a suffix index over token sequences, and the proposer
that drafts from it over the prompt, the output so far and earlier
outputs (SuffixDecoding, Oliaro et al. 2024; llama.cpp's ngram caches).

`SuffixIndex` is a suffix trie cut at `depth` tokens, kept as hash maps:
for every context of 1..depth tokens that occurred, how often each token
followed it (`next`), and where it last occurred (`last`).  Contexts are
keyed by a polynomial hash built backwards from their last token, so a
new token updates `depth` entries and a lookup reads at most `depth`:
neither grows with the sequence.  (A hash collision can only cost a
draft: every draft is verified.)

`Lookup` drafts from it:

- the longest context that matches the tokens before the cursor wins;
  its continuation follows the most frequent child, token by token, and
  stops where that child's share of its parent's count falls below
  `threshold` (the continuation became uncertain);
- the longest match sizes the offer: at most ALPHA x its length;
- after a draft that was wholly accepted whose bonus token is the
  original's next one, it keeps copying from there without a new lookup
  (edits keep the original's order);
- sources say where the match was and how long, so the policy learns
  each one's acceptance apart: "prompt4", "output8", "hist16", and
  "prompt-run" for a continued copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .proposers import Candidate, EMPTY, Proposal

MOD = (1 << 61) - 1
MUL = 1_000_003
DEPTH = 16
ALPHA = 2.0        # most tokens offered per token of match
THRESHOLD = 0.3    # a continuation whose share falls below this ends the draft
SEPARATOR = -1     # between entries of a store: no context spans two


def bucket(n: int) -> int:
    """Match lengths the policy learns apart: 1, 2, 3, 4-7, 8-15, 16+."""
    return n if n < 4 else 4 if n < 8 else 8 if n < 16 else 16


class SuffixIndex:
    def __init__(self, depth: int = DEPTH):
        self.depth = depth
        self.tokens: list[int] = []
        self.next: dict[int, dict[int, int]] = {}
        self.last: dict[int, int] = {}  # context -> position of the token that last followed it

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, new: Sequence[int]) -> None:
        toks, depth, nxt, last = self.tokens, self.depth, self.next, self.last
        for t in new:
            i = len(toks)
            h = 0
            for n in range(1, min(depth, i) + 1 if t != SEPARATOR else 0):
                h = (h * MUL + toks[i - n] + 2) % MOD
                d = nxt.get(h)
                if d is None:
                    nxt[h] = {t: 1}
                else:
                    d[t] = d.get(t, 0) + 1
                last[h] = i
            toks.append(t)

    def forget(self, start: int, end: int) -> None:
        """Take back the counts of positions start..end-1 (a store's evicted
        entry); the tokens stay, so positions keep their meaning."""
        toks = self.tokens
        for i in range(start, end):
            h = 0
            for n in range(1, min(self.depth, i) + 1 if toks[i] != SEPARATOR else 0):
                h = (h * MUL + toks[i - n] + 2) % MOD
                d = self.next.get(h)
                if d is not None and toks[i] in d:
                    d[toks[i]] -= 1
                    if not d[toks[i]]:
                        del d[toks[i]]
                    if not d:
                        del self.next[h]
                        self.last.pop(h, None)

    def truncate(self, n: int) -> None:
        """Drop positions n.. (a context that was rewound or rewritten)."""
        if n < len(self.tokens):
            self.forget(n, len(self.tokens))
            del self.tokens[n:]

    def match(self, seq: Sequence[int]) -> tuple[int, int]:
        """(length, key) of the longest context ending `seq` that occurred;
        (0, 0) if none."""
        best, key, h = 0, 0, 0
        for n in range(1, min(self.depth, len(seq)) + 1):
            t = seq[len(seq) - n]
            if t == SEPARATOR:
                break
            h = (h * MUL + t + 2) % MOD
            if h not in self.next:
                break  # a longer context cannot have occurred if this one did not
            best, key = n, h
        return best, key

    def follow(self, seq: Sequence[int], k: int, threshold: float) -> tuple[list[int], list[float], list[int]]:
        """Up to k tokens after `seq` by the most frequent children; their
        shares; and after each, where in `tokens` the copy of the latest
        occurrence stands (-1 once the draft left that occurrence's order)."""
        tail = list(seq[-self.depth:])
        out: list[int] = []
        shares: list[float] = []
        where: list[int] = []
        pos = -1
        for i in range(k):
            n, key = self.match(tail)
            if n == 0:
                break
            children = self.next[key]
            count = max(children.values())
            latest = self.tokens[self.last[key]]
            # the most frequent child; among equals, the one that came latest
            token = latest if children.get(latest) == count else next(t for t, c in children.items() if c == count)
            share = count / sum(children.values())
            if out and share < threshold:
                break
            if i == 0:
                pos = self.last[key]
            pos = pos + 1 if 0 <= pos < len(self.tokens) and self.tokens[pos] == token else -1
            out.append(token)
            shares.append(share)
            where.append(pos)
            tail.append(token)
            if len(tail) > self.depth:
                del tail[0]
        return out, shares, where


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
        if self.index.tokens:
            self.index.extend([SEPARATOR])
        start = len(self.index)
        self.index.extend(doc)
        self._entries[start] = (len(self.index), self._clock)
        self._keys[doc] = start
        self.tokens += len(doc)
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


@dataclass
class _Offer:
    index: SuffixIndex
    origin: str          # "prompt" | "output" | "hist"
    copy_from: int = -1  # a continued copy: the position to copy from


class Lookup:
    """The free proposer: the suffix index over this generation's context
    (prompt and output) and, given one, a `Store` of earlier outputs."""

    name = "ngram"
    cost_prior: dict[str, float] = {}

    def __init__(self, *, store: Store | None = None, depth: int = DEPTH, threshold: float = THRESHOLD,
                 alpha: float = ALPHA):
        self.store, self.threshold, self.alpha = store, threshold, alpha
        self.index = SuffixIndex(depth)
        self._prompt_len = 0
        self._offers: dict[str, _Offer] = {}
        # the last draft: (context length, tokens, offer, where its copy stands)
        self._last: tuple[int, list[int], _Offer, int] | None = None
        self.shares: list[float] = []  # the last draft's shares (the hybrid reads them)

    def prepare(self, prompt: Sequence[int]) -> None:
        self._prompt_len = len(prompt)
        self._sync(prompt)
        self._last = None

    def _sync(self, context: Sequence[int]) -> None:
        """Keep the index equal to the context; the usual step only appends.
        The check reads the last indexed token and the length: O(1)."""
        n = len(self.index)
        if n > len(context) or (n and context[n - 1] != self.index.tokens[n - 1]):
            from ..llama.backend import common_prefix
            self.index.truncate(common_prefix(self.index.tokens, context))
        self.index.extend(context[len(self.index):])

    def _origin(self, pos: int) -> str:
        return "prompt" if pos < self._prompt_len else "output"

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        if len(context) < 2:
            return []
        self._sync(context)
        self._offers = {}
        out = []
        run = self._continued(context)
        if run is not None:
            offer, pos, tokens = run
            source = f"{offer.origin}-run"
            self._offers[source] = _Offer(offer.index, offer.origin, pos)
            out.append(Candidate(source, len(tokens) - pos))
        sources = [(self.index, None)] + ([(self.store.index, "hist")] if self.store is not None else [])
        for index, origin in sources:
            n, key = index.match(context)
            if n == 0:
                continue
            origin = origin or self._origin(index.last[key])
            source = f"{origin}{bucket(n)}"
            self._offers[source] = _Offer(index, origin)
            out.append(Candidate(source, max(1, math.ceil(self.alpha * n))))
        return out

    def _continued(self, context: Sequence[int]):
        """After a wholly accepted draft whose bonus token is the original's
        next: copy on from there."""
        if self._last is None:
            return None
        length, draft, offer, pos = self._last
        tokens = offer.index.tokens
        if (pos < 0 or len(context) != length + len(draft) + 1 or pos + 1 >= len(tokens)
                or context[-1] != tokens[pos] or list(context[length:length + len(draft)]) != draft):
            return None
        return offer, pos + 1, tokens

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        offer = self._offers[cand.source]
        if offer.copy_from >= 0:
            toks = offer.index.tokens
            end = offer.copy_from
            while end < min(len(toks), offer.copy_from + k) and toks[end] != SEPARATOR:
                end += 1
            tokens = list(toks[offer.copy_from:end])
            self.shares, where = [1.0] * len(tokens), list(range(offer.copy_from + 1, end + 1))
        else:
            tokens, self.shares, where = offer.index.follow(context, k, self.threshold)
            if keep_going is not None:
                for i in range(1, len(tokens)):
                    if not keep_going(self.shares[:i]):
                        del tokens[i:], self.shares[i:], where[i:]
                        break
        if not tokens:
            self._last = None
            return EMPTY
        self._last = (len(context), tokens, offer, where[-1])
        if offer.origin == "hist" and self.store is not None and where[-1] > 0:
            self.store.touch(where[-1] - 1)
        return Proposal(tokens, None, cand.source)
