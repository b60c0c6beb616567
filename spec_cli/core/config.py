"""Sampling settings: plain data, importable without numpy (the CLI builds
them before anything heavy is loaded)."""

from __future__ import annotations

from dataclasses import dataclass


# llama-server's own defaults, used wherever a user or client sets none
# (they apply when sampling, temperature > 0; 0 turns each off)
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
# below this a temperature divides logits past float range (1 / 1e-310 is
# inf): 0 is greedy, anything in between is refused
MIN_TEMPERATURE = 1e-3


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError("min_p must be in [0, 1)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Decoding:
    """What one generation decodes with, handed whole to the target's rule
    and to the proposer (`prepare`) so they cannot disagree: the sampling
    settings, the seed the Gumbel noise is keyed by, the rule, and the
    generation's constraint (core.constraint.Constraint: its state at the
    tokens emitted so far), if any, which masks the draft model's choices
    as it masks the target's."""

    sampling: SamplingConfig
    seed: int
    rule: str = "gumbel"
    constraint: object = None
    adjust: object = None   # core.adjust.Adjust: the request's logit bias and penalties, if any

    @property
    def candidates_k(self) -> int | None:
        """The top-k whose candidates give every row this decoding reads
        (llama.Model.candidates_k), or None where it reads whole rows:
        greedy (an argmax is cheap), no top-k, or the residual rule (it
        subtracts dense rows)."""
        s = self.sampling
        if s.greedy or s.top_k <= 0 or self.rule != "gumbel" or self.constraint is not None or self.adjusted:
            return None
        return s.top_k

    @property
    def adjusted(self) -> bool:
        return self.adjust is not None and self.adjust.active
