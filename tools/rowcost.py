"""What choosing a token costs the host, right after the decode that made
its row -- where it is paid in a real run, with the model's weights in the
caches -- by sampling setting, the compiled kernel against the numpy path:

    python tools/rowcost.py [--model NAME_OR_GGUF] [--runs 30]

Each run decodes one token (the same position again), then times
`sampling.choose` (with confidence) on its row, once with the kernel and once without, in
turn, and the host's share of the decode itself (its time outside
llama_decode); then the host's share of `Model.decode_choose`, a drafted
token's decode and choice in one call ("one call": what a draft pays a
token).  Then a verify batch of 17 rows that the rule reads to the end,
walked by the kernel (`sampling.choose_rows`) in one thread and in the
model's threads.  Prints medians and 10th percentiles in ms; nothing here
is asserted (speed is measured, not tested).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from spec_cli.core import sampling
from spec_cli.core.config import SamplingConfig
from spec_cli.core.kernel import COMPILED, NUMPY
from spec_cli.errors import SpecError

SETTINGS = {
    "greedy": SamplingConfig(),
    "llama.cpp's defaults (T 0.8)": SamplingConfig(0.8, 40, 0.95, 0.05),
    "T 1, full vocabulary": SamplingConfig(1.0),
    "T 0.8, top-p 0.95": SamplingConfig(0.8, top_p=0.95),
}
PROMPT = 'def merge_sorted(a, b):\n    """Merge two sorted lists into one sorted list."""\n'


def measure(model, runs: int) -> tuple[dict[str, dict[str, list[float]]], list[float]]:
    """{setting: {"kernel" | "numpy" | "one call" | "rows, 1 thread" |
    "rows, N threads": [ms]}}, and the decode's host ms."""
    decode_seconds = lambda: model.timer.seconds  # noqa: E731
    kernel = COMPILED if COMPILED.available else None
    prompt = model.vocab.tokenize(PROMPT)
    model.reset()
    model.decode(prompt[:-1])
    wide = f"rows, {model.n_threads} threads"
    times = {name: {"kernel": [], "numpy": [], "one call": [], "rows, 1 thread": [], wide: []} for name in SETTINGS}
    host = []
    for i in range(runs):
        for name, cfg in SETTINGS.items():
            for side in ("kernel", "numpy") if i % 2 == 0 else ("numpy", "kernel"):
                if side == "kernel" and kernel is None:
                    continue
                model.truncate(len(prompt) - 1)
                t0, d0 = time.perf_counter(), decode_seconds()
                row = model.decode([prompt[-1]], logits_from=0, copy=False)[0]
                t1, d1 = time.perf_counter(), decode_seconds()
                sampling.choose(row, cfg, 1, i, confidence=True, kernel=COMPILED if side == "kernel" else NUMPY)
                times[name][side].append((time.perf_counter() - t1) * 1e3)
                host.append((t1 - t0 - (d1 - d0)) * 1e3)
            if kernel is None:
                continue
            model.truncate(len(prompt) - 1)
            t0, d0 = time.perf_counter(), decode_seconds()
            model.decode_choose(prompt[-1], cfg, 1, i, confidence=True)
            times[name]["one call"].append((time.perf_counter() - t0 - (decode_seconds() - d0)) * 1e3)
            _rows(model, prompt, cfg, i, times[name])
    return times, host


def _rows(model, prompt: list[int], cfg: SamplingConfig, i: int, into: dict[str, list[float]]) -> None:
    """A 17-row verify batch read to the end (its draft is each row's own
    choice), walked in 1 thread and in the model's threads, in turn."""
    start = max(len(prompt) - 17, 1)
    feed = prompt[start - 1:start + 16]
    model.truncate(start - 1)
    rows = model.decode(feed, logits_from=0)  # a copy: each row's choice, the draft that agrees throughout
    draft = [sampling.choose(rows[j], cfg, 1, i + j).token for j in range(len(feed) - 1)]
    for threads in (1, model.n_threads) if i % 2 == 0 else (model.n_threads, 1):
        model.truncate(start - 1)
        rows = model.decode(feed, logits_from=0, copy=False)
        t0 = time.perf_counter()
        sampling.choose_rows(rows, draft, cfg, 1, i, threads=threads)
        into["rows, 1 thread" if threads == 1 else f"rows, {threads} threads"].append((time.perf_counter() - t0) * 1e3)


def _fmt(ms: list[float]) -> str:
    return f"{statistics.median(ms):.3f} (p10 {sorted(ms)[len(ms) // 10]:.3f})" if ms else "-"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python tools/rowcost.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="a registered name or a .gguf path")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args(argv)
    from spec_cli.llama.model import LoadConfig, Model
    from spec_cli.models.download import resolve

    try:
        path = args.model if args.model.endswith(".gguf") else resolve(args.model)
        with Model(path, LoadConfig(n_ctx=512)) as model:
            times, host = measure(model, args.runs)
            print(f"{model.path.name}: {model.n_vocab} logits a row, {model.n_threads} threads, "
                  f"kernel {'built' if COMPILED.available else 'absent'}; ms, median (10th percentile)")
    except SpecError as e:
        sys.exit(f"error: {e}")
    for name, t in times.items():
        print(f"  {name:30s} kernel {_fmt(t['kernel']):22s} numpy {_fmt(t['numpy']):22s} "
              f"one call {_fmt(t['one call'])}")
    print(f"  {'the decode, host share':30s} {_fmt(host)}")
    print("  a 17-row verify batch read to the end, the kernel's walk:")
    for name, t in times.items():
        print(f"  {name:30s} " + "  ".join(f"{side} {_fmt(ms)}" for side, ms in t.items() if side.startswith("rows")))


if __name__ == "__main__":
    main()
