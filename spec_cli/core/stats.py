"""Running statistics over engine steps: a pure accumulator, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from .source import Source


@dataclass
class Stats:
    steps: int = 0
    drafting_steps: int = 0
    tokens: int = 0
    # end-of-generation tokens the target chose (one where a reply ended on
    # one): not text, but generated, each a step's work; the counts a server
    # reports (`generated`) include it, as llama-server's do
    eog: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0
    host_s: float = 0.0          # of draft_s + verify_s, outside llama.cpp's decode calls
    host_draft_s: float = 0.0    # of host_s, while drafting
    mask_s: float = 0.0          # of host_s, a constraint's masks and checks (core/constraint.py)
    prefill_tokens: int = 0
    wall_s: float = 0.0          # from the request to the last token, prompt included
    ttft_s: float = 0.0          # from the request to the first token
    # per_position[i] = [times a draft reached position i, times it was accepted]
    per_position: list[list[int]] = field(default_factory=list)
    # by_source[origin] = [steps, drafted, accepted]; origin is the policy's
    # source without its match length ("prompt8" -> "prompt", "hist-run" -> "hist")
    by_source: dict[str, list[int]] = field(default_factory=dict)
    # accepted_hist[a] = drafting steps that kept a tokens of their draft
    accepted_hist: list[int] = field(default_factory=list)

    def merge(self, other: "Stats") -> None:
        """Add another run's numbers (a chat's turns)."""
        for name in ("steps", "drafting_steps", "tokens", "eog", "drafted", "accepted", "draft_s", "verify_s",
                     "prefill_s", "host_s", "host_draft_s", "mask_s", "prefill_tokens", "wall_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for i, (n, a) in enumerate(other.per_position):
            if i == len(self.per_position):
                self.per_position.append([0, 0])
            self.per_position[i][0] += n
            self.per_position[i][1] += a
        for origin, counts in other.by_source.items():
            mine = self.by_source.setdefault(origin, [0, 0, 0])
            for i, c in enumerate(counts):
                mine[i] += c
        for a, n in enumerate(other.accepted_hist):
            self._count(a, n)

    def _count(self, accepted: int, n: int = 1) -> None:
        while len(self.accepted_hist) <= accepted:
            self.accepted_hist.append(0)
        self.accepted_hist[accepted] += n

    def add(self, *, n_tokens: int, drafted: int, accepted: int,
            draft_s: float, verify_s: float, source: str = "none", host_s: float = 0.0,
            host_draft_s: float = 0.0, mask_s: float = 0.0) -> None:
        self.steps += 1
        self.drafting_steps += drafted > 0
        self.tokens += n_tokens
        self.drafted += drafted
        self.accepted += accepted
        self.draft_s += draft_s
        self.verify_s += verify_s
        self.host_s += host_s
        self.host_draft_s += host_draft_s
        self.mask_s += mask_s
        while len(self.per_position) < drafted:
            self.per_position.append([0, 0])
        for i in range(drafted):
            self.per_position[i][0] += 1
            if i < accepted:
                self.per_position[i][1] += 1
        if drafted:
            self._count(accepted)
            counts = self.by_source.setdefault(origin(source), [0, 0, 0])
            counts[0] += 1
            counts[1] += drafted
            counts[2] += accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean draft tokens accepted per step, over the steps that drafted."""
        return self.accepted / self.drafting_steps if self.drafting_steps else 0.0

    @property
    def generated(self) -> int:
        """The tokens the target generated: the output's, and the
        end-of-generation token that ended it (usage, timings)."""
        return self.tokens + self.eog

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def gen_s(self) -> float:
        """Seconds after the prompt was read."""
        return max(self.wall_s - self.prefill_s, 0.0)

    @property
    def tokens_per_s(self) -> float:
        """Generation speed: tokens over the time after the prompt was read."""
        return self.tokens / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def generated_per_s(self) -> float:
        """`tokens_per_s` with the end-of-generation token counted, as usage
        and llama-server's timings count it (a server's replies)."""
        return self.generated / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def host_ms_per_step(self) -> float:
        """Host milliseconds a step costs outside drafting: the rule, sampling
        the target's rows, the loop."""
        return (self.host_s - self.host_draft_s) / self.steps * 1e3 if self.steps else 0.0

    @property
    def host_ms_per_drafted(self) -> float:
        """Host milliseconds per drafted token (a draft model's sampling and
        calls, the lookup's search)."""
        return self.host_draft_s / self.drafted * 1e3 if self.drafted else 0.0

    @property
    def mask_ms_per_token(self) -> float:
        """Host milliseconds a constraint's masks and checks took per token."""
        return self.mask_s / self.tokens * 1e3 if self.tokens else 0.0

    def source_rates(self) -> dict[str, dict]:
        """Per origin: steps, drafted, acceptance, mean accepted per step."""
        return {o: {"steps": st, "drafted": d, "accepted": a, "acceptance": round(a / d, 4) if d else 0.0,
                    "mean_accepted": round(a / st, 4) if st else 0.0}
                for o, (st, d, a) in sorted(self.by_source.items())}

    def position_rates(self) -> list[float]:
        return [a / n if n else 0.0 for n, a in self.per_position]

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted": round(self.mean_accepted, 4),
            "tokens_per_step": round(self.tokens_per_step, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "per_position": [round(r, 4) for r in self.position_rates()],
            "by_source": self.source_rates(),
            "prefill_tokens": self.prefill_tokens,
            "prefill_s": round(self.prefill_s, 4),
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "host_s": round(self.host_s, 4),
            "host_ms_per_step": round(self.host_ms_per_step, 4),
            "host_ms_per_drafted": round(self.host_ms_per_drafted, 4),
            "mask_ms_per_token": round(self.mask_ms_per_token, 4),
            "wall_s": round(self.wall_s, 4),
            "ttft_s": round(self.ttft_s, 4),
        }


def origin(source: str) -> str:
    """What drafted, without the match length: "prompt8" -> "prompt",
    "hist-run16" -> "hist" (Source.origin)."""
    return Source.of(source).origin
