"""What the cost model expects of a lookup draft before it has seen any
(Lookup.acceptance_prior), by where it matched and how long."""

from __future__ import annotations

from ...core.acceptance import unknown_prior
from ...core.source import Source

# A lookup's first token, by how long its match was (suffix.bucket): a
# context seen once with one continuation ("prompt4"), one seen more often
# whose most frequent continuation drafts ("prompt-multi4"), or a copy the
# output has followed for that many tokens ("prompt-run4").  Once a first
# token holds, the copy mostly goes on: later tokens start from LATER.  A copy
# followed for 32 or 64 tokens (a code edit's unchanged lines) goes on surely:
# it drafts long where a long batch costs little a row.
FIRST = {"": {1: 0.35, 2: 0.5, 3: 0.65, 4: 0.75, 8: 0.95, 16: 0.98},
         "multi": {1: 0.12, 2: 0.3, 3: 0.6, 4: 0.7, 8: 0.9, 16: 0.95},
         "run": {1: 0.5, 2: 0.65, 3: 0.8, 4: 0.85, 8: 0.88, 16: 0.97, 32: 0.985, 64: 0.99},
         # a copy the output keeps leaving (suffix.copy.Copy.patchy): a break is near
         "patch": {1: 0.4, 2: 0.5, 3: 0.6, 4: 0.7, 8: 0.8, 16: 0.85, 32: 0.9, 64: 0.92}}
LATER = (0.75, 0.82, 0.82, 0.92)   # tokens 2, 3, 4, and 5 on
OUTPUT = 0.6   # the output repeats itself less surely than it copies its prompt
PREDICTION = "prediction"  # the origin of drafts from a client's prediction (Lookup.predict)


def lookup_prior(source: str, n: int) -> list[float]:
    """Acceptance chances for draft positions 1..n before anything is seen."""
    src = Source.of(source)
    if not src.is_lookup:
        return unknown_prior(source, n)
    # the client's prediction is the answer it expects: trusted as a copy the output follows
    kind = "run" if src.origin == PREDICTION else src.kind
    first = FIRST.get(kind, FIRST[""]).get(src.matched, 0.7)
    later = [LATER[min(i, len(LATER) - 1)] for i in range(n - 1)]
    if kind in ("run", "patch"):
        later = [max(first, x) for x in later]
    rates = [first] + later
    return [r * OUTPUT if src.origin == "output" else r for r in rates][:n]
