"""`spec-cli bench`: the target alone against each proposer, side by side.

For every prompt the runs are interleaved -- target alone, then each
proposer, prompt after prompt -- so that drift of a noisy machine falls on
all of them alike.  Every run starts from empty KV caches and is timed end
to end, as the user waits: from the request to the last token, reading the
prompt with both models included.  Generation-only speed (after the target
read the prompt) is the second figure.

`oracle` drafts what the target alone wrote for the same prompt: perfect
drafts at no cost, the most any proposer can gain here.  Each proposer's
`ceiling_share` is its gain as a share of the oracle's.  `ngram-oracle`
drafts the lookup's own proposals, each cut to what the target alone
wrote: the lookup with perfect timing (references.TimedLookup), between the
two -- what a better policy could still win, and what only better drafts
could.

Agreement: where a proposer's tokens part from the target alone's, the
target's top-1 minus top-2 margin at that position in the baseline run says
whether it was a near-tie that rounding may flip (default numerics) or a
bug (a wide margin; or any divergence with --deterministic).

Constrained sets: an item with a `schema` (a JSON schema) or a `grammar`
(GBNF) is generated under it, by the target alone and every proposer alike
(an item with a schema and no prompt is asked for a value of it: prompts.py);
each set says how many of its constraints compiled, how many answers parse
and validate, and the constraint's host time a token.

Aggregation is pure (`summarise`), so it is tested on made-up runs.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ...core.stats import Stats
from ...errors import SpecError
from ..proposers.registry import NAMES as USER_PROPOSERS
from .prompts import constraint_of, load_prompts, valid
from .references import NAMES as REFERENCES

DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "data" / "bench.jsonl"


# Default numerics (docs/results.md, "Behind the code", has what was measured;
# tests/test_numerics.py checks both bounds on a fixed text):
#   * a batch row's logits differ from the same token decoded alone by at
#     most DELTA_MAX on any token, so no token further than 2 * DELTA_MAX
#     below the top can overtake it;
#   * the gap between the top token and any token within 2 * DELTA_MAX of it
#     moves by at most NEAR_TIE.
# So the text can part from the target alone's only where the top two are
# within NEAR_TIE: a divergence at a wider margin is not rounding.
DELTA_MAX = 2.0
NEAR_TIE = 1.0
PROPOSERS = tuple(n for n in USER_PROPOSERS if n != "none") + REFERENCES


@dataclass(frozen=True)
class Variant:
    """A proposer under a rule, adaptive (`draft_max` is the cap) or at a
    fixed length."""

    proposer: str
    fixed: int | None = None
    rule: str = "gumbel"
    show_rule: bool = False

    @property
    def label(self) -> str:
        name = self.proposer if self.fixed is None else f"{self.proposer}@{self.fixed}"
        return f"{name}/{self.rule}" if self.show_rule else name

    @classmethod
    def parse(cls, text: str) -> "Variant":
        name, _, k = text.partition("@")
        try:
            return cls(name, int(k) if k else None)
        except ValueError:
            raise SpecError(f"bad proposer {text!r}", hint="Use NAME or NAME@K, e.g. hybrid or draft@4.") from None


@dataclass
class Run:
    """One generation: its tokens, its statistics, and (for the target
    alone) the margin at each decision."""

    tokens: list[int]
    stats: Stats = field(default_factory=Stats)
    margins: list[float] = field(default_factory=list)
    # under a constraint: whether the answer parses as JSON and validates
    # against its schema (None: not a JSON schema, or no validator
    # installed), and whether the token limit cut it first
    parses: bool | None = None
    validates: bool | None = None
    cut: bool = False

    @property
    def gen_s(self) -> float:  # after the target read the prompt
        return self.stats.wall_s - self.stats.prefill_s

    @property
    def speed(self) -> float:
        return len(self.tokens) / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def speed_e2e(self) -> float:  # request to last token
        return len(self.tokens) / self.stats.wall_s if self.stats.wall_s > 0 else 0.0


def divergence(base: Run, other: Run) -> float | None:
    """The baseline's margin where `other` parts from it; None if equal."""
    if base.tokens == other.tokens:
        return None
    j = next((i for i, (a, b) in enumerate(zip(base.tokens, other.tokens)) if a != b),
             min(len(base.tokens), len(other.tokens)))
    return base.margins[j] if j < len(base.margins) else float("inf")


