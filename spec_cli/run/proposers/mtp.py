"""The target's own multi-token-prediction block drafts ("mtp"): no second
model.  `HeadDrafts` is the source DraftModel drafts from (llama/mtp.py's
MTPHead): its first draft token reads the context's last token beside the
target's hidden state before it, which the target's last batch left; each
further one reads the previous draft token beside the block's own output.
Its KV cache follows the context by prefix where the target's states fed
it, and drops the chain after each draft.  Sampling, seed, rule and the
early stop are the draft model's.

Its cost per token is timed once (the fastest of three one-token reads)
and then learned from its drafts; catching up after steps it did not
draft is a batch of the tokens it missed."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ...core.config import Decoding
from ...core.sampling import SamplingConfig, choose
from ...core.tokens import common_prefix
from .base import UNKNOWN_PRIOR
from .draft import DraftModel, learned_cost


class HeadDrafts:
    def __init__(self, target):
        self.model = self.target = target
        self.head = target.mtp_head()
        self._sure = 0

    def cached(self) -> list[int]:
        return self.head.tokens

    def start(self, context: Sequence[int]) -> np.ndarray:
        head, target = self.head, self.target
        fed = len(target.tokens)  # the target's states are known for these positions
        assert fed < len(context) and (fed == 0 or target.tokens[-1] == context[fed - 1])
        keep = min(common_prefix(head.tokens, context), fed)
        head.truncate(keep)
        # entries keep..fed read the context beside the target's state before each
        hidden = target.hidden(max(keep - 1, 0), fed)
        if keep == 0:  # the first token has no state before it
            hidden = np.vstack([np.zeros((1, head.n_embd), np.float32), hidden])
        logits = head.read(list(context[keep:fed + 1]), hidden, logits=True)
        self._sure = fed + 1
        for token in context[fed + 1:]:  # tokens the target has not read (a lookup draft to extend)
            logits = self.then(token)
        return logits

    def start_choose(self, context, sampling: SamplingConfig, seed: int, pos: int,
                     confidence: bool) -> tuple[int, float]:
        return choose(self.start(context), sampling, seed, pos, confidence=confidence)

    def then(self, token: int) -> np.ndarray:
        return self.head.read([token], self.head.out_hidden()[None, :], logits=True)

    def then_choose(self, token: int, sampling: SamplingConfig, seed: int, pos: int,
                    confidence: bool) -> tuple[int, float]:
        return choose(self.then(token), sampling, seed, pos, confidence=confidence)

    def end(self) -> None:
        self.head.truncate(self._sure)  # the chain read the block's own states, not the target's

    def per_token_s(self) -> float:
        """Seconds the block takes to read one token and predict the next
        (kept with the block, for every generation on this target)."""
        head = self.head
        if head.per_token_s is None:
            h = np.zeros((1, head.n_embd), np.float32)
            keep, best = len(head.tokens), float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                head.read([max(self.target.vocab.bos, 0)], h, logits=True)
                best = min(best, time.perf_counter() - t0)
                head.truncate(keep)
            head.per_token_s = best
        return head.per_token_s

    def learn(self, per_token: float) -> None:
        self.head.per_token_s = learned_cost(self.per_token_s(), per_token)

    def catch_up_s(self, tokens: int) -> float:
        return 0.25 * tokens * self.per_token_s()  # a batch reads a token for a fraction of one alone

    def rows_for(self, decoding: Decoding) -> None:
        pass  # the block's rows are its own context's; the target's are the engine's to set


def mtp_drafter(target, *, p_min: float = 0.0, sampling: SamplingConfig | None = None) -> DraftModel:
    """The "mtp" proposer on `target` (loaded with LoadConfig(mtp=True))."""
    return DraftModel(HeadDrafts(target), p_min=p_min, sampling=sampling, name="mtp", prior=UNKNOWN_PRIOR)
