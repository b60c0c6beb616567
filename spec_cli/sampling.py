"""Logits -> probabilities, applied identically to the draft and the target.

Pure numpy, no I/O.  Every function takes logits rows of shape (n, V) (or a
single row of shape (V,)) and returns float64 probabilities of the same shape
that sum to one per row.

The transform, in order:
  1. temperature 0  -> one-hot on the argmax (greedy); nothing else applies.
  2. divide logits by the temperature, softmax.
  3. top-k: keep the k most probable tokens (0 = off).
  4. top-p: keep the smallest set whose mass reaches p (1.0 = off).
  5. min-p: drop tokens below min_p x the top probability (0.0 = off).
  6. renormalise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError("min_p must be in [0, 1)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def probs(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """Probabilities for each row of `logits` under `cfg` (float64)."""
    x = np.asarray(logits, dtype=np.float64)
    single = x.ndim == 1
    x = np.atleast_2d(x)
    if cfg.greedy:
        out = np.zeros_like(x)
        out[np.arange(x.shape[0]), np.argmax(x, axis=-1)] = 1.0
        return out[0] if single else out

    z = x / cfg.temperature
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    vocab = p.shape[-1]

    if 0 < cfg.top_k < vocab:
        # k-th largest per row; ties at the threshold are kept.
        kth = np.partition(p, vocab - cfg.top_k, axis=-1)[:, vocab - cfg.top_k][:, None]
        p = np.where(p >= kth, p, 0.0)

    if cfg.top_p < 1.0:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=-1)
        mass = np.cumsum(sorted_p, axis=-1) / sorted_p.sum(axis=-1, keepdims=True)
        # keep a token if the mass *before* it is still below top_p
        keep_sorted = (mass - sorted_p / sorted_p.sum(axis=-1, keepdims=True)) < cfg.top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)

    if cfg.min_p > 0.0:
        p = np.where(p >= cfg.min_p * p.max(axis=-1, keepdims=True), p, 0.0)

    p /= p.sum(axis=-1, keepdims=True)
    return p[0] if single else p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability row (exact, inverse-CDF)."""
    cdf = np.cumsum(p)
    u = rng.random() * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), len(p) - 1))
