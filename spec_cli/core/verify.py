"""Speculative verification: the exact acceptance rule.

The rule (Leviathan et al. 2022, Chen et al. 2023), for k draft tokens
x_1..x_k drawn from the draft distributions p_1..p_k, and k+1 target
distributions q_1..q_{k+1} scored in one target batch:

  1. For i = 1..k: accept x_i with probability min(1, q_i(x_i) / p_i(x_i)).
  2. At the first rejection i, stop and sample the next token from the
     residual norm(max(0, q_i - p_i)).  If that residual is all zero (p_i
     and q_i equal up to rounding) sample from q_i itself.
  3. If all k are accepted, sample one bonus token from q_{k+1}.

The emitted tokens then follow the target distribution exactly.  Greedy
decoding is the special case where p and q are one-hot; a point-mass draft
(n-gram lookup) is the case p_i = one-hot(x_i), passed as `p=None`.  This is
`--rule residual`: the highest acceptance for a sampled draft, but the text
depends on what was drafted.

The default rule, `verify_choices`, couples draft and target through shared
Gumbel noise (sampling.choose): the target's token at each position is fixed
by the seed, and a draft token is accepted when it is that token.  Exact
too, and the text no longer depends on the drafts (Daliri, Musco, Suresh
2024); its acceptance is at least (1-TV)/(1+TV) against the residual
rule's 1-TV.

Pure numpy, no I/O; randomness comes only from the given Generator.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .sampling import sample


def verify(
    draft: Sequence[int],
    p: np.ndarray | None,
    q: np.ndarray,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Return (n_accepted, next_token).

    draft: the k proposed token ids.
    p: (k, V) draft probabilities, or None for point-mass drafts.
    q: (k+1, V) target probabilities; row i scores position i.
    """
    k = len(draft)
    if q.shape[0] != k + 1:
        raise ValueError(f"need k+1={k + 1} target rows, got {q.shape[0]}")
    for i, x in enumerate(draft):
        q_x = q[i, x]
        p_x = 1.0 if p is None else p[i, x]
        # step 1: accept with probability min(1, q/p).  A token the target
        # gives all the mass to is accepted without drawing, so greedy runs
        # use no randomness at all.
        if q_x >= p_x or (q_x > 0.0 and rng.random() * p_x < q_x):
            continue
        # step 2: first rejection -> residual resample
        if p is None:
            residual = q[i].copy()
            residual[x] = 0.0
        else:
            residual = np.maximum(q[i] - p[i], 0.0)
        if residual.sum() <= 0.0:
            residual = q[i]
        return i, _draw(residual, rng)
    # step 3: everything accepted -> bonus token from q_{k+1}
    return k, _draw(q[k], rng)


def _draw(dist: np.ndarray, rng: np.random.Generator) -> int:
    """Sample from a non-negative row; a one-hot row needs no randomness."""
    top = int(np.argmax(dist))
    if dist[top] >= dist.sum():
        return top
    return sample(dist, rng)


def verify_choices(draft: Sequence[int], choice: Callable[[int], int]) -> tuple[int, int]:
    """The coupled rule (Gumbel-max, and greedy as its zero-noise case):
    `choice(i)` is the target's own token at row i, a function of its
    distribution there and the seed only.  Accept while the draft token is
    that choice; where they part (or at the bonus row) emit the target's
    choice.  Every emitted token is the target's choice, so the text does
    not depend on what was drafted.  Rows past the first mismatch are never
    looked at."""
    n = 0
    while True:
        t = int(choice(n))
        if n == len(draft) or draft[n] != t:
            return n, t
        n += 1
