"""A chi-square goodness-of-fit check without scipy (seeded tests only)."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np


def chi2_critical(df: int, z: float = 3.719) -> float:
    """Upper critical value of chi-square (Wilson-Hilferty); z=3.719 is a
    one-sided tail of 1e-4."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_fits(counts: dict, expected: dict, n: int) -> tuple[bool, float, float]:
    """Do `counts` (of n draws) fit the probabilities `expected`?  Cells
    expecting fewer than 5 draws are pooled.  Returns (fits, stat, critical)."""
    cells, pooled_obs, pooled_exp = [], 0.0, 0.0
    for key, p in expected.items():
        e = p * n
        if e >= 5:
            cells.append((counts.get(key, 0), e))
        else:
            pooled_obs += counts.get(key, 0)
            pooled_exp += e
    # anything observed that the target gives no mass at all is a failure
    outside = sum(c for k, c in counts.items() if k not in expected)
    pooled_obs += outside
    if pooled_exp > 0 or pooled_obs > 0:
        cells.append((pooled_obs, max(pooled_exp, 1e-9)))
    stat = sum((o - e) ** 2 / e for o, e in cells)
    crit = chi2_critical(max(len(cells) - 1, 1))
    return stat <= crit, stat, crit


def as_probs(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


def first_two_tokens(rows, p, n: int, rng_seed: int, make_pick) -> Counter:
    """The first two tokens of n seeded runs of a rule, counted: run i's rule
    is make_pick(i, out), `out` its output (engine._Output's face: `produced`,
    `cfg`, and `emitted`, the tokens so far); a draft of two is sampled from
    p (row j: position j), cut where the rule says (legal_draft) and
    verified on rows; where fewer than two tokens came, one plain step on
    row 1.  Row j scores output position j, whatever came before."""
    from spec_cli.run.drafting import legal_draft
    from spec_cli.run.proposers.base import EMPTY, Proposal

    counts, rng = Counter(), np.random.default_rng(rng_seed)
    for i in range(n):
        out = SimpleNamespace(produced=0, emitted=[], cfg=SimpleNamespace(margins=False, logprobs=None))
        pick = make_pick(i, out)
        draft = [int(rng.choice(p.shape[1], p=p[j])) for j in range(2)]
        prop = Proposal(draft, probs=p)
        draft = legal_draft(pick, draft, prop)
        a, t = pick(rows[:len(draft) + 1], draft, prop)
        out.emitted = toks = [*draft[:a], t]
        out.produced = len(toks)
        if len(toks) < 2:
            toks.append(pick(rows[1:2], [], EMPTY)[1])
        counts[tuple(toks[:2])] += 1
    return counts
