"""A `Session` is one generation on a loaded pair: the prompt, the proposer,
the seed and settings (GenConfig: rule, stop strings, max tokens), and what
came of it -- tokens, text (by origin, for colouring), finish reason,
statistics.  `generate`, `chat`, `complete` and `bench` all drive Sessions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .engine import GenConfig, Step, generate
from .proposers import Proposer
from .runner import Pair
from ..core.stats import Stats


@dataclass
class Session:
    pair: Pair
    prompt: list[int]
    gen: GenConfig
    proposer: Proposer
    # until(text so far) -> True ends the generation with finish "stop"
    until: Callable[[str], bool] | None = None

    stats: Stats = field(default_factory=Stats)
    tokens: list[int] = field(default_factory=list)
    segments: list[tuple[str, bool]] = field(default_factory=list)  # (text, from the draft?)
    margins: list[float] = field(default_factory=list)  # with GenConfig.margins
    finish: str | None = None

    @property
    def text(self) -> str:
        return "".join(piece for piece, _ in self.segments)

    def run(self, on_step: Callable[[Step, Stats], None] | None = None) -> "Session":
        """Generate to the end; `on_step(step, stats)` sees every step as it
        comes.  Ctrl-C ends the generation with finish "interrupted" and
        keeps what was written."""
        stats = self.stats
        t0 = time.perf_counter()
        try:
            for step in generate(self.pair.target, self.proposer, self.prompt, self.gen):
                stats.add(n_tokens=len(step.tokens), drafted=step.drafted, accepted=step.accepted,
                          draft_s=step.draft_s, verify_s=step.verify_s)
                stats.prefill_s += step.prefill_s
                stats.prefill_tokens += step.prefill_tokens
                stats.wall_s = time.perf_counter() - t0
                if not stats.ttft_s and step.tokens:
                    stats.ttft_s = stats.wall_s
                self.tokens.extend(step.tokens)
                self.margins.extend(step.margins)
                self.segments.extend(step.segments)
                self.finish = step.finish_reason
                if on_step is not None:
                    on_step(step, stats)
                if self.until is not None and self.finish is None and self.until(self.text):
                    self.finish = "stop"
                    break
        except KeyboardInterrupt:
            self.finish = "interrupted"
        stats.wall_s = time.perf_counter() - t0
        return self
