"""What every proposer is: it knows nothing of the cost model.  Each step
the engine asks what it could draft, the policy chooses one candidate and
how far (once, in one place), and the chosen proposer drafts up to that
many tokens.

    candidates(context) -> [Candidate(source, limit, setup_s)]
    draft(context, candidate, k, keep_going) -> Proposal(tokens, probs or None)
    batched(candidate) -> the DraftModel that drafts it with other requests', or None
    follower -> the DraftModel that reads the request's text beside the target, or None

`context` is every token so far (prompt and output).  `source` names what
the policy learns acceptance for (a core.source.Source, or a plain name:
"draft", "oracle", and for the lookup in suffix/ where it matched and how
long: "prompt8", "output4", "hist16").  `probs` holds the draft distribution of each proposed
token, row by row, or is None for a point mass (n-gram lookup, greedy and
Gumbel-coupled drafts).  `keep_going(confidences so far)` lets a draft
model stop early where it is unsure.  `acceptance_prior(source, n)` is
what the policy expects of a source before it has seen any of its drafts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ...core.config import Decoding
from ...core.acceptance import UNKNOWN_PRIOR


@dataclass(frozen=True)
class Candidate:
    """What a proposer could draft now, for the policy to weigh."""

    source: str
    limit: int             # the most tokens it can draft here
    setup_s: float = 0.0   # a one-time cost before drafting (a draft model's catch-up)
    # drafted together with the other sequences' in a batch, a draft batch a
    # position (a draft model of its own: draft.draft_together), not each alone
    pooled: bool = False
    # its tokens are known to be accepted (a constraint forces them: proposers.grammar):
    # k + 1 tokens for one batch of k + 1 rows always beat k + 1 single steps, so the
    # policy drafts it whole, on any machine
    sure: bool = False


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    probs: np.ndarray | None = None  # (len(tokens), V) or None for a point mass
    source: str = "none"
    # seconds a proposer pays per step when it drafts every step (a draft
    # model catching up on many tokens after a pause costs more, once)
    steady_s: float | None = None
    # a draft model's work, for a simulated clock (clock.py): tokens it
    # drafted, and tokens it read in the batch that yielded the first
    model_tokens: int = 0
    model_read: int = 0


EMPTY = Proposal([])

KeepGoing = Callable[[list[float]], bool]


class Proposer(Protocol):
    name: str
    cost_prior: dict[str, float]  # seconds per draft token, by source, before any is measured

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        """A new generation starts after `prompt`, decoded with `decoding`
        (the same object the target's rule uses)."""

    def candidates(self, context: Sequence[int]) -> list[Candidate]: ...

    def draft(self, context: Sequence[int], cand: Candidate, k: int,
              keep_going: KeepGoing | None = None) -> Proposal: ...

    def acceptance_prior(self, source: str, n: int) -> list[float]:
        """Acceptance chances of `source`'s draft positions 1..n before any is seen."""

    def batched(self, cand: Candidate):
        """Where several requests draft in one round (run/round.py): the
        draft model that drafts `cand` together with the others' drafts of
        the same model, one draft batch a position (draft.draft_together);
        None where it is drafted alone."""

    @property
    def follower(self):
        """The draft model that reads this request's text beside the target
        while its prompt is read (run/batch.py: Batch._follow), or None."""


def flat_prior(rate: float):
    """An acceptance_prior of `rate` at every position."""
    return lambda source, n: [rate] * n


class DraftsAlone:
    """A proposer whose drafts are each made alone (a lookup, a reference):
    no draft batch with other requests, no draft model reading beside the target."""

    def batched(self, cand: Candidate) -> None:
        return None

    follower = None


class NoDraft(DraftsAlone):
    """The target alone: the baseline, through the same loop."""

    name = "none"
    cost_prior: dict[str, float] = {}
    acceptance_prior = staticmethod(flat_prior(UNKNOWN_PRIOR))

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        pass

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        return []

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        return EMPTY
