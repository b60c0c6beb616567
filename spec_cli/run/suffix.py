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
- a lookup draft starts a `Copy` of the place it matched: while the
  output follows it, the copy drafts on in the original's order without
  new lookups ("prompt-run"); where the output departs from it and comes
  back, the change is remembered and applied the next time the copy
  meets the same tokens (an edit keeps the original's order, and a rename
  is drafted right after its first occurrence); an edit the output made
  before any copy followed (the first line's rename) is found behind the
  first lookup draft's match; an edit the output does not make again
  where it applies is forgotten;
- sources say where the match was and how long, so the policy learns
  each one's acceptance apart: "prompt4", "output8", "hist16";
  "prompt-multi2" where the matched context occurred more than once (its
  most frequent continuation drafts, less surely); "prompt-run8" for a
  copy the output has followed for 8-15 tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..llama.backend import common_prefix
from .proposers import Candidate, EMPTY, Oracle, Proposal

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


# source tokens before an edit that say where it applies again: the last 4,
# and failing those the last 2 (a rename met after other tokens)
EDIT_KEYS = (4, 2)


def _keys(src: Sequence[int], p: int) -> list[tuple[int, ...]]:
    """The keys of an edit at source position p, longest first."""
    return [tuple(src[p - n:p]) for n in EDIT_KEYS if p >= n]

RESYNC = 16    # how far past the divergence the source may resume
LOST = 48      # output tokens without a resync before a copy is given up
MAX_COPIES = 4


class Copy:
    """Where the output stands in a source it copies (the prompt it edits,
    an earlier answer it repeats), and what it changed.

    Aligned, the next output token is expected to be `src[pos]`.  When the
    output writes something else, the copy has diverged at that source
    position; it resumes where the output writes `src[div_pos]` again (an
    insertion), or two tokens that follow each other in the source up to
    RESYNC tokens on (a deletion or a substitution).  The edit -- the source
    tokens skipped, replaced by what the output wrote instead -- is kept in
    `edits` under the EDIT_KEYS source tokens before it, and the copy applies
    it wherever it meets those tokens again: a rename made once is drafted
    right every next time."""

    def __init__(self, index: SuffixIndex, origin: str, pos: int, seen: int, edits: dict, matched: int):
        self.index, self.origin, self.edits = index, origin, edits
        self.pos, self.seen = pos, seen
        self.aligned, self.lost = True, False
        self.div_pos = self.div_start = 0
        self.matched = matched  # tokens the output has followed the source for: sizes the offer
        self._before = 0        # ... before it diverged

    def feed(self, context: Sequence[int]) -> None:
        """Follow the output written since the last call."""
        src = self.index.tokens
        for j in range(self.seen, len(context)):
            t = context[j]
            if self.aligned:
                if self.pos < len(src) and src[self.pos] == t:
                    for key in _keys(src, self.pos) if self.edits else ():
                        if key in self.edits and self.edits[key][0][:1] != (t,):
                            del self.edits[key]  # the output kept the original here: no edit to replay
                    self.pos += 1
                    self.matched += 1
                    continue
                self.aligned, self.div_pos, self.div_start = False, self.pos, j
                self._before, self.matched = self.matched, 0
            for q in range(self.div_pos, min(len(src), self.div_pos + RESYNC)):
                if src[q] == SEPARATOR:
                    break
                if src[q] == t and (q == self.div_pos or (j > self.div_start and context[j - 1] == src[q - 1])):
                    for key in _keys(src, self.div_pos):
                        self.edits[key] = (tuple(context[self.div_start:j]), q - self.div_pos)
                    self.pos, self.aligned = q + 1, True
                    # an edit inside a long copy: the copy is as good as before it
                    self.matched = min(self._before, 8) + 1 if q == self.div_pos else 2
                    break
            else:
                if j - self.div_start > LOST:
                    self.lost = True
        self.seen = len(context)

    def _edit_key(self, p: int) -> tuple[int, ...] | None:
        """The key of the edit that applies at source position p: the longest
        of EDIT_KEYS source tokens before it that has one."""
        return next((key for key in _keys(self.index.tokens, p) if key in self.edits), None)

    def draft(self, k: int) -> list[int]:
        """Up to k tokens copied on from here, known edits applied."""
        src, out, p, spliced = self.index.tokens, [], self.pos, -1
        while len(out) < k and p < len(src) and src[p] != SEPARATOR:
            key = self._edit_key(p) if p != spliced else None
            if key is not None:
                replacement, skip = self.edits[key]
                out.extend(replacement)
                p, spliced = p + skip, p + skip
                continue
            out.append(src[p])
            p += 1
        return out[:k]


BACK = 8   # how far before a match an edit that no copy saw is looked for


def _edit_before(src: Sequence[int], i: int, out: Sequence[int], o: int, edits: dict) -> None:
    """The output matched the source just after source position i and output
    position o (exclusive ends) but not at them: an edit made before any copy
    followed (a rename in the first line).  Find where they agreed before it
    (two tokens alike, each side at most BACK tokens back) and keep the edit
    as Copy.feed would have: the source tokens between, replaced by the
    output's."""
    best = None
    for back_src in range(BACK + 1):
        for back_out in range(BACK + 1):
            a, b = i - back_src, o - back_out   # the last agreeing tokens would be src[a-1], out[b-1]
            if a < 2 or b < 2 or (best is not None and back_src + back_out >= best[0]):
                continue
            if src[a - 1] == out[b - 1] and src[a - 2] == out[b - 2] and SEPARATOR not in src[a - 2:a]:
                best = (back_src + back_out, a, b)
    if best is None or best[0] == 0:
        return
    _, a, b = best
    for key in _keys(src, a):
        edits.setdefault(key, (tuple(out[b:o]), i - a))


@dataclass
class _Offer:
    index: SuffixIndex
    origin: str          # "prompt" | "output" | "hist"
    run: bool = False    # the copy (Copy) drafts, not a lookup
    matched: int = 0     # a lookup's match length


class Lookup:
    """The free proposer: the suffix index over this generation's context
    (prompt and output) and, given one, a `Store` of earlier outputs.  A
    lookup draft starts a `Copy`; while the output follows it, the copy
    drafts ("prompt-run"), its known edits applied."""

    name = "ngram"
    cost_prior: dict[str, float] = {}

    def __init__(self, *, store: Store | None = None, depth: int = DEPTH, threshold: float = THRESHOLD,
                 alpha: float = ALPHA):
        self.store, self.threshold, self.alpha = store, threshold, alpha
        self.index = SuffixIndex(depth)
        self._prompt_len = 0
        self._offers: dict[str, _Offer] = {}
        self.copies: list[Copy] = []   # followed now, or waiting to resume after an edit
        self.copy: Copy | None = None  # the one that drafts this step
        self.edits: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}
        self.shares: list[float] = []  # the last draft's shares (the hybrid reads them)

    def prepare(self, prompt: Sequence[int], decoding=None) -> None:
        self._prompt_len = len(prompt)
        self._sync(prompt)
        self.copy, self.copies, self.edits = None, [], {}

    def _sync(self, context: Sequence[int]) -> None:
        """Keep the index equal to the context; the usual step only appends.
        The check reads the last indexed token and the length: O(1)."""
        n = len(self.index)
        if n > len(context) or (n and context[n - 1] != self.index.tokens[n - 1]):
            self.index.truncate(common_prefix(self.index.tokens, context))
            self.copy, self.copies = None, []
        self.index.extend(context[len(self.index):])

    def _origin(self, pos: int) -> str:
        return "prompt" if pos < self._prompt_len else "output"

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        if len(context) < 2:
            return []
        self._sync(context)
        self._offers = {}
        out = []
        for c in self.copies:
            c.feed(context)
        self.copies = [c for c in self.copies if not c.lost][-MAX_COPIES:]
        running = [c for c in self.copies if c.aligned and c.pos < len(c.index.tokens)]
        self.copy = max(running, key=lambda c: c.matched) if running else None
        if self.copy is not None:
            # how long the output has followed the copy says how far it will: learned apart
            source = f"{self.copy.origin}-run{bucket(self.copy.matched)}"
            self._offers[source] = _Offer(self.copy.index, self.copy.origin, run=True)
            out.append(Candidate(source, max(1, math.ceil(self.alpha * self.copy.matched))))
        sources = ([] if self.copy else [(self.index, None)]) + (
            [(self.store.index, "hist")] if self.store is not None else [])
        for index, origin in sources:
            n, key = index.match(context)
            if n == 0:
                continue
            origin = origin or self._origin(index.last[key])
            seen = sum(index.next[key].values())  # how often the context occurred
            source = f"{origin}{'' if seen == 1 else '-multi'}{bucket(n)}"
            self._offers[source] = _Offer(index, origin, matched=n)
            out.append(Candidate(source, max(1, math.ceil(self.alpha * n))))
        return out

    def peek(self, context: Sequence[int], cand: Candidate, k: int) -> list[int]:
        """What `draft` would propose for `cand`, changing nothing."""
        offer = self._offers[cand.source]
        return self.copy.draft(k) if offer.run else offer.index.follow(context, k, self.threshold)[0]

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        offer = self._offers[cand.source]
        if offer.run:
            tokens = self.copy.draft(k)
            self.shares = [1.0] * len(tokens)
        else:
            tokens, self.shares, where = offer.index.follow(context, k, self.threshold)
            if keep_going is not None:
                for i in range(1, len(tokens)):
                    if not keep_going(self.shares[:i]):
                        del tokens[i:], self.shares[i:], where[i:]
                        break
            # a lookup that copies its match's latest occurrence starts a copy there
            # (beside those that wait to resume after an edit)
            if tokens and where[0] > 0:
                self.copies.append(Copy(offer.index, offer.origin, where[0] - 1, len(context), self.edits,
                                        offer.matched))
                _edit_before(offer.index.tokens, where[0] - 1 - offer.matched, context,
                             len(context) - offer.matched, self.edits)
            if tokens and offer.origin == "hist" and self.store is not None and where[0] > 0:
                self.store.touch(where[0] - 1)
        return Proposal(tokens, None, cand.source) if tokens else EMPTY


