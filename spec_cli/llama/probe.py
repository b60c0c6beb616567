"""What a model's batches cost on this machine: recalled, learned, never
re-probed.

The curve c(n) -- seconds for a target batch of n tokens -- is the cost
model's prior (policy.py).  It is kept in spec-cli's state directory per
model file, build, placement and numerics (`Model.fingerprint`), and it is
what the real steps taught, not a start-up measurement: every generation
ends by saving the cost model's curve (`remember`), so the next run starts
from what this machine's steps measured last time -- noise only moves the
average, it never triggers a new probe.  What is saved is each size as its
steps measured it, and the sizes a run never measured from those
(`CostModel.remembered`), never at the pace the run ended with (carried
from run to run, that only ever grew a size no run measured).  A
remembered curve is read bounded (`core.cost.bounded`: a batch of n never
costs more than two smaller batches that make it up).

Only the very first load of a target (nothing saved for it yet) times a
few batch sizes, once each, within `BUDGET_S` (sizes it has no time for are
extrapolated); a draft model is not timed: it starts from the target's
curve scaled by the files' sizes, and learns from its drafts.  Loading with a saved curve times nothing, so the time to the first
token is the model load, the prompt and one step.

With `--deterministic` the probe also finds the largest batch whose logits
are bitwise those of one-token decodes (`verify_cap`): a correctness check,
not a timing, done once per file, build and numerics and kept with the
curve.

`python tools/probe_configs.py MODEL.gguf` (in the repository) prints the
curve of each numerics configuration tried for the default mode.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.cost import CostModel, bounded
from .model import Model

# up to a draft of 64 plus the last token: past 16 rows a CPU's kernels change, and a row
# costs half what it does alone (a long copy's draft is where that pays); the sizes a
# first load has no time for are extrapolated from the last ones timed
SIZES = (1, 2, 4, 8, 17, 33, 65)
BUDGET_S = 1.5                       # the most a first load spends timing a model (once a file, build, numerics)
CAP_PREFIXES = (2, 250, 600)         # cached lengths the exact cap is checked after: short, across
                                     # the KV cache's 256-cell padding, past 512
# a draft model is loaded only where an always-accepted draft would gain this
# much: with a real acceptance of 0.8 a 4-token draft yields 2/3 of the ideal
LOAD_MARGIN = 1.3
_TEXT = "def f(x):\n    return x * 2 + 1  # a probe of batch sizes\n"


@dataclass(frozen=True)
class Probe:
    curve: dict[int, float]           # seconds per batch of n tokens
    verify_cap: int | None = None     # deterministic mode: largest bitwise-exact batch
    learned: bool = False             # True: recalled from earlier runs; False: timed at this load


def _stream(model: Model, n: int) -> list[int]:
    text = model.vocab.tokenize(_TEXT, add_special=False)
    return (text * (n // max(len(text), 1) + 1))[:n]


def time_sizes(model: Model, sizes=SIZES, *, rounds: int = 3, prefix: int = 2,
               budget_s: float | None = None) -> dict[int, list[float]]:
    """Seconds for a batch of each size after `prefix` cached tokens, in
    round-robin rounds; with `budget_s`, sizes are timed in order until the
    budget is spent (at least c(1)).  The KV cache is left empty."""
    start = time.perf_counter()  # the budget covers everything, the untimed batch too
    stream = _stream(model, prefix + max(sizes))
    model.reset()
    model.decode(stream[:prefix])
    model.decode(stream[prefix:prefix + 1], logits_from=0)  # untimed: the first batch after a load is slow
    out: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            if budget_s is not None and out[1]:
                last = max(m for m, s in out.items() if s)
                # a batch costs at most its share of the last one's tokens more
                if time.perf_counter() - start + out[last][-1] * n / last > budget_s:
                    break
            model.truncate(prefix)
            t0 = time.perf_counter()
            model.decode(stream[prefix:prefix + n], logits_from=0)
            out[n].append(time.perf_counter() - t0)
    model.reset()
    return {n: s for n, s in out.items() if s}


def summarise(samples: dict[int, list[float]]) -> dict[int, float]:
    """The median per size."""
    return {n: float(statistics.median(s)) for n, s in samples.items()}


def first_curve(model: Model, sizes=SIZES) -> dict[int, float]:
    """A first load's curve: each size once, within BUDGET_S."""
    return summarise(time_sizes(model, sizes, rounds=1, budget_s=BUDGET_S))


