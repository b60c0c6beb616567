"""Test-only helpers over spec-cli's pure logic (no llama.cpp): what the
tests need of the product's APIs beyond what the product itself uses."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from spec_cli.core import policy as _policy
from spec_cli.core.dist import Dist, weights as _z
from spec_cli.core.sampling import _pick
from spec_cli.core.verify import verify_choices
from spec_cli.run.proposers.base import Candidate
from spec_cli.run.proposers.draft import PRIOR as DRAFT_PRIOR
from spec_cli.run.suffix.priors import lookup_prior


def prior(source: str, n: int) -> list[float]:
    """The acceptance priors a pair's proposers give: a draft model's, else
    the lookup's (by match)."""
    return [DRAFT_PRIOR] * n if source == "draft" else lookup_prior(source, n)


def Policy(cost, **kw) -> _policy.Policy:
    """A policy with the pair's priors (the engine passes the proposer's)."""
    kw.setdefault("prior", prior)
    return _policy.Policy(cost, **kw)


def plan(policy: _policy.Policy, source: str, limit: int, *, setup_s: float = 0.0, load=None) -> int:
    """`Policy.choose` for a single proposer at `load` (core.batching.Load;
    alone where None): the k to draft (0 = none)."""
    from spec_cli.core.batching import ALONE

    return policy.choose([Candidate(source, limit, setup_s)], limit, load or ALONE)[1]


def verify_greedy(draft: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """The rule when p and q are both one-hot (temperature 0), without
    building the one-hot rows: `verify_choices` over the target's argmaxes."""
    return verify_choices(draft, target_argmax.__getitem__)


def choose_from_probs(q: np.ndarray, seed: int, pos: int) -> int:
    """`sampling.choose` for a probability row already computed (the same choice)."""
    ids = np.flatnonzero(q)
    with np.errstate(divide="ignore"):
        x = np.log(q)  # a row of logits at temperature 1 (-inf where q is 0)
    top = int(ids[np.argmax(x[ids])])
    z = _z(x, ids, float(x[top]), 1.0)
    return _pick(Dist(x, 1.0, top, float(x[top]), ids, z, math.log(float(np.exp(z).sum()))), seed, pos)[0]


CHAT = {"messages": [{"role": "user", "content": "hi"}]}  # the least chat request


def api_error(parse, body):
    """The 400 that `parse` (a serve.api parser) answers `body` with."""
    import pytest

    from spec_cli.serve.api import ApiError

    with pytest.raises(ApiError) as e:
        parse(body)
    assert e.value.status == 400
    return e.value
