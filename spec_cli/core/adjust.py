"""What a request changes in the target's logits before sampling, and the
log-probabilities it may ask to see.  Pure numpy, no I/O.

`Adjust` is llama.cpp's logit-bias sampler followed by its penalties
sampler, as llama-server runs them ahead of temperature and truncation:

  1. logit_bias: each listed token's logit plus its bias (-inf: never);
  2. penalties over the last `last_n` tokens of the context (the prompt's
     included, as llama-server feeds its sampler the prompt first; -1 =
     the whole context, 0 = off): a token seen there has its logit divided
     by `repeat` where it is positive and multiplied by it where it is not,
     then `frequency` x its count and `presence` subtracted.

Row i of a verify batch is the distribution after the context and the
draft's first i tokens, so its penalties count those drafted tokens too:
`row(x, history)` is given exactly that history.  The rule (run/rows.py)
then chooses from the adjusted row as from any other, so the text under a
penalty is the target's under that penalty whatever was drafted.

`logprobs` are the target's own, of its raw row: log softmax before the
request's temperature, truncation, bias, penalties and constraint, as
llama-server reports them (`post_sampling_probs` false) and as OpenAI's
do not change with temperature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["Adjust", "TokenLogprob", "logprob_of"]

MAX_TOP_LOGPROBS = 20   # OpenAI's bound on top_logprobs


@dataclass(frozen=True)
class Adjust:
    bias: tuple[tuple[int, float], ...] = ()   # (token, bias); -inf bans it
    repeat: float = 1.0
    frequency: float = 0.0
    presence: float = 0.0
    last_n: int = 64

    def __post_init__(self) -> None:
        if self.repeat <= 0 or not math.isfinite(self.repeat):
            raise ValueError("repeat_penalty must be a positive number")
        if self.last_n < -1:
            raise ValueError("repeat_last_n must be -1 (the whole context), 0 (off) or more")

    @property
    def penalises(self) -> bool:
        return self.last_n != 0 and (self.repeat != 1.0 or self.frequency != 0.0 or self.presence != 0.0)

    @property
    def active(self) -> bool:
        """Whether any row changes (a rule without it reads rows as they come)."""
        return bool(self.bias) or self.penalises

    def row(self, x: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """Logits row `x` (whole, any float dtype) adjusted after `history`
        (the context the row follows); a float32 copy, `x` untouched."""
        out = np.array(x, dtype=np.float32)
        if self.bias:
            ids = np.fromiter((t for t, _ in self.bias), dtype=np.int64, count=len(self.bias))
            out[ids] += np.fromiter((b for _, b in self.bias), dtype=np.float32, count=len(self.bias))
        if self.penalises and history:
            window = history if self.last_n < 0 else history[-self.last_n:]
            ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
            keep = ids < out.shape[-1]
            ids, counts = ids[keep], counts[keep]
            v = out[ids]
            v = np.where(v <= 0, v * np.float32(self.repeat), v / np.float32(self.repeat))
            # as llama.cpp: logit -= count * frequency + presence, the sum first
            out[ids] = v - (counts.astype(np.float32) * np.float32(self.frequency) + np.float32(self.presence))
        return out


class TokenLogprob(NamedTuple):
    """One emitted token's log-probability under the target's raw row, and
    the row's `n` most likely tokens with theirs (most likely first); an
    echoed prompt's first token has neither (None)."""

    token: int
    logprob: float | None
    top: tuple[tuple[int, float], ...] | None


def logprob_of(row: np.ndarray, token: int, n: int) -> TokenLogprob:
    """`token`'s log softmax in logits `row`, with the top `n` (0: none)."""
    x = np.asarray(row, dtype=np.float64) if row.dtype != np.float64 else row
    m = float(np.max(x))
    log_z = m + math.log(float(np.sum(np.exp(x - m))))
    top: tuple[tuple[int, float], ...] = ()
    if n > 0:
        n = min(n, x.shape[-1])
        ids = np.argpartition(-x, n - 1)[:n]
        ids = ids[np.lexsort((ids, -x[ids]))]   # most likely first, ties by id
        top = tuple((int(i), float(x[i]) - log_z) for i in ids)
    return TokenLogprob(int(token), float(x[token]) - log_z, top)
