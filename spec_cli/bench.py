"""`spec-cli bench`: the target alone against each proposer, side by side.

For every prompt the runs are interleaved -- target alone, then each
proposer, prompt after prompt -- so that drift of a noisy machine falls on
all of them alike.  Times are generation times: the prompt is read (and the
draft primed) before the clock starts, the same for every run.

Aggregation is pure (`summarise`), so it is tested on made-up runs.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .errors import SpecError

DEFAULT_PROMPTS = Path(__file__).resolve().parent / "data" / "bench.jsonl"


@dataclass(frozen=True)
class Variant:
    """A proposer, adaptive (`draft_max` is the cap) or at a fixed length."""

    proposer: str
    fixed: int | None = None

    @property
    def label(self) -> str:
        return self.proposer if self.fixed is None else f"{self.proposer}@{self.fixed}"

    @classmethod
    def parse(cls, text: str) -> "Variant":
        name, _, k = text.partition("@")
        try:
            return cls(name, int(k) if k else None)
        except ValueError:
            raise SpecError(f"bad proposer {text!r}", hint="Use NAME or NAME@K, e.g. hybrid or draft@4.") from None


@dataclass
class Run:
    """One generation: what the engine reported."""

    tokens: list[int]
    gen_s: float
    draft_s: float
    verify_s: float
    drafted: int
    accepted: int
    steps: int
    per_position: list[list[int]] = field(default_factory=list)

    @property
    def speed(self) -> float:
        return len(self.tokens) / self.gen_s if self.gen_s > 0 else 0.0


def load_prompts(path: Path, n: int | None) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise SpecError(f"cannot read prompt file {path}: {e.strerror}") from e
    items = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            prompt, kind = item["prompt"], item.get("kind", "chat")
        except (ValueError, KeyError, TypeError) as e:
            raise SpecError(f"{path}:{i}: not a prompt line ({e})",
                            hint='Each line is a JSON object: {"id": ..., "kind": "completion"|"chat", "prompt": ...}.') from e
        if kind not in ("completion", "chat"):
            raise SpecError(f"{path}:{i}: kind must be 'completion' or 'chat', not {kind!r}")
        items.append({"id": str(item.get("id", f"{path.name}:{i}")), "kind": kind, "prompt": prompt})
    if not items:
        raise SpecError(f"{path} holds no prompts")
    return items[:n] if n else items


def summarise(file: str, variant: str, runs: list[tuple[Run, Run]], *, greedy: bool) -> dict:
    """One set's line: `runs` pairs (target alone, this proposer) by prompt."""
    speedups = [p.speed / b.speed for b, p in runs if b.speed > 0 and p.speed > 0]
    gen = sum(p.gen_s for _, p in runs)
    tokens = sum(len(p.tokens) for _, p in runs)
    drafted = sum(p.drafted for _, p in runs)
    accepted = sum(p.accepted for _, p in runs)
    per_pos: list[list[int]] = []
    for _, p in runs:
        for i, (n, a) in enumerate(p.per_position):
            while len(per_pos) <= i:
                per_pos.append([0, 0])
            per_pos[i][0] += n
            per_pos[i][1] += a
    draft_s = sum(p.draft_s for _, p in runs)
    verify_s = sum(p.verify_s for _, p in runs)
    other = max(gen - draft_s - verify_s, 0.0)
    steps_drafting = sum(p.per_position[0][0] if p.per_position else 0 for _, p in runs)
    return {
        "file": file,
        "proposer": variant,
        "prompts": len(runs),
        "speedup_median": statistics.median(speedups) if speedups else 0.0,
        "speedup_min": min(speedups) if speedups else 0.0,
        "speedup_max": max(speedups) if speedups else 0.0,
        "tokens_per_s": tokens / gen if gen else 0.0,
        "baseline_tokens_per_s": sum(len(b.tokens) for b, _ in runs) / max(sum(b.gen_s for b, _ in runs), 1e-9),
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_accepted": accepted / steps_drafting if steps_drafting else 0.0,
        "per_position": [a / n if n else 0.0 for n, a in per_pos],
        "draft_share": draft_s / gen if gen else 0.0,
        "verify_share": verify_s / gen if gen else 0.0,
        "overhead_share": other / gen if gen else 0.0,
        "identical": all(b.tokens == p.tokens for b, p in runs) if greedy else None,
    }


def run_bench(pair, files: list[Path], variants: list[Variant], *, n_prompts: int | None, gen_base,
              on_progress: Callable[[str], None] | None = None) -> list[dict]:
    """Run every prompt of every file: target alone, then each variant."""
    import dataclasses

    from .runner import prompt_tokens

    sets = []
    for path in files:
        items = load_prompts(path, n_prompts)
        pairs: dict[str, list[tuple[Run, Run]]] = {v.label: [] for v in variants}
        for j, item in enumerate(items):
            if on_progress:
                on_progress(f"{path.name} {j + 1}/{len(items)} {item['id']}")
            tokens = prompt_tokens(pair.target, item["prompt"], raw=item["kind"] == "completion")
            base_cfg = dataclasses.replace(gen_base, adaptive=False)
            base = _one(pair, tokens, base_cfg, pair.proposer_named("none", gen_base.sampling, gen_base.seed or 0))
            for v in variants:
                cfg = dataclasses.replace(gen_base, adaptive=v.fixed is None,
                                          draft_max=v.fixed if v.fixed is not None else gen_base.draft_max)
                prop = pair.proposer_named(v.proposer, gen_base.sampling, gen_base.seed or 0)
                pairs[v.label].append((base, _one(pair, tokens, cfg, prop)))
        for v in variants:
            sets.append(summarise(str(path), v.label, pairs[v.label], greedy=gen_base.sampling.greedy))
    return sets


def _one(pair, tokens, cfg, proposer) -> Run:
    from .runner import stream

    out = stream(pair, tokens, cfg, proposer=proposer)
    if out.finish == "interrupted":
        raise KeyboardInterrupt
    s = out.stats
    return Run(tokens=out.tokens, gen_s=s.wall_s - s.prefill_s, draft_s=s.draft_s, verify_s=s.verify_s,
               drafted=s.drafted, accepted=s.accepted, steps=s.steps,
               per_position=[list(x) for x in s.per_position])


def machine() -> dict:
    import os
    import platform

    import llama_cpp

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform(),
            "python": platform.python_version(), "llama_cpp_python": llama_cpp.__version__}


def variants_from(proposers: Iterable[str], sweep: str | None) -> list[Variant]:
    out = [Variant.parse(p) for p in proposers]
    if sweep:
        try:
            ks = [int(x) for x in sweep.split(",") if x.strip()]
        except ValueError:
            raise SpecError(f"bad --sweep-draft-max {sweep!r}", hint="A list like 1,2,3,4,6,8.") from None
        out += [Variant(v.proposer, k) for v in list(out) if v.fixed is None for k in ks if k > 0]
    seen, uniq = set(), []
    for v in out:
        if v.label not in seen and v.proposer != "none":
            seen.add(v.label)
            uniq.append(v)
    return uniq
