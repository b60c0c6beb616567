"""Fill-in-the-middle as editors ask for it, scored by tests:

    python tools/fim.py [--url URL | --serve-arg=...] [--paths infill,v1-suffix,...] [--n N] [--json]

asks each task of `../shared/bench/humaneval-fim.jsonl` (a line, or 2-5
lines, cut from HumanEval's canonical solutions, with the tests) through
each request shape an editor plugin sends, greedy, and scores the middle:

- infill:          POST /infill {input_prefix, input_suffix} (llama.vim, llama.vscode)
- completion-raw:  POST /completion, the model's FIM template as the prompt (Tabby's llama.cpp/completion)
- v1-suffix:       POST /v1/completions {prompt, suffix} (Tabby's openai/completion, minuet-ai, the openai package)
- v1-raw:          POST /v1/completions, the FIM template as the prompt (twinny, Continue with a raw template)
- ollama-suffix:   POST /api/generate {prompt, suffix} (Continue's and twinny's Ollama providers)

For each path: the share of tasks whose prefix + middle + suffix passes the
tests, of exact middles (the cut lines, trailing blanks aside), of clean
insertions (passing, and the middle does not end by repeating the
suffix's next line), and the median time from request to answer.  With
`--url` it asks a server already running (llama-server, say: its own
paths only); else it starts `spec-cli serve` (the default pair).  Nothing
here is asserted; name the machine when you quote it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_serve import start_serve  # noqa: E402

TASKS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "humaneval-fim.jsonl"
PATHS = ("infill", "completion-raw", "v1-suffix", "v1-raw", "ollama-suffix")
TEMPLATE = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"  # Qwen2.5-Coder's


def request(path: str, task: dict, n: int, extra: dict | None = None) -> tuple[str, dict]:
    route, body = _request(path, task, n)
    return route, {**body, **(extra or {})}


def _request(path: str, task: dict, n: int) -> tuple[str, dict]:
    p, s = task["prefix"], task["suffix"]
    raw = TEMPLATE.format(prefix=p, suffix=s)
    if path == "infill":
        return "/infill", {"input_prefix": p, "input_suffix": s, "n_predict": n, "temperature": 0, "top_k": 1}
    if path == "completion-raw":
        return "/completion", {"prompt": raw, "n_predict": n, "temperature": 0, "top_k": 1}
    if path == "v1-suffix":
        return "/v1/completions", {"model": "m", "prompt": p, "suffix": s, "max_tokens": n, "temperature": 0}
    if path == "v1-raw":
        return "/v1/completions", {"model": "m", "prompt": raw, "max_tokens": n, "temperature": 0}
    return "/api/generate", {"model": "m", "prompt": p, "suffix": s, "stream": False,
                             "options": {"temperature": 0, "num_predict": n}}


def middle_of(path: str, reply: dict) -> str:
    if path in ("infill", "completion-raw"):
        return reply["content"]
    if path.startswith("v1-"):
        return reply["choices"][0]["text"]
    return reply["response"]


def ask(base: str, path: str, task: dict, n: int, extra: dict | None = None) -> tuple[str | None, float]:
    route, body = request(path, task, n, extra)
    req = urllib.request.Request(base + route, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            reply = json.loads(r.read())
    except urllib.error.HTTPError as e:
        print(f"{path}: HTTP {e.code}: {e.read()[:200]!r}", file=sys.stderr)
        return None, time.perf_counter() - t0
    return middle_of(path, reply), time.perf_counter() - t0


def passes(task: dict, middle: str) -> bool:
    code = task["prefix"] + middle + task["suffix"] + "\n" + task["test"] + f"\ncheck({task['entry_point']})\n"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    try:
        return subprocess.run([sys.executable, f.name], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        Path(f.name).unlink()


def repeats_suffix(task: dict, middle: str) -> bool:
    nxt = [line.strip() for line in task["suffix"].split("\n") if line.strip()]
    last = [line.strip() for line in middle.split("\n") if line.strip()]
    return bool(nxt and last and last[-1] == nxt[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server (else spec-cli serve is started)")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--n", type=int, default=0, help="tasks (0: all)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--tasks", default=str(TASKS))
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-editor-stops", action="store_true",
                    help="send spec-cli's editor_stops: false (the middle untrimmed: what the insertion rules buy)")
    args = ap.parse_args(argv)
    try:
        tasks = [json.loads(x) for x in Path(args.tasks).read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        raise SystemExit(f"fim: cannot read {args.tasks}: {e}")
    tasks = tasks[:args.n] if args.n else tasks
    paths = [p for p in args.paths.split(",") if p]
    if set(paths) - set(PATHS):
        raise SystemExit(f"fim: paths are {', '.join(PATHS)}")
    server, base = (None, args.url.rstrip("/")) if args.url else start_serve(args.serve_arg)
    rows = {p: {"pass": 0, "exact": 0, "clean": 0, "times": [], "failed": 0} for p in paths}
    try:
        for i, task in enumerate(tasks):
            order = paths[i % len(paths):] + paths[:i % len(paths)]
            for path in order:
                middle, seconds = ask(base, path, task, args.tokens,
                                      {"editor_stops": False} if args.no_editor_stops else None)
                row = rows[path]
                row["times"].append(seconds)
                if middle is None:
                    row["failed"] += 1
                    continue
                ok = passes(task, middle)
                row["pass"] += ok
                row["exact"] += middle.rstrip() == task["middle"].rstrip()
                row["clean"] += ok and not repeats_suffix(task, middle)
            print(f"task {i + 1}/{len(tasks)}", file=sys.stderr, end="\r")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    n = len(tasks)
    out = {p: {"pass": r["pass"] / n, "exact": r["exact"] / n, "clean": r["clean"] / n,
               "median_ms": statistics.median(r["times"]) * 1000, "failed": r["failed"]} for p, r in rows.items()}
    if args.json:
        print(json.dumps({"tasks": n, "paths": out}, indent=2))
        return 0
    print(f"{n} tasks of {Path(args.tasks).name}, greedy, at most {args.tokens} tokens, {base}")
    print(f"{'path':<16} {'pass':>6} {'exact':>6} {'clean':>6} {'median ms':>10} {'refused':>8}")
    for p, r in out.items():
        print(f"{p:<16} {r['pass']:>6.1%} {r['exact']:>6.1%} {r['clean']:>6.1%} {r['median_ms']:>10.0f} "
              f"{r['failed']:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
