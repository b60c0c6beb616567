"""What drafted a candidate, typed: the policy learns each source's
acceptance apart, the statistics count by its origin, and neither parses
names.

A `Source` is a str (its name, as JSON, the live view and the policy's
tables show it) with its parts as attributes:

- `origin`: what drafted: "prompt", "output", "hist" (the lookup over the
  prompt, the output so far, earlier outputs), "draft" (a draft model),
  "oracle", ...;
- `kind`: the lookup's "" (a match seen once), "multi" (a context seen
  more than once: its most frequent continuation drafts), "run" (a copy
  the output follows); another proposer's qualifier ("ngram-oracle");
- `matched`: the lookup's match length bucket (1, 2, 3, 4, 8, 16), 0 for
  anything but a lookup.

A proposer makes its sources with `Source(...)`; a name that arrives as a
plain string (a test, a remembered table) is read by `Source.of`, the one
place a name is taken apart.
"""

from __future__ import annotations


class Source(str):
    origin: str
    kind: str
    matched: int

    def __new__(cls, origin: str, kind: str = "", matched: int = 0) -> "Source":
        self = super().__new__(cls, origin + (f"-{kind}" if kind else "") + (str(matched) if matched else ""))
        self.origin, self.kind, self.matched = origin, kind, matched
        return self

    def __reduce__(self):
        return Source, (self.origin, self.kind, self.matched)

    @classmethod
    def of(cls, name: str) -> "Source":
        """`name` as a Source ("prompt-multi4" -> prompt, multi, 4)."""
        if isinstance(name, Source):
            return name
        stem = name.rstrip("0123456789")
        origin, _, kind = stem.partition("-")
        return cls(origin, kind, int(name[len(stem):]) if len(stem) < len(name) else 0)

    @property
    def group(self) -> str:
        """What the safeguard judges as one: "prompt8" and "prompt4" alike,
        apart from "prompt-run8" and "prompt-multi2"."""
        return self.origin + (f"-{self.kind}" if self.kind else "")

    @property
    def is_lookup(self) -> bool:
        return self.matched > 0