class TimedLookup:
    """Bench's second reference ("ngram-oracle"): the lookup's own drafts,
    each cut where the target alone's text (`reference`) parts from it and
    offered as sure, so the cost model drafts exactly what will be accepted
    whenever that pays.  Its gain over the lookup's is what better timing
    could still win; the oracle's over it, what better drafts could."""

    name = "ngram-oracle"
    cost_prior: dict[str, float] = {}

    def __init__(self, reference: Sequence[int]):
        self.reference = Oracle(reference)
        self.lookup = Lookup()
        self._pick: tuple[Candidate, int] | None = None

    def prepare(self, prompt: Sequence[int], decoding=None) -> None:
        self.reference.prepare(prompt)
        self.lookup.prepare(prompt)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        self._pick = None
        ahead = self.reference.ahead(context)
        if not ahead:
            return []  # parted from the reference (a near-tie), or at its end: nothing to measure
        for cand in self.lookup.candidates(context):
            n = common_prefix(self.lookup.peek(context, cand, cand.limit), ahead)
            if n and (self._pick is None or n > self._pick[1]):
                self._pick = (cand, n)
        return [Candidate(self.name, self._pick[1])] if self._pick else []

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        chosen, n = self._pick
        prop = self.lookup.draft(context, chosen, min(k, n))  # the lookup's copies and edits go on as its own
        return Proposal(prop.tokens, None, self.name)
