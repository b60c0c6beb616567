"""What the policy expects of a draft: per-position acceptance chances,
learned online from their priors, and a lookup text's copiability shared
by every source of the same origin (a log-odds shift); and what earlier
generations on the same target saw of each source, where the next one
starts from (`Learned`).  Pure, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cost import EMA
from .source import Source


@dataclass
class Acceptance:
    """Per-position acceptance chances of one proposer, learned online from
    its prior (see `prior`)."""

    rates: list[float]

    def observe(self, drafted: int, accepted: int) -> None:
        for i in range(min(drafted, len(self.rates))):
            if i > accepted:  # never reached: an earlier token was rejected
                break
            hit = 1.0 if i < accepted else 0.0
            self.rates[i] += EMA * (hit - self.rates[i])


LEARNED_WINDOW = 32  # observations a position of `Learned` averages over, at most


class Learned:
    """Each source's acceptance a position, as every generation on the same
    target saw it, so that the next generation starts from that instead of
    the proposer's prior: a lookup match that earlier requests showed to
    fail (a chat's every answer starting after the same template tokens, so
    that earlier answers' first words look like a sure continuation) is not
    drafted again in every new request while its own steps learn it, the
    cost that grows with the batch at many requests at once.  The prior
    counts as one observation; then a running mean over at most
    LEARNED_WINDOW, so a workload that changes is followed.  Sources are
    fine-grained (where a lookup matched, how long), so what chat taught of
    short matches does not hold back a code edit's copies; a generation's
    own steps still move its rates at EMA, from there."""

    def __init__(self) -> None:
        self._rates: dict[str, list[float]] = {}
        self._counts: dict[str, list[int]] = {}

    def start(self, source: str, prior: list[float]) -> list[float]:
        """Where a generation's rates for `source` start; the source is
        kept from here, its prior (at positions not seen yet) counting as
        one observation."""
        rates = self._rates.setdefault(source, [])
        counts = self._counts.setdefault(source, [])
        rates += prior[len(rates):]
        counts += [1] * (len(rates) - len(counts))
        return rates[:len(prior)]

    def observe(self, source: str, drafted: int, accepted: int) -> None:
        """A step of `source` (started before) drafted and accepted this many."""
        rates, counts = self._rates[source], self._counts[source]
        for i in range(min(drafted, len(rates))):
            if i > accepted:  # never reached
                break
            counts[i] = min(counts[i] + 1, LEARNED_WINDOW)
            rates[i] += ((1.0 if i < accepted else 0.0) - rates[i]) / counts[i]


SHIFT_RATE = 0.3   # log-odds per surprise: how fast a text's copiability is learned
SHIFT_MAX = 2.0


def group_of(source: str) -> str:
    """What the safeguard judges as one (Source.group)."""
    return Source.of(source).group


def is_lookup(source: str) -> bool:
    return Source.of(source).is_lookup


def shifted(p: float, shift: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return 1.0 / (1.0 + math.exp(-(math.log(p / (1 - p)) + shift)))


UNKNOWN_PRIOR = 0.7  # acceptance expected of a draft nobody said more about


def unknown_prior(source: str, n: int) -> list[float]:
    """Acceptance chances before anything is seen, where the proposer says
    nothing of its own (each proposer's `acceptance_prior` does)."""
    return [UNKNOWN_PRIOR] * n