def _spread(xs: list[float]) -> tuple[float, float, float]:
    return (statistics.median(xs), min(xs), max(xs)) if xs else (0.0, 0.0, 0.0)


def summarise(file: str, variant: str, runs: list[tuple[Run, Run]], *, coupled: bool) -> dict:
    """One set's line: `runs` pairs (target alone, this proposer) by prompt.
    `coupled`: the text should not depend on the drafts (greedy, or the
    Gumbel rule), so agreement with the target alone is measured."""
    total, alone = Stats(), Stats()
    for b, p in runs:
        total.merge(p.stats)
        alone.merge(b.stats)
    gen = total.wall_s - total.prefill_s
    speedups = [p.speed / b.speed for b, p in runs if b.speed > 0 and p.speed > 0]
    e2e = [p.speed_e2e / b.speed_e2e for b, p in runs if b.speed_e2e > 0 and p.speed_e2e > 0]
    margins = [m for b, p in runs if (m := divergence(b, p)) is not None]
    med, lo, hi = _spread(speedups)
    e_med, e_lo, e_hi = _spread(e2e)
    agree = sum(b.tokens == p.tokens for b, p in runs) / len(runs) if runs else 0.0
    judged = [p for _, p in runs if p.parses is not None and not p.cut]
    return {
        "file": file,
        "proposer": variant,
        "prompts": len(runs),
        "speedup_e2e_median": e_med, "speedup_e2e_min": e_lo, "speedup_e2e_max": e_hi,
        "speedup_median": med, "speedup_min": lo, "speedup_max": hi,
        "ttft_s": statistics.median([p.stats.ttft_s for _, p in runs]) if runs else 0.0,
        "baseline_ttft_s": statistics.median([b.stats.ttft_s for b, _ in runs]) if runs else 0.0,
        "tokens_per_s": total.tokens_per_s,
        "baseline_tokens_per_s": alone.tokens_per_s,
        "acceptance_rate": total.acceptance_rate,
        "mean_accepted": total.mean_accepted,
        "per_position": total.position_rates(),
        "draft_share": total.draft_s / gen if gen > 0 else 0.0,
        "verify_share": total.verify_s / gen if gen > 0 else 0.0,
        "overhead_share": max(gen - total.draft_s - total.verify_s, 0.0) / gen if gen > 0 else 0.0,
        "host_ms_per_step": total.host_ms_per_step,
        "host_ms_per_drafted": total.host_ms_per_drafted,
        "baseline_host_ms_per_step": alone.host_ms_per_step,
        "agreement": agree if coupled else None,
        "identical": agree == 1.0 if coupled else None,
        "max_divergence_margin": (max(margins) if margins else 0.0) if coupled else None,
        "ceiling_share": None,
        "by_source": total.source_rates(),
        "accepted_hist": list(total.accepted_hist),  # drafting steps by tokens of their draft kept
        "per_prompt_tokens_per_s": [round(p.speed, 3) for _, p in runs],
        "per_prompt_baseline_tokens_per_s": [round(b.speed, 3) for b, _ in runs],
        # under constraints: answers that parse as JSON and validate, of those judged
        "constrained": len(judged),
        "cut": sum(p.cut for _, p in runs if p.parses is not None),  # by the token limit: not judged
        "parses": sum(bool(p.parses) for p in judged),
        "validates": sum(bool(p.validates) for p in judged if p.validates is not None),
        "validated": sum(p.validates is not None for p in judged),
        "mask_ms_per_token": total.mask_ms_per_token,
        "baseline_mask_ms_per_token": alone.mask_ms_per_token,
    }


def add_ceiling_shares(sets: list[dict]) -> None:
    """ceiling_share = (speedup - 1) / (oracle's speedup - 1), end to end,
    against the oracle of the same prompt file and rule."""
    def key(s):
        return s["file"], s["proposer"].partition("/")[2]

    oracle = {key(s): s["speedup_e2e_median"] for s in sets if s["proposer"].split("/")[0] == "oracle"}
    for s in sets:
        top = oracle.get(key(s))
        if top is not None and top > 1.0:
            s["ceiling_share"] = (s["speedup_e2e_median"] - 1.0) / (top - 1.0)