def exact_cap(model: Model, limit: int = 16, *, prefixes=CAP_PREFIXES) -> int:
    """The largest batch (at most `limit`) whose logits are bitwise those of
    one-token decodes at every position, after each cached prefix length
    (kernels change with the cache's length too).  Batches grow until the
    first that differs; one prefill of the longest prefix serves them all."""
    prefixes = sorted(p for p in prefixes if p + limit + 2 <= model.n_ctx)
    stream = _stream(model, max(prefixes) + limit + 2)
    best = limit
    model.reset()
    for start in prefixes:
        model.truncate(start)
        model.catch_up(stream[:start])
        singles = [model.decode([t], logits_from=0)[0] for t in stream[start:start + best]]
        exact = 1
        for n in range(2, best + 1):
            model.truncate(start)
            rows = model.decode(stream[start:start + n], logits_from=0)
            if not all(np.array_equal(r, s) for r, s in zip(rows, singles)):
                break
            exact = n
        best = min(best, exact)
        model.truncate(start)
    model.reset()
    return best


def _capped(sizes, cap: int | None) -> tuple[int, ...]:
    """The sizes a deterministic model may verify at (all without a cap)."""
    return tuple(sizes) if cap is None else tuple(n for n in sizes if n <= cap) or (1,)


def measure(model: Model, sizes=SIZES) -> Probe:
    """Time the model now (bounded) and, when deterministic, find its cap."""
    saved = list(model.tokens)
    cap = exact_cap(model) if model.deterministic else None
    probe = Probe(first_curve(model, _capped(sizes, cap)), cap)
    if saved:
        model.decode(saved)
    return probe


STATE = "costs.json"


def state_file() -> Path:
    """Measured facts about this machine live with spec-cli's state, not
    its download cache."""
    from ..files import state_dir
    return state_dir() / STATE


def _read() -> dict:
    from ..files import read_state
    return read_state(STATE)


def _entry(known: dict, key: str) -> tuple[dict[int, float] | None, int | None]:
    entry = known.get(key)
    curve = cap = None
    try:
        curve = {int(n): float(s) for n, s in entry["curve"].items()}
        curve = bounded(curve) if curve and all(0 < s < float("inf") for s in curve.values()) else None
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    try:
        cap = int(entry["verify_cap"]) if entry.get("verify_cap") else None
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    return curve, cap


def load(model: Model, *, like: Model | None = None) -> Probe:
    """Set `model.curve` and `model.verify_cap`: what earlier runs of the
    same file, build and numerics learned, else timed now (bounded) and
    saved.  `like`: `model` is a draft for that (loaded) target; it is not
    timed but starts from the target's curve scaled by the files' sizes,
    and needs no exact cap."""
    key = model.fingerprint()
    curve, cap = _entry(_read(), key)
    checked = model.deterministic and cap is None and like is None
    if checked:
        cap = exact_cap(model)
    if curve is not None:
        probe = Probe(curve, cap, learned=True)
    elif like is not None and like.curve:
        ratio = model.size_bytes / max(like.size_bytes, 1)
        probe = Probe({n: s * ratio for n, s in like.curve.items()}, cap)
    else:
        probe = Probe(first_curve(model, _capped(SIZES, cap)), cap)
    apply(model, probe)
    if checked or not probe.learned:
        _save(key, probe.curve, cap)
    return probe


def recall(path: Path, cfg) -> dict[int, float] | None:
    """The curve remembered for a model not loaded yet (facts.fingerprint)."""
    from .facts import fingerprint

    try:
        return _entry(_read(), fingerprint(Path(path), cfg))[0]
    except OSError:
        return None


def _remembered_cost(target: Path, target_cfg, k_max: int):
    """(the curve remembered for the target, c(1..k_max + 1) from it), or
    None where nothing is known of it yet."""
    from ..core.cost import CostModel

    curve = recall(target, target_cfg)
    if not curve or 1 not in curve:
        return None
    return curve, CostModel.from_timings(curve, k_max + 1)


