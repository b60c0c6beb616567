"""The free lookup and a drafter side by side ("hybrid")."""

from __future__ import annotations

from typing import Sequence

from ...core.config import Decoding
from ...core.source import Source
from .base import Candidate, Proposal


class Hybrid:
    """The free lookup (suffix.Lookup) and the draft model (or MTP block)
    side by side: the policy picks whichever pays more this step, and where
    a lookup draft ends confident -- its continuation ran out, not its
    certainty -- the draft model extends it, token by token while the cost
    model says one more pays, its first token paying for whatever text the
    draft model has yet to read (a lookup that drafted a long copy from the
    prompt leaves it far behind), and not with a sampled draft under the
    residual rule, which needs the draft's rows."""

    name = "hybrid"
    CONFIDENT = 0.9  # the lookup's last share at or above this: worth extending

    def __init__(self, lookup, draft):
        self.lookup, self.draft_model = lookup, draft

    @property
    def cost_prior(self) -> dict[str, float]:
        return self.draft_model.cost_prior

    def acceptance_prior(self, source: str, n: int) -> list[float]:
        part = self.lookup if Source.of(source).is_lookup else self.draft_model
        return part.acceptance_prior(source, n)

    def prepare(self, prompt: Sequence[int], decoding: Decoding | None = None) -> None:
        self.lookup.prepare(prompt, decoding)
        self.draft_model.prepare(prompt, decoding)

    def candidates(self, context: Sequence[int]) -> list[Candidate]:
        return self.lookup.candidates(context) + self.draft_model.candidates(context)

    def batched(self, cand: Candidate):
        """The draft model, for a candidate it drafts (draft.draft_together)."""
        return self.draft_model.batched(cand)

    @property
    def follower(self):
        return self.draft_model.follower

    def draft(self, context, cand, k, keep_going=None) -> Proposal:
        if cand.source == self.draft_model.name:
            return self.draft_model.draft(context, cand, k, keep_going)
        prop = self.lookup.draft(context, cand, k, keep_going)
        shares = self.lookup.shares
        n = len(prop.tokens)
        dm = self.draft_model
        if (n == 0 or n >= k or keep_going is None or shares[-1] < self.CONFIDENT
                or (dm.decoding.rule == "residual" and not dm.sampling.greedy)
                or not keep_going(shares, dm.name, setup_s=dm.lag_s())):
            return prop
        ext = dm.draft(list(context) + prop.tokens, Candidate(dm.name, k - n), k - n,
                       lambda chain: keep_going(shares + chain, dm.name))
        return Proposal(prop.tokens + ext.tokens, None, prop.source, model_tokens=ext.model_tokens,
                        model_read=ext.model_read)
