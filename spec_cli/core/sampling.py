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

import numpy as np

from .config import SamplingConfig

__all__ = ["SamplingConfig", "probs", "sample", "choose", "choose_from_probs", "gumbel", "margin"]


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


# -- seeded choice by the Gumbel-max trick -----------------------------------
#
# argmax_x (log q(x) + G(x)), with G(x) independent standard Gumbel noise, is
# an exact sample from q.  Keying the noise by (seed, output position, token
# id) makes the token at each position a function of the seed and the
# target's distribution there only: whoever drafted, the same seed gives the
# same text (Daliri, Musco, Suresh 2024, "Coupling without Communication and
# Drafter-Invariant Speculative Decoding").  Greedy is the zero-noise case.

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
# A token whose log-probability is this far below the top one can never win:
# Gumbel noise from 53-bit uniforms lies within [-3.62, 36.74].
_HOPELESS = 41.0


def _mix_int(x: int) -> int:
    """splitmix64's finaliser on a Python int (64-bit wrap-around)."""
    x &= _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def gumbel(seed: int, pos: int, tokens: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise for each of `tokens` at output position `pos`:
    a counter-based hash of (seed, pos, token), so any subset of the
    vocabulary can be evaluated alone and always gets the same values."""
    key = _mix_int(_mix_int(seed + _GOLDEN) + pos * _GOLDEN)
    x = np.asarray(tokens, dtype=np.uint64) * np.uint64(_GOLDEN) ^ np.uint64(key)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    u = ((x >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53  # in (0, 1)
    return -np.log(-np.log(u))


def scores(logits: np.ndarray, cfg: SamplingConfig, seed: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, log q + Gumbel noise) for the tokens that can win at
    output position `pos`: those left after top-k/top-p/min-p, less those
    too improbable for any noise to lift to the top."""
    if cfg.greedy:
        top = int(np.argmax(logits))
        return np.array([top]), np.array([float(logits[top])])
    return scores_from_probs(probs(logits, cfg), seed, pos)


def scores_from_probs(q: np.ndarray, seed: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """`scores` for a probability row already computed."""
    ids = np.flatnonzero(q)
    logq = np.log(q[ids])
    live = logq >= logq.max() - _HOPELESS
    ids, logq = ids[live], logq[live]
    return ids, logq + gumbel(seed, pos, ids)


def choose(logits: np.ndarray, cfg: SamplingConfig, seed: int, pos: int) -> int:
    """The token at output position `pos`: argmax of log q + G(seed, pos, .)
    -- an exact sample from q, fixed by the seed; the argmax when greedy."""
    ids, s = scores(logits, cfg, seed, pos)
    return int(ids[np.argmax(s)])


def choose_from_probs(q: np.ndarray, seed: int, pos: int) -> int:
    ids, s = scores_from_probs(q, seed, pos)
    return int(ids[np.argmax(s)])


def margin(logits: np.ndarray, cfg: SamplingConfig, seed: int, pos: int) -> float:
    """How far the chosen token is ahead of the runner-up, in logits (the
    perturbed scores times the temperature when sampling): a small margin
    is a near-tie that rounding may flip."""
    if cfg.greedy:
        top2 = np.partition(np.asarray(logits, dtype=np.float64), -2)[-2:]
        return float(top2[1] - top2[0])
    _, s = scores(logits, cfg, seed, pos)
    if len(s) < 2:
        return float("inf")
    top2 = np.partition(s, -2)[-2:]
    return float((top2[1] - top2[0]) * cfg.temperature)