def draft_cannot_pay(target: Path, target_cfg, draft: Path | None, draft_cfg, k_max: int = 16,
                     together: int = 1, draft_bytes: int | None = None) -> str | None:
    """Why a draft model could never pay here, from what earlier runs
    remembered, before either model loads; None where it could, or where
    nothing is known yet.  The draft's cost per token is what its drafts
    measured, else the target's cost scaled by the files' sizes (a small
    model pays more than its size on a busy or compute-bound CPU: its
    measured cost is the one to believe; `--proposer draft` measures it
    again).  `draft`: its file, or None for one not downloaded yet, whose
    size `draft_bytes` says.  `together`: the requests a batch keeps
    running at once, each drafting with the others
    (core.batching.pays_together)."""
    from ..core.batching import pays_together
    from ..core.cost import CostModel, can_pay

    known = _remembered_cost(target, target_cfg, k_max)
    if known is None:
        return None
    curve, cost = known
    try:
        size = Path(draft).stat().st_size if draft is not None else draft_bytes
        ratio = size / max(Path(target).stat().st_size, 1) if size else None
    except OSError:
        return None  # the load will say what is wrong with the file
    if ratio is None:
        return None
    remembered = recall(draft, draft_cfg) if draft is not None else None
    d = remembered[1] if remembered and 1 in remembered else ratio * curve[1]
    if remembered and d > remembered.get(2, float("inf")):
        # a cost per token above its own batch of two is a stall remembered, not a steady
        # cost (spec-cli before its bounded learning kept such): loaded, it is measured again
        d = ratio * curve[1]
    if not can_pay(cost, d, k_max, margin=LOAD_MARGIN):
        return (f"a draft token costs {d / curve[1]:.2f} of a target token and a batch of two "
                f"{cost.c(2) / cost.c(1):.2f} here, so even a draft that is always right would gain "
                f"less than {LOAD_MARGIN}x")
    n = together
    if n <= 1:
        return None
    wide = CostModel.from_timings(curve, n * (k_max + 1))  # past the sizes known: their slope
    if not pays_together(wide.c, d, n, k_max, LOAD_MARGIN):
        return (f"with {n} requests at once a target batch of {2 * n} rows costs {wide.c(2 * n) / wide.c(n):.2f} "
                f"of one of {n} here, so even a draft that is always right would gain less than {LOAD_MARGIN}x")
    return None


def draft_would_pay(target: Path, target_cfg, k_max: int = 16) -> str:
    """What it would take for a draft model to pay here, by the target's
    remembered curve: the most a draft token may cost against a target
    token (a draft that is always right gaining LOAD_MARGIN), as a target
    so many times the draft's size; or, where not even a free draft would,
    a GPU."""
    from ..core.cost import can_pay

    known = _remembered_cost(target, target_cfg, k_max)
    if known is None:
        return ""
    curve, cost = known
    lo, hi = 0.0, 1.0
    if not can_pay(cost, 0.0, k_max, margin=LOAD_MARGIN):
        return ("no draft model pays on this CPU, whatever its size (a target batch costs nearly its rows); "
                "one would on a GPU (--gpu-layers)")
    for _ in range(20):  # the dearest draft token that still pays
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if can_pay(cost, mid * curve[1], k_max, margin=LOAD_MARGIN) else (lo, mid)
    return (f"a draft model would pay here with a target about {1 / max(lo, 1e-3):.0f}x its size (a draft "
            f"token under {lo:.2f} of a target token), or on a GPU (--gpu-layers)")


BUSY = 2.0  # a run whose one token cost this much more than the curve remembered ran on a busy machine
RISE = 1.25  # the most one run raises a remembered size; it lowers one freely


def remember(model: Model) -> None:
    """Keep what this run taught about `model`'s costs for the next run:
    the target's learned cost model, a draft model's learned curve -- not
    where the run's token cost BUSY times what was remembered: a busy spell
    (a build beside it, another model) would leave the next quiet run, and
    the verdicts taken before it loads (whether a draft model can pay, and
    so whether it is downloaded at all), a machine several times slower
    than it is.  A run follows a slower machine within its first steps
    anyway (core/cost.py); a faster one always replaces the curve.  Nor
    does one run raise a batch's cost more than RISE over what was
    remembered, beyond what its single token rose (a slower machine):
    a busy spell in the middle of a run (its single tokens quiet, its long
    drafts beside a build) left batches of 21 to 65 rows remembered at twice
    their cost, and a size that looks dear is never drafted, so never
    measured again.  A machine that really slowed is followed within each
    run, and remembered within a few."""
    if model.curve is None:
        return
    curve = dict(model.curve)
    if model.costs is not None:
        curve = model.costs.remembered()
    if model.verify_cap:
        curve = {n: s for n, s in curve.items() if n <= model.verify_cap}
    key = model.fingerprint()
    before, _ = _entry(_read(), key)
    if before and 1 in before and 1 in curve:
        if curve[1] > BUSY * before[1]:
            return
        rise = RISE * max(1.0, curve[1] / before[1])
        was = CostModel.from_timings(before, max(curve)).prior  # the sizes between those remembered too
        curve = {n: min(s, rise * was[n - 1]) if n > 1 else s for n, s in curve.items()}
    _save(key, curve, model.verify_cap)


def _save(key: str, curve: dict[int, float], cap: int | None) -> None:
    from ..files import write_state

    known = _read()
    known[key] = {"curve": {str(n): round(s, 6) for n, s in sorted(curve.items())}, "verify_cap": cap}
    write_state(STATE, known)


def apply(model: Model, probe: Probe) -> None:
    model.curve, model.verify_cap = dict(probe.curve), probe.verify_cap
    model.costs = None  # what was learned online starts again from this curve


def ensure(model: Model) -> dict[int, float]:
    """The model's curve, timed now (not saved) if nobody loaded one."""
    if model.curve is None:
        apply(model, measure(model))
    return model.curve
