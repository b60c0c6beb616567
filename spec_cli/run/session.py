"""A `Session` is one generation on a loaded pair: the prompt, the proposer,
the seed and settings (GenConfig: rule, stop strings, max tokens), and what
came of it -- tokens, text (by origin, for colouring), finish reason,
statistics.  `generate`, `chat`, `complete` and `bench` all drive Sessions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from .engine import GenConfig, Step, generate
from .proposers import Proposer
from .runner import Pair
from ..core.stats import Stats


class Stops(Protocol):
    """Where a generation ends besides stop strings and max tokens (an
    editor's rules, editor.EditorStops)."""

    def cut(self, text: str, elapsed_s: float, *, new_from: int) -> int | None:
        """None to go on; else how much of `text` to keep, and stop."""

    def hold(self, text: str) -> int:
        """How much of `text` may be shown already."""


@dataclass
class Session:
    pair: Pair
    prompt: list[int]
    gen: GenConfig
    proposer: Proposer
    stops: Stops | None = None
    # cancelled() -> True ends the generation after the current step (finish "cancelled")
    cancelled: Callable[[], bool] | None = None

    stats: Stats = field(default_factory=Stats)
    tokens: list[int] = field(default_factory=list)
    segments: list[tuple[str, bool]] = field(default_factory=list)  # (text, from the draft?)
    margins: list[float] = field(default_factory=list)  # with GenConfig.margins
    logprobs: list = field(default_factory=list)  # with GenConfig.logprobs: each token's (core.adjust.TokenLogprob)
    finish: str | None = None
    stop_type: str | None = None  # llama-server's: "eos", "word" or "limit" (engine.Step)
    stop_word: str | None = None  # with stop_type "word": the stop string found

    @property
    def text(self) -> str:
        return "".join(piece for piece, _ in self.segments)

    def run(self, on_step: Callable[[Step, Stats], None] | None = None) -> "Session":
        """Generate to the end; `on_step(step, stats)` sees every step as it
        comes, its text as far as it may be shown (`stops` may hold some
        back, and cut it).  Ctrl-C ends the generation with finish
        "interrupted" and keeps what was written."""
        self.begin()
        try:
            for step in generate(self.pair.target, self.proposer, self.prompt, self.gen):
                if self.take(step, on_step):
                    break
        except KeyboardInterrupt:
            self.finish = "interrupted"
        return self.end()

    def begin(self) -> None:
        """The generation starts now (`run` does it; run/batch.py's caller
        does where several run at once and each Step is handed to `take`)."""
        self._t0 = time.perf_counter()  # moved on by each step's aside_s: bench's margins are no one's wait
        self._written: list[tuple[str, bool]] = []  # every segment, shown or not
        self._text, self._shown = "", 0
        self._ends: list[int] = []  # with `stops`: where each token's text ends in `text`

    def take(self, step: Step, on_step: Callable[[Step, Stats], None] | None = None) -> bool:
        """Count one step, and show it; True when the generation is over."""
        stats = self.stats
        stats.add(n_tokens=len(step.tokens), drafted=step.drafted, accepted=step.accepted,
                  draft_s=step.draft_s, verify_s=step.verify_s, source=step.source,
                  host_s=step.host_s, host_draft_s=step.host_draft_s, mask_s=step.mask_s)
        stats.prefill_s += step.prefill_s
        stats.prefill_tokens += step.prefill_tokens
        self._t0 += step.aside_s
        stats.wall_s = self._wall(self._t0)
        if not stats.ttft_s and step.tokens:
            stats.ttft_s = stats.wall_s
        self.tokens.extend(step.tokens)
        self.margins.extend(step.margins)
        self.logprobs.extend(step.logprobs)
        self.finish, self.stop_type, self.stop_word = step.finish_reason, step.stop_type, step.stop_word
        if self.stops is not None:
            step = self._cut(step)
        stats.eog += self.stop_type == "eos"
        self.segments.extend(step.segments)
        if on_step is not None:
            on_step(step, stats)
        if self.finish is None and self.cancelled is not None and self.cancelled():
            self.finish = "cancelled"
        return self.finish is not None

    def _cut(self, step: Step) -> Step:
        """The step as far as `stops` lets it be shown, the generation ended
        where they cut."""
        stats = self.stats
        self._written.extend(step.segments)
        for piece in step.pieces:
            self._ends.append((self._ends[-1] if self._ends else 0) + len(piece))
        self._text += step.text
        text = self._text
        cut = self.stops.cut(text, stats.wall_s - stats.prefill_s, new_from=len(text) - len(step.text))
        if cut is not None:
            text, self.finish, self.stop_type = text[:cut], "stop", "limit"
            self._text = text
            # the tokens whose text was cut away are not the output's
            kept = sum(start < cut for start in [0, *self._ends[:-1]])
            stats.tokens -= len(self.tokens) - kept
            del self.tokens[kept:]
            del self.logprobs[kept:]
        upto = self.stops.hold(text) if self.finish is None else len(text)
        step = replace(step, text=text[self._shown:upto], segments=_between(self._written, self._shown, upto),
                       finish_reason=self.finish)
        self._shown = max(self._shown, upto)
        return step

    def end(self) -> "Session":
        """The generation is over: its wall time, and what the pair learned kept."""
        self.stats.wall_s = self._wall(self._t0)
        if self.gen.clock is None:
            self.pair.remember()
        return self

    def _wall(self, t0: float) -> float:
        """The user's wait so far; on a simulated clock, what it charged."""
        s = self.stats
        return time.perf_counter() - t0 if self.gen.clock is None else s.prefill_s + s.draft_s + s.verify_s


def _between(segments: list[tuple[str, bool]], start: int, end: int) -> tuple[tuple[str, bool], ...]:
    """The (piece, origin) segments covering characters [start, end)."""
    out, pos = [], 0
    for piece, origin in segments:
        lo, hi = max(start, pos), min(end, pos + len(piece))
        if lo < hi:
            out.append((piece[lo - pos:hi - pos], origin))
        pos += len(piece)
    return tuple(out)
