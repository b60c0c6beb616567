"""A target row as the distribution the request's sampling makes of it
(temperature, top-k, top-p, min-p): `Dist`, the kept tokens and their
weights, read from a whole row or from the candidates llama.cpp's in-graph
samplers left (`Candidates`), touching as few of the vocabulary's logits
as the settings allow (core/sampling.py's docstring says how).  Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .config import SamplingConfig

# logit windows (in logits) tried, narrowest first, for the candidates of
# top-k and top-p: the first that holds enough is the only part read further
_WINDOWS = (4.0, 8.0, 16.0, 32.0, math.inf)


@dataclass(frozen=True)
class Dist:
    """q for one row, without a dense copy.  z = logit / T - max / T for
    every token; `ids` are the tokens q keeps (None: every one), `log_z`
    is log sum exp(z) over them, so log q = z - log_z."""

    x: np.ndarray                 # the logits row as given (float32 or float64)
    temperature: float
    top: int                      # the argmax (always kept)
    m: float                      # its logit
    ids: np.ndarray | None
    z: np.ndarray | None          # z of `ids` (float64); None when ids is None
    log_z: float
    e: np.ndarray | None = None   # exp(z) of every token (float32), when ids is None

    def z_of(self, ids: np.ndarray) -> np.ndarray:
        return weights(self.x, ids, self.m, self.temperature)

    @property
    def q_top(self) -> float:
        return math.exp(-self.log_z)


class Candidates(NamedTuple):
    """A row's most likely tokens (at least top-k of them, in any order)
    and their logits, bitwise the whole row's: what llama.cpp's backend
    top-k sampler leaves of a row."""

    ids: np.ndarray   # int32
    vals: np.ndarray  # float32


def dist(logits: np.ndarray | Candidates, cfg: SamplingConfig) -> Dist:
    """q of one logits row under `cfg` (not greedy)."""
    if isinstance(logits, Candidates):
        return _dist_of_candidates(logits, cfg)
    x = np.asarray(logits)
    if x.dtype != np.float32 and x.dtype != np.float64:
        x = x.astype(np.float32)
    vocab = x.shape[-1]
    if cfg.min_p > 0.0 and 0 < cfg.top_k < vocab:
        d = _dist_under_min_p(x, cfg)
        if d is not None:
            return d
    top = int(np.argmax(x))
    m = float(x[top])
    ids = None          # the set top-k and top-p leave (None: every token)
    if 0 < cfg.top_k < vocab:
        ids = _top_k_window(x, cfg.top_k)
        if ids is None:
            ids = _window(x, m, lambda w: len(w) >= cfg.top_k)
        ids = _kth(x, ids, cfg.top_k)
    return _after_top_k(x, top, m, ids, cfg)


_NEAR_CAP = 4096  # the min-p window's most tokens: a wider one is read the general way


def _dist_under_min_p(x: np.ndarray, cfg: SamplingConfig) -> Dist | None:
    """`dist` with top-k and min-p both on (llama.cpp's defaults), in one
    comparison over the row: min-p keeps only tokens within T * log(min_p)
    of the top, so everything q can hold lies in that window, found below
    a lower bound of the top (every 16th logit's largest) and then cut at
    the true top's floor.  The window's values give the argmax (the first
    of equal tops, as np.argmax), the top-k set where the window holds at
    least k, and else -- the window is inside top-k's set -- the set itself
    wherever top-p keeps all of it with the mass of the window alone (top-k's
    set only adds mass, so the true cut keeps it too), or where top-p may
    cut into it, top-k's set from the window before the floor's cut when
    that holds k.  The same ids and the same arithmetic as the general
    path, so q is the same to the bit; None (read the general way) where
    none of these holds, or the window is wide."""
    t = cfg.temperature
    log_min_p = math.log(cfg.min_p)
    near = np.flatnonzero(x >= float(x[::_STRIDE].max()) + t * log_min_p)
    if len(near) > _NEAR_CAP:
        return None
    vals = x[near]
    i = int(np.argmax(vals))
    top, m = int(near[i]), float(vals[i])
    floor = m + t * log_min_p
    keep = vals >= floor
    ids = near[keep]
    if len(ids) >= cfg.top_k:  # the k largest are all above the floor: top-k's set, as the general path
        return _after_top_k(x, top, m, _kth(x, ids, cfg.top_k), cfg)
    z = vals[keep].astype(np.float64) / t - m / t  # weights of ids
    e = np.exp(z)  # z's largest is the top's, 0: exp(z - max) as _final takes it
    # the mass before the least probable of the window, against top-p's share of
    # the window's mass alone: kept there, it is kept under top-k's larger mass
    if cfg.top_p < 1.0 and len(ids) > 1 and not float(e.sum()) - float(e.min()) < cfg.top_p * float(e.sum()) * (1.0 - 1e-9):
        # top-p may cut here, its mass counted over top-k's whole set: the
        # window (cut below the lower bound) may hold that set too
        return _after_top_k(x, top, m, _kth(x, near, cfg.top_k), cfg) if len(near) >= cfg.top_k else None
    return _final(x, t, top, m, ids, z, e)


def _final(x: np.ndarray, t: float, top: int, m: float, ids: np.ndarray, z: np.ndarray,
           e: np.ndarray | None = None) -> Dist:
    """q over `ids` (ascending), z their weights (e: exp(z - max z), where known): its normaliser."""
    zmax = z.max()
    e = np.exp(z - zmax) if e is None else e
    return Dist(x, t, top, m, ids, z, float(zmax + math.log(e.sum())))


def _kth(x: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Of `ids` (which hold the k largest), those at or above the k-th
    largest logit: ties at the threshold are kept."""
    if len(ids) <= k:
        return ids
    vals = x[ids]
    kth = np.partition(vals, len(vals) - k)[len(vals) - k]
    return ids[vals >= kth]


def _after_top_k(x: np.ndarray, top: int, m: float, ids: np.ndarray | None, cfg: SamplingConfig) -> Dist:
    """Top-p and min-p over what top-k kept (`ids`, ascending; None: every
    token), and q's normaliser."""
    t = cfg.temperature
    e = None
    if cfg.top_p < 1.0:
        if ids is None:  # the mass is counted over every token: one pass for the sum
            e = _exp_all(x, m, t)
            total = float(e.sum(dtype=np.float64))
            ids = _window(x, m, lambda w: _mass(x, w, m, t) >= cfg.top_p * total)
        else:
            total = _mass(x, ids, m, t)
        ids = ids[_top_p_kept(weights(x, ids, m, t), total, cfg.top_p)]
    if cfg.min_p > 0.0:  # p >= min_p * p_max, as a threshold on the logits
        floor = m + t * math.log(cfg.min_p)
        ids = np.flatnonzero(x >= floor) if ids is None else ids[x[ids] >= floor]
    if ids is None:
        e = _exp_all(x, m, t) if e is None else e
        return Dist(x, t, top, m, None, None, math.log(float(e.sum(dtype=np.float64))), e)
    return _final(x, t, top, m, ids, weights(x, ids, m, t))


def _top_p_kept(z: np.ndarray, total: float, top_p: float) -> np.ndarray:
    """Where top-p keeps a token, as ascending positions in z (their weights;
    `total` the mass it counts): while the mass *before* it is below top_p."""
    order = np.argsort(-z, kind="stable")
    sorted_p = np.exp(z[order]) / total
    return np.sort(order[(np.cumsum(sorted_p) - sorted_p) < top_p])


def by_id(c: Candidates) -> tuple[np.ndarray, np.ndarray]:
    """The candidates in ascending id order, as the whole row lists them."""
    order = np.argsort(c.ids, kind="stable")
    return c.ids[order].astype(np.int64), np.asarray(c.vals, dtype=np.float32)[order]


def argmax(logits: np.ndarray | Candidates) -> tuple[int, np.ndarray, int]:
    """(the top token, the values, its index in them): of a whole row, or
    of candidates in ascending id order (the first of equal tops either way)."""
    if isinstance(logits, Candidates):
        ids, x = by_id(logits)
        top = int(np.argmax(x))
        return int(ids[top]), x, top
    x = np.asarray(logits)
    top = int(np.argmax(x))
    return top, x, top


def _dist_of_candidates(c: Candidates, cfg: SamplingConfig) -> Dist:
    """`dist` from the candidates alone: the values the whole row's path
    reads (its top-k set, ascending by id) go through the same arithmetic
    here -- z of each token once (an elementwise, exactly rounded step),
    the same exp and sums over the same sets in the same order -- so q is
    the same to the bit, in a third of the numpy calls.  Its `x` holds the
    candidates' values (indexed by position, not id): nothing reads a
    token outside them."""
    k = cfg.top_k
    if not 0 < k <= len(c.ids):
        raise ValueError("candidates give q only under a top-k they hold")
    ids, x = by_id(c)
    t = cfg.temperature
    top = int(np.argmax(x))  # the first of equal tops, as on the whole row
    m = float(x[top])
    zc = x.astype(np.float64) / t - m / t  # weights of every candidate
    n = len(x)
    sel = np.arange(n) if n <= k else np.flatnonzero(x >= np.partition(x, n - k)[n - k])
    if cfg.top_p < 1.0:
        z = zc[sel]
        sel = sel[_top_p_kept(z, float(np.exp(z).sum()), cfg.top_p)]
    if cfg.min_p > 0.0:
        sel = sel[x[sel] >= m + t * math.log(cfg.min_p)]
    return _final(x, t, int(ids[top]), m, ids[sel], zc[sel])


def _window(x: np.ndarray, m: float, enough) -> np.ndarray:
    """The tokens within the narrowest logit window below the top that is
    `enough`; each try is one comparison over the row."""
    for w in _WINDOWS:
        ids = np.flatnonzero(x >= m - w) if w != math.inf else np.arange(x.shape[-1])
        if enough(ids):
            return ids
    return ids


_STRIDE = 16  # top-k's guess reads every 16th logit


def _top_k_window(x: np.ndarray, k: int) -> np.ndarray | None:
    """Tokens at or above a threshold guessed from every 16th logit (the
    8 * k / 16-th largest of those: about 8k tokens lie above it), checked
    by one comparison over the row: they hold the k largest when they are
    at least k.  None when the guess came out short (the caller widens
    windows instead)."""
    sub = x[::_STRIDE]
    j = min(len(sub), max(2, -(-8 * k // _STRIDE)))
    if j >= len(sub):
        return None
    guess = np.partition(sub, len(sub) - j)[len(sub) - j]
    ids = np.flatnonzero(x >= guess)
    return ids if len(ids) >= k else None


def weights(x: np.ndarray, ids, m: float, t: float) -> np.ndarray:
    """logit / T - max / T of `ids`, in float64: log q before normalising."""
    return x[ids].astype(np.float64) / t - m / t


def _exp_all(x: np.ndarray, m: float, t: float) -> np.ndarray:
    """exp(z) of every token, in float32: the one pass over the row (a
    float32 row's worked in one array: each new one costs page faults)."""
    if x.dtype != np.float32:
        return np.exp((x - np.float32(m)) * np.float32(1.0 / t), dtype=np.float32)
    e = np.subtract(x, np.float32(m))
    e *= np.float32(1.0 / t)
    return np.exp(e, out=e)


def _mass(x: np.ndarray, ids: np.ndarray, m: float, t: float) -> float:
    return float(np.exp(weights(x, ids, m, t)).sum())
