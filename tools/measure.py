"""What a user waits for, whole processes timed side by side in one run:

    python tools/measure.py [--runs 5] [-n 64] [--cold] [--busy] [-- GENERATE OPTIONS]

runs `spec-cli generate -n N PROMPT` as a process, alternately with
`--proposer none` (the target alone) and the default proposer, `--runs`
times each, and reports for each: the whole process's wall time (start to
exit: imports, model loads, any start-up timing, the prompt, the
generation) and the time to the first byte of text on stdout.  `--cold`
gives every run an empty state directory (nothing remembered: the first
run on a new machine); else they share one, warmed by one untimed run of
each.  `--busy` keeps one core busy with a spinning process throughout, so
both sides see the same load.  Wall clock on this machine; nothing here is
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "Write a Python function that checks whether a number is prime."


def run_once(proposer: str | None, n: int, extra: list[str], state: str) -> tuple[float, float]:
    """(whole-process seconds, seconds to the first byte of text)."""
    cmd = [sys.executable, "-m", "spec_cli", "generate", "--quiet", "-n", str(n), *extra]
    if proposer:
        cmd += ["--proposer", proposer]
    env = dict(os.environ, XDG_STATE_HOME=state)
    t0 = time.perf_counter()
    proc = subprocess.Popen([*cmd, PROMPT], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    first = proc.stdout.read(1)
    t_first = time.perf_counter() - t0
    proc.stdout.read()
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return time.perf_counter() - t0, t_first if first else float("nan")


def _spinner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--cold", action="store_true", help="an empty state directory for every run")
    ap.add_argument("--busy", action="store_true", help="one core kept busy throughout")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("extra", nargs="*", help="more `spec-cli generate` options (after --)")
    args = ap.parse_args(argv)
    sides = {"none": "none", "default": None}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    spinner = _spinner() if args.busy else None
    try:
        with tempfile.TemporaryDirectory(prefix="spec-cli-measure-") as shared:
            if not args.cold:
                for proposer in sides.values():
                    run_once(proposer, args.n, args.extra, shared)
            for _ in range(args.runs):
                for name, proposer in sides.items():
                    state = tempfile.mkdtemp(prefix="spec-cli-cold-", dir=shared) if args.cold else shared
                    times[name].append(run_once(proposer, args.n, args.extra, state))
    finally:
        if spinner is not None:
            spinner.kill()
    out = {name: {"wall_s": [round(w, 2) for w, _ in t], "first_text_s": [round(f, 2) for _, f in t],
                  "median_wall_s": round(statistics.median(w for w, _ in t), 2),
                  "median_first_text_s": round(statistics.median(f for _, f in t), 2)}
           for name, t in times.items()}
    out["default_over_none"] = round(out["default"]["median_wall_s"] / out["none"]["median_wall_s"], 3)
    out["settings"] = {"runs": args.runs, "n": args.n, "cold": args.cold, "busy": args.busy, "extra": args.extra}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for name in sides:
        o = out[name]
        print(f"{name:8s} whole process {o['median_wall_s']:6.2f} s (runs: {', '.join(map(str, o['wall_s']))})"
              f"   first text {o['median_first_text_s']:5.2f} s")
    print(f"default / none: {out['default_over_none']:.3f}  ({'cold' if args.cold else 'warm'} state"
          f"{', one core busy' if args.busy else ''}, {args.runs} runs each, alternating, -n {args.n})")


if __name__ == "__main__":
    main()