def problems(sets: list[dict], *, deterministic: bool) -> list[str]:
    """What must not happen: any divergence with --deterministic; one at a
    margin wider than rounding explains in the default mode."""
    out = []
    for s in sets:
        if s["agreement"] is None:
            continue
        wrong = problem(f"{Path(s['file']).name} {s['proposer']}", deterministic=deterministic,
                        differs=s["agreement"] < 1.0, margin=s["max_divergence_margin"])
        if wrong:
            out.append(wrong)
    return out


def problem(name: str, *, deterministic: bool, differs: bool, margin: float) -> str | None:
    """The one rule every bench judges by: with --deterministic no
    divergence at all; by default none at a margin wider than rounding."""
    if deterministic and differs:
        return f"{name}: output differs from the target alone with --deterministic"
    if margin > NEAR_TIE:
        return (f"{name}: output parts from the target alone at a margin of {margin:.3f} logits "
                f"(rounding explains at most {NEAR_TIE})")
    return None


def run_bench(pair, files: list[Path], variants: list[Variant], *, n_prompts: int | None, gen_base,
              on_progress: Callable[[str], None] | None = None, peer=None) -> list[dict]:
    """Run every prompt of every file: the target alone and each variant,
    interleaved (on every other prompt the variants that need no reference
    run before the target alone).  With a `peer` (peer.Peer) it runs each
    prompt too, before the target alone on every other prompt, and each set
    says how its generation speed compares with the peer's; `peer.rows`
    gets a line per file for the target alone's."""
    from ..runner import prompt_tokens

    seed = gen_base.seed or 0
    sets = []
    for path in files:
        items = load_prompts(path, n_prompts)
        pairs: dict[str, list[tuple[Run, Run]]] = {v.label: [] for v in variants}
        peer_runs, refused = [], []
        for j, item in enumerate(items):
            if on_progress:
                on_progress(f"{path.name} {j + 1}/{len(items)} {item['id']}")
            tokens = prompt_tokens(pair.target, item["prompt"], raw=item["kind"] == "completion")
            try:
                item_base = dataclasses.replace(gen_base, grammar=constraint_of(pair, item))
            except SpecError as e:  # a schema the engine cannot compile: counted, not run
                refused.append({"id": item["id"], "why": e.message})
                continue
            base_cfg = dataclasses.replace(item_base, adaptive=False, margins=True)
            # the references need the target alone's text first; the others run
            # before it on every other prompt, so no side always has the first turn
            late = [v for v in variants if v.proposer not in REFERENCES]
            early = late if j % 2 else []
            runs = {v.label: _variant(pair, tokens, item_base, v, seed, None) for v in early}
            peer_first = peer is not None and j % 2 == 0
            if peer_first:
                peer_runs.append(peer.run(tokens, gen_base.sampling, gen_base.max_tokens, seed))
            base = _one(pair, tokens, base_cfg, pair.new_proposer(name="none"))
            if peer is not None and not peer_first:
                peer_runs.append(peer.run(tokens, gen_base.sampling, gen_base.max_tokens, seed))
            for v in variants:
                if v.label not in runs:
                    runs[v.label] = _variant(pair, tokens, item_base, v, seed, base)
                pairs[v.label].append((base, runs[v.label]))
        constrained = any(it["schema"] is not None or it["grammar"] is not None for it in items)
        for v in variants:
            coupled = gen_base.sampling.greedy or v.rule == "gumbel"
            sets.append(summarise(str(path), v.label, pairs[v.label], coupled=coupled))
            if constrained:
                sets[-1]["refused"] = refused  # the constraints the engine could not compile
                sets[-1]["compiled"] = len(items) - len(refused)
            if peer is not None:
                sets[-1]["vs_peer_median"] = _vs_peer([p for _, p in pairs[v.label]], peer_runs)
        if peer is not None:
            bases = [b for b, _ in next(iter(pairs.values()))]
            peer.rows.append({"file": str(path), "peer": peer.name, "prompts": len(bases),
                              "vs_peer_median": _vs_peer(bases, peer_runs),
                              "tokens_per_s": sets[-1]["baseline_tokens_per_s"],  # the same target-alone runs
                              "peer_tokens_per_s": sum(r.n_tokens for r in peer_runs)
                              / max(sum(r.gen_s for r in peer_runs), 1e-9)})
    add_ceiling_shares(sets)
    return sets


