"""What a model's batches cost on this machine, measured at load.

The curve c(n) -- seconds for a target batch of n tokens -- is the cost
model's prior (policy.py).  A probe taken while the machine is busy with
other work must not poison it, so a probe checks itself: every size is
timed in several rounds, and a spread between rounds or a drift of c(1)
from the first round to the last says the machine was busy; such a probe is
used for this run only and never cached.  A cached curve is re-checked
cheaply at each load (c(1) and c(4), three times each) and measured anew
when its shape disagrees or the machine is clearly quicker now than then.  Online, the cost model learns every batch size
from the real steps anyway; the probe is only where it starts.

With `--deterministic` the probe also finds the largest batch whose logits
are bitwise those of one-token decodes (`verify_cap`).

`python -m spec_cli.probe MODEL.gguf` prints the curve of each numerics
configuration tried for the default mode.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .backend import Model

SIZES = (1, 2, 3, 4, 6, 8, 12, 17)   # up to a draft of 16 plus the last token
NOISY = 0.3                          # relative spread that marks a busy machine
SHAPE_TOLERANCE = 0.2                # a cached c(4)/c(1) this far off is re-measured
_TEXT = "def f(x):\n    return x * 2 + 1  # a probe of batch sizes\n"


@dataclass(frozen=True)
class Probe:
    curve: dict[int, float]           # seconds per batch of n tokens
    verify_cap: int | None = None     # deterministic mode: largest bitwise-exact batch
    clean: bool = True                # False: the machine looked busy; not cached


def _stream(model: Model, n: int) -> list[int]:
    text = model.tokenize(_TEXT, add_special=False)
    return (text * (n // max(len(text), 1) + 1))[:n]


def time_sizes(model: Model, sizes=SIZES, *, rounds: int = 3, prefix: int = 2) -> dict[int, list[float]]:
    """Seconds for a batch of each size after `prefix` cached tokens, in
    round-robin rounds (a busy spell then shows as a spread, not as a
    skewed shape).  The KV cache is left empty."""
    stream = _stream(model, prefix + max(sizes))
    model.reset()
    model.decode(stream[:prefix])
    out: dict[int, list[float]] = {n: [] for n in sizes}
    for n in sizes:  # untimed: the first batches after a load are slow (cold caches, threads)
        model.truncate(prefix)
        model.decode(stream[prefix:prefix + n], logits_from=0)
    for _ in range(rounds):
        for n in sizes:
            model.truncate(prefix)
            t0 = time.perf_counter()
            model.decode(stream[prefix:prefix + n], logits_from=0)
            out[n].append(time.perf_counter() - t0)
    model.reset()
    return out


def spread(samples: list[float]) -> float:
    return (max(samples) - min(samples)) / max(min(samples), 1e-9)


def summarise(samples: dict[int, list[float]]) -> tuple[dict[int, float], bool]:
    """Median per size, and whether the rounds agree (a quiet machine)."""
    curve = {n: float(statistics.median(s)) for n, s in samples.items()}
    clean = all(spread(s) <= NOISY for s in samples.values())
    ones = samples.get(1, [])
    if len(ones) >= 2 and abs(ones[-1] - ones[0]) > NOISY * min(ones):
        clean = False  # the pace drifted while probing
    return curve, clean


def exact_cap(model: Model, limit: int = 16, *, long: bool = True) -> int:
    """The largest batch (at most `limit`) whose logits are bitwise those of
    one-token decodes, after a short and (`long`) after a long cached prefix
    (kernels change with the cache's length too)."""
    long_prefix = min(model.n_ctx - limit - 4, 600)  # past 512, where kernels were seen to switch
    prefixes = [2] + ([long_prefix] if long and long_prefix > 2 else [])
    stream = _stream(model, max(prefixes) + limit + 2)
    best = limit
    for start in prefixes:
        model.reset()
        model.decode(stream[:start])
        singles = np.stack([model.decode([t], logits_from=0)[0] for t in stream[start:start + best]])
        exact = 1
        for n in range(2, best + 1):
            model.truncate(start)
            if not np.array_equal(model.decode(stream[start:start + n], logits_from=0), singles[:n]):
                break
            exact = n
        best = min(best, exact)
    model.reset()
    return best


def measure(model: Model, *, tries: int = 2) -> Probe:
    """Probe the model now: the curve (and the exact cap when deterministic);
    a busy machine gets a second try before the probe is marked unclean."""
    saved = list(model.tokens)
    cap = exact_cap(model) if model.deterministic else None
    sizes = SIZES if cap is None else tuple(n for n in SIZES if n <= cap) or (1,)
    for _ in range(tries):
        curve, clean = summarise(time_sizes(model, sizes))
        if clean:
            break
    if saved:
        model.decode(saved)
    return Probe(curve, cap, clean)


def still_fits(model: Model, cached: Probe) -> bool | None:
    """A cheap look at whether a cached probe still holds: with a verify
    cap, a batch of that size is still bitwise one-token decodes; and the
    curve still has this machine's shape.  True / False, or None when the
    look at the shape was noisy."""
    if cached.verify_cap and exact_cap(model, cached.verify_cap, long=False) < cached.verify_cap:
        return False
    if 4 not in cached.curve:  # a cap under 4: the cap check above is the look
        return True
    now, clean = summarise(time_sizes(model, (1, 4), rounds=3))
    if not clean:
        return None
    if now[1] < cached.curve[1] / (1 + SHAPE_TOLERANCE * 2):
        return False  # quieter now than when probed: that probe saw a busy machine
    ratio_now = now[4] / now[1]
    ratio_then = cached.curve[4] / cached.curve[1]
    return abs(ratio_now / ratio_then - 1.0) <= SHAPE_TOLERANCE


def state_file() -> Path:
    """Measured facts about this machine live with spec-cli's state, not
    its download cache."""
    from ..files import state_dir
    return state_dir() / "probe.json"


def load(model: Model) -> Probe:
    """Set `model.curve` and `model.verify_cap`: from the state file when a
    clean probe of the same file, build and numerics is there and still
    fits, else measured now (and saved if clean)."""
    path = state_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    key = model.fingerprint()
    probe = None
    try:
        entry = known[key]
        probe = Probe({int(n): float(s) for n, s in entry["curve"].items()}, entry.get("verify_cap"))
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    if probe is None or still_fits(model, probe) is False:
        probe = measure(model)
        if probe.clean:
            known[key] = {"curve": probe.curve, "verify_cap": probe.verify_cap}
            _write_json(path, known)
    apply(model, probe)
    return probe


def apply(model: Model, probe: Probe) -> None:
    model.curve, model.verify_cap = dict(probe.curve), probe.verify_cap
    model.costs = None  # what was learned online starts again from this curve


def ensure(model: Model) -> dict[int, float]:
    """The model's curve, probed now (not cached) if nobody loaded one."""
    if model.curve is None:
        apply(model, measure(model))
    return model.curve


def _write_json(path: Path, data) -> None:
    from ..files import atomic_write

    try:
        atomic_write(path, json.dumps(data, indent=1))
    except OSError:
        pass  # a read-only state directory only costs the probe next time


# -- which numerics are fastest here (a developer's tool) --------------------

CONFIGS = {
    "llama.cpp defaults (flash attention auto, F16 KV, repack on)": dict(fa=-1, kv=None, repack=True),
    "flash attention off, F16 KV, repack on": dict(fa=0, kv=None, repack=True),
    "flash attention on, Q8_0 KV, repack on (--deterministic)": dict(fa=1, kv=8, repack=True),
    "flash attention on, Q8_0 KV, repack off": dict(fa=1, kv=8, repack=False),
}


def _main(argv: list[str]) -> None:
    """Print c(n) in ms, n = SIZES, for each configuration in CONFIGS."""
    import llama_cpp

    from . import backend

    path = argv[0]
    prefix = int(argv[1]) if len(argv) > 1 else 300
    for name, c in CONFIGS.items():
        orig = llama_cpp.llama_context_default_params

        def params(c=c):
            p = orig()
            p.flash_attn_type = c["fa"]
            if c["kv"] is not None:
                p.type_k = p.type_v = c["kv"]
            return p

        morig = llama_cpp.llama_model_default_params

        def mparams(c=c):
            p = morig()
            p.use_extra_bufts = c["repack"]
            return p

        llama_cpp.llama_context_default_params, llama_cpp.llama_model_default_params = params, mparams
        try:
            with backend.Model(path, backend.LoadConfig(n_ctx=2048)) as m:
                curve, clean = summarise(time_sizes(m, SIZES, rounds=3, prefix=prefix))
        finally:
            llama_cpp.llama_context_default_params, llama_cpp.llama_model_default_params = orig, morig
        cells = " ".join(f"{n}:{curve[n] * 1e3:.0f}" for n in SIZES)
        print(f"{name:<62} {cells}{'' if clean else '  (noisy)'}", flush=True)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
