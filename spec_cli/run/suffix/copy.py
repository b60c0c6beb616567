"""A copy of the place a lookup matched: it drafts on in the original's
order while the output follows, and remembers the edits the output made
(see the package's docstring)."""

from __future__ import annotations

from typing import Sequence

from .index import SEPARATOR, SuffixIndex


# source tokens before an edit that say where it applies again: the last 4,
# and failing those the last 2 (a rename met after other tokens)
EDIT_KEYS = (4, 2)


def _keys(src: Sequence[int], p: int) -> list[tuple[int, ...]]:
    """The keys of an edit at source position p, longest first."""
    return [tuple(src[p - n:p]) for n in EDIT_KEYS if p >= n]

RESYNC = 16    # how far past the divergence the source may resume
LOST = 48      # output tokens without a resync before a copy is given up
MAX_COPIES = 4
# a copy the output has left three times or more, on average within this many
# tokens followed, is a pattern the output varies, not a text it copies ("patch")
PATCHY = 16
PATCHY_BREAKS = 3


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
        self.followed, self.breaks = matched, 0  # its record: tokens followed, times left

    @property
    def patchy(self) -> bool:
        """The output keeps leaving this copy (a completion writing a second
        function after the first): however long it has followed it since,
        the next break is near.  A 31-token draft from such a copy, 16
        tokens after its fourth break, took 1 token: 13 tokens' time lost
        on this CPU."""
        return self.breaks >= PATCHY_BREAKS and self.followed < PATCHY * self.breaks

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
                    self.followed += 1
                    continue
                self.aligned, self.div_pos, self.div_start = False, self.pos, j
                self._before, self.matched = self.matched, 0
                self.breaks += 1
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


def edit_before(src: Sequence[int], i: int, out: Sequence[int], o: int, edits: dict) -> None:
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
