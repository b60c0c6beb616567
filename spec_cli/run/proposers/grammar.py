"""Tokens a constraint forces, as free drafts ("grammar").

Where a JSON schema or grammar admits a single continuation (a key name,
`": "`, a closing brace) its tokens are known before the target runs:
`GrammarDrafts` offers them first, beside the proposer it wraps, as a
`sure` candidate that the policy drafts whole: they cost no drafting and
are nearly always accepted (the target picks among the masked row's legal
tokens, and a forced text can sometimes be tokenized two ways), and k + 1
rows in one batch never cost more than k + 1 single steps.  What the
wrapped proposer drafts is cut where the constraint refuses a token by the
round (drafting.legal_draft, in run/round.py), before it
costs a verify row.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ...core.config import Decoding
from ...core.source import Source
from .base import Candidate, Proposal

GRAMMAR = Source("grammar")
PRIOR = 0.95  # a forced token's acceptance before any is seen


class GrammarDrafts:
    """`inner`'s candidates, and the constraint's forced tokens first."""

    def __init__(self, inner, constraint):
        self.inner, self.constraint = inner, constraint
        self.name = inner.name

    @property
    def cost_prior(self) -> dict[str, float]:
        return {**self.inner.cost_prior, GRAMMAR: 0.0}

    def acceptance_prior(self, source: str, n: int) -> list[float]:
        if source == GRAMMAR:
            return [PRIOR] * n
        return self.inner.acceptance_prior(source, n)

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        self.inner.prepare(prompt, decoding)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        forced = self.constraint.forced()
        # a draft model drafts under the constraint alone (DraftModel.draft masks its
        # choices), not pooled with other sequences' drafts (draft_together does not),
        # and only where it holds the text already (a chat's next turn): a constrained
        # answer is short beside its prompt and mostly forced or copied, so reading the
        # whole prompt first did not pay back (docs/results.md)
        inner = [dataclasses.replace(c, pooled=False) for c in self.inner.candidates(context) if c.setup_s == 0.0]
        return ([Candidate(GRAMMAR, len(forced), sure=True)] if forced else []) + inner

    def batched(self, cand: Candidate):
        """No draft batch with other sequences: see candidates."""
        return None

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        if cand.source == GRAMMAR:
            return Proposal(self.constraint.forced()[:k], None, GRAMMAR)
        return self.inner.draft(context, cand, k, keep_going)

    @property
    def follower(self):
        """None: no draft model reads a constrained request's prompt beside the
        target (see candidates)."""
        return None

    def __getattr__(self, name: str):
        # the rest of the wrapped proposer's face (its draft model, its lookup, ...)
        if name in ("inner", "constraint"):
            raise AttributeError(name)
        return getattr(self.inner, name)
