"""The suffix index: a suffix trie cut at `depth` tokens, kept as hash maps
(see the package's docstring)."""

from __future__ import annotations

from typing import Sequence

MOD = (1 << 61) - 1
MUL = 1_000_003
DEPTH = 16
SEPARATOR = -1     # between entries of a store: no context spans two


def bucket(n: int) -> int:
    """Match lengths the policy learns apart: 1, 2, 3, 4-7, 8-15, 16-31,
    32-63, 64+ (past the index's depth only a copy's run: how long the
    output has followed it)."""
    return n if n < 4 else 4 if n < 8 else 8 if n < 16 else 16 if n < 32 else 32 if n < 64 else 64


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
