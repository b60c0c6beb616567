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
from typing import NamedTuple

import numpy as np

from .config import SamplingConfig
from .dist import Candidates, Dist, argmax, by_id, dist
from .kernel import COMPILED, MASK, NUMPY, Kernel

__all__ = ["SamplingConfig", "Candidates", "Choice", "Dist", "dist", "probs", "sample", "choose", "choose_rows",
           "gumbel", "margin", "COMPILED", "NUMPY"]

# the seeded choice scores at most this many tokens one by one (see _pick)
HEAD_CAP = 2048
HEAD_NATS = (24.0, 16.0, 12.0, 8.0, 4.0, 0.0)
BLOCK = 2048                  # tail tokens are grouped by id in blocks this wide
BLOCK_ID = 1 << 40           # noise key of tail block b: BLOCK_ID + b (never a token id)
CONFIDENCE_WINDOW = 12.0     # greedy confidence: tokens this far below the top are left out


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
    s_blocks = np.log(mass[blocks]) - d.log_z + gumbel(seed, pos, blocks + BLOCK_ID)
    items = np.concatenate([head, blocks + BLOCK_ID])
    item, margin = _best(items, np.concatenate([s_head, s_blocks]))
    if item < BLOCK_ID:
        return item, margin
    b = item - BLOCK_ID  # the tail won: open its block
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
        token, x, top = argmax(logits)  # from candidates: the near tokens they hold (a stopping signal only)
        if not confidence:
            return Choice(token, 1.0)
        m = x[top]
        near = x[x >= m - CONFIDENCE_WINDOW]
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
        ids, logits = by_id(logits)
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
