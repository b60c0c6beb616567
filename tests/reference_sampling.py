"""The seeded choice written the plain way, for the tests to hold the fast
path (spec_cli.core.sampling) to: dense float64 probabilities over the
whole vocabulary, a full sort for top-p, every candidate scored.  Same
definition, none of the shortcuts."""

from __future__ import annotations

import numpy as np

from spec_cli.core.config import SamplingConfig
from spec_cli.core import sampling as S


def probs(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    x = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    if cfg.greedy:
        out = np.zeros_like(x)
        out[np.arange(x.shape[0]), np.argmax(x, axis=-1)] = 1.0
        return out
    z = x / cfg.temperature
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    vocab = p.shape[-1]
    if 0 < cfg.top_k < vocab:
        kth = np.partition(p, vocab - cfg.top_k, axis=-1)[:, vocab - cfg.top_k][:, None]
        p = np.where(p >= kth, p, 0.0)
    if cfg.top_p < 1.0:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=-1)
        total = sorted_p.sum(axis=-1, keepdims=True)
        keep_sorted = (np.cumsum(sorted_p, axis=-1) - sorted_p) / total < cfg.top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
    if cfg.min_p > 0.0:
        p = np.where(p >= cfg.min_p * p.max(axis=-1, keepdims=True), p, 0.0)
    return p / p.sum(axis=-1, keepdims=True)


def choose(logits: np.ndarray, cfg: SamplingConfig, seed: int, pos: int) -> int:
    return traced(logits, cfg, seed, pos)[0]


def traced(logits: np.ndarray, cfg: SamplingConfig, seed: int, pos: int) -> tuple[int, bool]:
    """(the token, whether a tail block won)."""
    gumbel, BLOCK, _BLOCK_ID = S.gumbel, S.BLOCK, S.BLOCK_ID
    if cfg.greedy:
        return int(np.argmax(logits)), False
    q = probs(logits, cfg)[0]
    ids = np.flatnonzero(q)
    logq = np.log(q[ids])
    if len(ids) <= S.HEAD_CAP:
        return int(ids[np.argmax(logq + gumbel(seed, pos, ids))]), False
    for nats in S.HEAD_NATS:
        head = logq >= logq.max() - nats
        if head.sum() <= S.HEAD_CAP or nats == 0.0:
            break
    items = list(ids[head])
    scores = list(logq[head] + gumbel(seed, pos, ids[head]))
    tail, tail_logq = ids[~head], logq[~head]
    for b in sorted(set((tail // BLOCK).tolist())):
        items.append(_BLOCK_ID + b)
        scores.append(np.log(np.exp(tail_logq[tail // BLOCK == b]).sum())
                      + gumbel(seed, pos, np.array([_BLOCK_ID + b]))[0])
    won = int(items[int(np.argmax(scores))])
    if won < _BLOCK_ID:
        return won, False
    inside = tail // BLOCK == won - _BLOCK_ID
    return int(tail[inside][np.argmax(tail_logq[inside] + gumbel(seed, pos, tail[inside]))]), True
