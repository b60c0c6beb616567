"""Logits -> the target distribution q, and the seeded choice from it.

Pure numpy, no I/O.  The transform, in order (llama.cpp's samplers, as
llama-server runs them):
  1. temperature 0  -> one-hot on the argmax (greedy); nothing else applies.
  2. divide logits by the temperature, softmax.
  3. top-k: keep the k most probable tokens (0 = off).
  4. top-p: keep the smallest set whose mass reaches p (1.0 = off),
     the mass counted over what top-k kept.
  5. min-p: drop tokens below min_p x the top probability (0.0 = off).
  6. renormalise.

The host pays for this on every drafted token and every verified row, so
nothing here touches the whole vocabulary more than once, and usually not
at all: each filter is a threshold on the logits, so the candidates are
found by a comparison (top-k and min-p) or a window widened until it holds
the top-p mass, and everything after that -- softmax, the Gumbel choice --
is done over the candidates alone.  Only top-p without top-k, and sampling
over the full vocabulary, need the softmax's sum over every token: one
vectorised float32 pass.  `probs` gives the same q as a dense row (the
residual rule and the tests use it).

`choose` and `choose_rows` hand a float32 row (or candidates) to the compiled
kernel first (kernel.py: _fastpick.c, built by setup.py): the same definition in one
call, since right after a decode each numpy call costs the host 5-20 us
however small its array.  It takes every setting; a q of more than
HEAD_CAP tokens after top-p or min-p, and a build without the kernel,
come here.

A row may also come as `Candidates`: the ids and logits of its most likely
tokens only, which llama.cpp's backend top-k sampler leaves (llama/model.py,
`Model.candidates_k`), so that with top-k on nothing the size of the
vocabulary is read at all.  They give the same q, bit for bit, as the
whole row: the same values in the same order go through the same steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .config import SamplingConfig
from .kernel import COMPILED, MASK, NUMPY, Kernel

__all__ = ["SamplingConfig", "Candidates", "Choice", "Dist", "dist", "probs", "sample", "choose", "choose_rows",
           "gumbel", "margin", "COMPILED", "NUMPY"]

# logit windows (in logits) tried, narrowest first, for the candidates of
# top-k and top-p: the first that holds enough is the only part read further
_WINDOWS = (4.0, 8.0, 16.0, 32.0, math.inf)
# the seeded choice scores at most this many tokens one by one (see _pick)
HEAD_CAP = 2048
HEAD_NATS = (24.0, 16.0, 12.0, 8.0, 4.0, 0.0)
BLOCK = 2048                  # tail tokens are grouped by id in blocks this wide
_BLOCK_ID = 1 << 40           # noise key of tail block b: _BLOCK_ID + b (never a token id)
_CONFIDENCE_WINDOW = 12.0     # greedy confidence: tokens this far below the top are left out


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
        return _z(self.x, ids, self.m, self.temperature)

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
    z = vals[keep].astype(np.float64) / t - m / t  # _z of ids
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
    """q over `ids` (ascending), z their _z (e: exp(z - max z), where known): its normaliser."""
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
        ids = ids[_top_p_kept(_z(x, ids, m, t), total, cfg.top_p)]
    if cfg.min_p > 0.0:  # p >= min_p * p_max, as a threshold on the logits
        floor = m + t * math.log(cfg.min_p)
        ids = np.flatnonzero(x >= floor) if ids is None else ids[x[ids] >= floor]
    if ids is None:
        e = _exp_all(x, m, t) if e is None else e
        return Dist(x, t, top, m, None, None, math.log(float(e.sum(dtype=np.float64))), e)
    return _final(x, t, top, m, ids, _z(x, ids, m, t))


def _top_p_kept(z: np.ndarray, total: float, top_p: float) -> np.ndarray:
    """Where top-p keeps a token, as ascending positions in z (their _z;
    `total` the mass it counts): while the mass *before* it is below top_p."""
    order = np.argsort(-z, kind="stable")
    sorted_p = np.exp(z[order]) / total
    return np.sort(order[(np.cumsum(sorted_p) - sorted_p) < top_p])


def _by_id(c: Candidates) -> tuple[np.ndarray, np.ndarray]:
    """The candidates in ascending id order, as the whole row lists them."""
    order = np.argsort(c.ids, kind="stable")
    return c.ids[order].astype(np.int64), np.asarray(c.vals, dtype=np.float32)[order]


def _argmax(logits: np.ndarray | Candidates) -> tuple[int, np.ndarray, int]:
    """(the top token, the values, its index in them): of a whole row, or
    of candidates in ascending id order (the first of equal tops either way)."""
    if isinstance(logits, Candidates):
        ids, x = _by_id(logits)
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
    ids, x = _by_id(c)
    t = cfg.temperature
    top = int(np.argmax(x))  # the first of equal tops, as on the whole row
    m = float(x[top])
    zc = x.astype(np.float64) / t - m / t  # _z of every candidate
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


def _z(x: np.ndarray, ids, m: float, t: float) -> np.ndarray:
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
    return float(np.exp(_z(x, ids, m, t)).sum())


def probs(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """q as dense float64 rows, for each row of `logits` (n, V) or (V,)."""
    x = np.asarray(logits)
    single = x.ndim == 1
    x = np.atleast_2d(x)
    out = np.zeros(x.shape, dtype=np.float64)
    for r, row in enumerate(x):
        if cfg.greedy:
            out[r, int(np.argmax(row))] = 1.0
            continue
        d = dist(row, cfg)
        if d.ids is None:  # every token: in float64, as the residual rule subtracts rows
            e = np.exp(d.z_of(slice(None)))
            out[r] = e / e.sum()
        else:
            out[r, d.ids] = np.exp(d.z - d.log_z)
    return out[0] if single else out


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
#
# Scoring every one of 150,000 tokens costs milliseconds, so where q keeps
# more than HEAD_CAP tokens the choice is made in two stages, exactly: the
# head -- the tokens within the widest of HEAD_NATS of the top that holds at
# most HEAD_CAP -- is scored token by token, and the rest of q (the tail) in
# blocks of BLOCK token ids, each block scored as one item with its total
# mass and its own noise.  Gumbel-max over the head tokens and the tail
# blocks picks a token or a block with exactly its probability; a block
# that wins is opened and Gumbel-max over its tokens, with their own noise
# (independent of the block's), picks within it in proportion to q.  So the
# result is an exact sample from q, the same function of (q, seed, position)
# for the draft and the target, and the tail is read only when it wins.

_GOLDEN = 0x9E3779B97F4A7C15


def _mix_int(x: int) -> int:
    """splitmix64's finaliser on a Python int (64-bit wrap-around)."""
    x &= MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