def _vs_peer(runs: list["Run"], peer_runs: list) -> float:
    """Median over prompts of generation speed over the peer's."""
    ratios = [r.speed / p.speed for r, p in zip(runs, peer_runs) if r.speed > 0 and p.speed > 0]
    return statistics.median(ratios) if ratios else 0.0




def _variant(pair, tokens, gen_base, v: "Variant", seed: int, base: "Run | None") -> "Run":
    from .references import Oracle, TimedLookup

    cfg = dataclasses.replace(gen_base, adaptive=v.fixed is None, rule=v.rule,
                              draft_max=v.fixed if v.fixed is not None else gen_base.draft_max)
    prop = (Oracle(base.tokens) if v.proposer == "oracle"
            else TimedLookup(base.tokens) if v.proposer == "ngram-oracle"
            else pair.new_proposer(name=v.proposer, clock=gen_base.clock))
    return _one(pair, tokens, cfg, prop)


def _one(pair, tokens, cfg, proposer) -> Run:
    from ..session import Session

    pair.reset()  # from nothing, as a user's request: both models read the prompt
    out = Session(pair, tokens, cfg, proposer).run()
    if out.finish == "interrupted":
        raise KeyboardInterrupt
    run = Run(out.tokens, out.stats, out.margins)
    if cfg.grammar is not None and cfg.grammar.spec.kind in ("json_schema", "json_object"):
        run.parses, run.validates = valid(out.text, cfg.grammar.spec)
        run.cut = out.finish != "stop"
    return run


def report(pair, sets: list[dict], *, target: str, deterministic: bool, rules, clock=None, peer=None,
           **settings) -> dict:
    """The whole result: settings, mode, the probed curve (or the simulated
    clock's), the machine, the sets."""
    curve = (pair.target.curve or {}) if clock is None else clock.timings()
    out = {"target": target, "draft": pair.draft_name, "mtp": pair.mtp, "mode": "deterministic" if deterministic else "default",
           "rules": list(dict.fromkeys(rules)), **settings, "verify_cap": pair.target.verify_cap,
           "near_tie": NEAR_TIE, "clock": "real" if clock is None else clock.name, "simulated": clock is not None,
           "batch_curve_ms": {n: round(s * 1e3, 2) for n, s in sorted(curve.items())},
           "machine": machine(), "sets": sets}
    if peer is not None:
        out["peer"] = peer.rows
    if clock is not None:
        out["draft_ms_per_token"] = round(clock.draft_per_token_s * 1e3, 3)
    return out


def machine() -> dict:
    import os
    import platform

    from ...llama.lib import version

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from ...core.kernel import COMPILED

    return {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform(),
            "python": platform.python_version(), "llama_cpp_python": version(),
            "sampling": COMPILED.note()}


def variants_from(proposers: Iterable[str], sweep: str | None, rules: Iterable[str] = ("gumbel",)) -> list[Variant]:
    rules = list(dict.fromkeys(rules)) or ["gumbel"]
    out = [Variant.parse(p) for p in proposers]
    for v in out:
        if v.proposer not in PROPOSERS + ("none",):
            raise SpecError(f"unknown proposer {v.proposer!r}", hint=f"Choose from: {', '.join(PROPOSERS)}.")
    if sweep:
        try:
            ks = [int(x) for x in sweep.split(",") if x.strip()]
        except ValueError:
            raise SpecError(f"bad --sweep-draft-max {sweep!r}", hint="A list like 1,2,3,4,6,8.") from None
        out += [Variant(v.proposer, k) for v in list(out) if v.fixed is None for k in ks if k > 0]
    out = [dataclasses.replace(v, rule=r, show_rule=len(rules) > 1) for v in out for r in rules]
    seen, uniq = set(), []
    for v in out:
        if v.label not in seen and v.proposer != "none":
            seen.add(v.label)
            uniq.append(v)
    return uniq
