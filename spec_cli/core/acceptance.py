"""What the policy expects of a draft: per-position acceptance chances,
learned online from their priors, and a lookup text's copiability shared
by every source of the same origin (a log-odds shift).  Pure, no I/O."""

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