_U = {n: np.uint64(n) for n in (11, 27, 30, 31, _GOLDEN, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)}


def gumbel(seed: int, pos: int, tokens: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise for each of `tokens` at output position `pos`:
    a counter-based hash of (seed, pos, token), so any subset of the
    vocabulary can be evaluated alone and always gets the same values."""
    key = _mix_int(_mix_int(seed + _GOLDEN) + pos * _GOLDEN)
    x = np.array(tokens, dtype=np.uint64)  # a copy, worked on in place
    x *= _U[_GOLDEN]
    x ^= np.uint64(key)
    x ^= x >> _U[30]
    x *= _U[0xBF58476D1CE4E5B9]
    x ^= x >> _U[27]
    x *= _U[0x94D049BB133111EB]
    x ^= x >> _U[31]
    x >>= _U[11]
    u = x.astype(np.float64)
    u += 0.5
    u *= 2.0 ** -53  # in (0, 1)
    u = np.log(u)
    np.negative(u, out=u)
    np.log(u, out=u)
    return np.negative(u, out=u)


def _pick(d: Dist, seed: int, pos: int, *, gap: bool = True) -> tuple[int, float]:
    """(token, margin in perturbed log-probability) of the seeded choice
    (the margin only with `gap`)."""
    if d.ids is not None and len(d.ids) <= HEAD_CAP:
        s = gumbel(seed, pos, d.ids)
        s += d.z - d.log_z
        return _best(d.ids, s) if gap else (int(d.ids[np.argmax(s)]), math.nan)
    # the head: the widest window that holds at most HEAD_CAP candidates
    for nats in HEAD_NATS:
        if d.ids is None:
            inside = d.x >= d.m - nats * d.temperature
            if np.count_nonzero(inside) <= HEAD_CAP or nats == 0.0:
                head = np.flatnonzero(inside)
                zh = d.z_of(head)
                break
        else:
            inside = d.z >= -nats
            if np.count_nonzero(inside) <= HEAD_CAP or nats == 0.0:
                head, zh = d.ids[inside], d.z[inside]
                break
    # the tail's mass by block of ids
    if d.ids is None:  # the head's tokens out of the sums for a moment (no copy of the row)
        tail_e, head_e = d.e, d.e[head]
        tail_e[head] = 0.0
        full = len(tail_e) // BLOCK * BLOCK  # pairwise sums, block by block
        mass = np.concatenate([tail_e[:full].reshape(-1, BLOCK).sum(axis=1, dtype=np.float64),
                               [tail_e[full:].sum(dtype=np.float64)]])
        tail_e[head] = head_e
    else:
        outside = ~inside
        mass = np.bincount(d.ids[outside] // BLOCK, weights=np.exp(d.z[outside]),
                           minlength=int(d.ids[-1]) // BLOCK + 1)
    blocks = np.flatnonzero(mass > 0.0)
    s_head = zh - d.log_z + gumbel(seed, pos, head)
    s_blocks = np.log(mass[blocks]) - d.log_z + gumbel(seed, pos, blocks + _BLOCK_ID)
    items = np.concatenate([head, blocks + _BLOCK_ID])
    item, margin = _best(items, np.concatenate([s_head, s_blocks]))
    if item < _BLOCK_ID:
        return item, margin
    b = item - _BLOCK_ID  # the tail won: open its block
    lo, hi = b * BLOCK, (b + 1) * BLOCK
    if d.ids is None:
        members = np.arange(lo, min(hi, d.x.shape[-1]))
        members = members[np.isin(members, head, invert=True)]
        zm = d.z_of(members)
    else:
        sel = outside & (d.ids >= lo) & (d.ids < hi)
        members, zm = d.ids[sel], d.z[sel]
    token, _ = _best(members, zm + gumbel(seed, pos, members))
    return token, margin


def _best(ids: np.ndarray, s: np.ndarray) -> tuple[int, float]:
    i = int(np.argmax(s))
    if len(s) < 2:
        return int(ids[i]), math.inf
    top2 = np.partition(s, -2)[-2:]
    return int(ids[i]), float(top2[1] - top2[0])


class Choice(NamedTuple):
    """A chosen token and how sure the distribution was of it: q's top
    probability (greedy: the softmax's top over the tokens within 12 logits
    of the argmax, a stopping signal only); 1.0 where not asked for."""

    token: int
    confidence: float


def choose(logits, cfg: SamplingConfig, seed: int, pos: int, *, confidence: bool = False,
           kernel: Kernel = COMPILED) -> Choice:
    """The token at output position `pos`: the seeded Gumbel-max choice from
    q -- an exact sample, fixed by the seed; the argmax when greedy -- and,
    with `confidence`, how sure q is (a draft's stopping signal).

    The compiled `kernel` decides first (_fastpick.c: one pass over a
    float32 row, a second where top-k is off, then only the tokens q can
    keep); numpy decides where it does not apply: no kernel, or a q cut by
    top-p or min-p that keeps more than HEAD_CAP tokens.  Candidates go
    through it too, in ascending id order, so that they and the whole row
    give the same q to the bit."""
    fast = _by_kernel(kernel, logits, cfg, seed, pos, confidence)
    if fast is not None:
        return Choice(fast[0], fast[1] if confidence else 1.0)
    if cfg.greedy:
        token, x, top = _argmax(logits)  # from candidates: the near tokens they hold (a stopping signal only)
        if not confidence:
            return Choice(token, 1.0)
        m = x[top]
        near = x[x >= m - _CONFIDENCE_WINDOW]
        return Choice(token, float(1.0 / np.exp(near - m).sum(dtype=np.float64)))
    d = dist(logits, cfg)
    return Choice(_pick(d, seed, pos, gap=False)[0], d.q_top if confidence else 1.0)


def _by_kernel(kernel: Kernel, logits, cfg: SamplingConfig, seed: int, pos: int,
               confidence: bool) -> tuple[int, float] | None:
    if not kernel.available:
        return None
    ids = None
    if isinstance(logits, Candidates):
        if not (cfg.greedy or 0 < cfg.top_k <= len(logits.ids)):
            return None  # dist says why not
        ids, logits = _by_id(logits)
    elif type(logits) is not np.ndarray or logits.dtype != np.float32 or logits.ndim != 1:
        return None
    return kernel.choose(logits, cfg, seed, pos, confidence, ids, HEAD_CAP)


def choose_rows(rows, draft, cfg: SamplingConfig, seed: int, pos0: int, *, threads: int = 1,
                kernel: Kernel = COMPILED) -> list[int]:
    """`choose` along a verify batch as the coupled rule reads it (output
    positions pos0, pos0 + 1, ...): each row's token while the draft's
    token is the row's choice, and the first that is not (or the row after
    the draft).  The kernel walks as far as it can in one call, its rows
    read in up to `threads` threads (where it was built with OpenMP; the
    rows come from memory, and on a memory-bound host each core reads its
    own share); numpy chooses the rest (candidates, a row it leaves)."""
    walked = []
    if type(rows) is np.ndarray and rows.dtype == np.float32 and rows.ndim == 2:
        walked = kernel.walk(rows, draft, cfg, seed, pos0, threads, HEAD_CAP)
    for i in range(len(walked), min(len(rows), len(draft) + 1)):
        if walked and walked[-1] != draft[len(walked) - 1]:
            break
        walked.append(choose(rows[i], cfg, seed, pos0 + i, kernel=kernel).token)
    return walked


def _top_p_distance(x: np.ndarray, cfg: SamplingConfig) -> float:
    """How far top-p's cut is from moving by one token, as the log of the
    cumulative mass's ratio to p times the temperature (what a shift of the
    logits that size would do to the masses)."""
    q = probs(x, SamplingConfig(temperature=cfg.temperature, top_k=cfg.top_k))
    mass = np.cumsum(np.sort(q[q > 0])[::-1])
    before = np.concatenate([[0.0], mass[:-1]])  # the mass before each token, most probable first
    kept = before < cfg.top_p
    last_in, first_out = before[kept][-1], before[~kept][:1]
    gaps = [math.log(cfg.top_p / last_in)] if last_in > 0 else []
    gaps += [math.log(first_out[0] / cfg.top_p)] if len(first_out) else []
    return cfg.temperature * min(gaps) if gaps else math.inf


_CUT_WINDOW = 4.0  # logits: tokens further below the cut are out of rounding's reach


def margin(logits: np.ndarray, cfg: SamplingConfig, seed: int, pos: int) -> float:
    """How far the chosen token is from being another, in logits: a small
    margin is a near-tie that rounding may flip.  Greedy: top-1 minus
    top-2.  Sampling: the perturbed scores' gap times the temperature, or,
    where top-k/top-p/min-p cut q, how near the cut lies to a token whose
    crossing it would change the choice -- the chosen one dropping out, or
    one left out that would win were it kept (for top-p, the cumulative
    mass's distance from p, on the same log scale)."""
    if cfg.greedy:
        top2 = np.partition(np.asarray(logits, dtype=np.float64), -2)[-2:]
        return float(top2[1] - top2[0])
    d = dist(logits, cfg)
    token, gap = _pick(d, seed, pos)
    t = cfg.temperature
    out = gap * t
    if d.ids is None or len(d.ids) == d.x.shape[-1]:
        return out
    x = d.x
    # each cut as a logit threshold: min-p's floor, top-k's k-th largest
    floor = d.m + t * math.log(cfg.min_p) if cfg.min_p > 0.0 else -math.inf
    kth = -math.inf
    if 0 < cfg.top_k < x.shape[-1]:
        kth = float(np.partition(x, x.shape[-1] - cfg.top_k)[x.shape[-1] - cfg.top_k])
    low = float(x[d.ids].min())
    near = np.flatnonzero(x >= low - _CUT_WINDOW)
    near = near[np.isin(near, d.ids, invert=True)]
    if near.size == 0:
        return out
    x_near = x[near].astype(np.float64)
    x_tok = float(x[token])
    # the chosen one dropping out: below min-p's floor, under the best one top-k left out, out of top-p
    if cfg.min_p > 0.0:
        out = min(out, x_tok - floor)
    if kth > -math.inf:
        out = min(out, x_tok - float(x_near[x_near < kth].max(initial=-math.inf)))
    if cfg.top_p < 1.0 and x_tok == low:
        out = min(out, _top_p_distance(x, cfg))
    # one left out that would win were it kept: how far it is from passing every cut it fails
    s_token = d.z_of(np.array([token]))[0] - d.log_z + gumbel(seed, pos, np.array([token]))[0]
    beats = d.z_of(near) - d.log_z + gumbel(seed, pos, near) > s_token
    for xe in x_near[beats]:
        need = [floor - xe] if xe < floor else []
        need += [kth - xe] if xe < kth else []
        if not need and cfg.top_p < 1.0:  # only top-p left it out
            need = [_top_p_distance(x, cfg)]
        out = min(out, max(need, default=0.0))
    return max(out, 0.0)
