"""What OpenAI's Predicted Outputs buy on code edits, interleaved so that a
drifting machine cancels out:

    python tools/prediction.py [-p ../shared/bench/code-edit.jsonl] [--skip 0] [--n 10] [--max-tokens 200]

starts two `spec-cli serve` (defaults, free loopback ports) at once and sends
each code edit to both: to one as it is, to the other with the file to
edit (the prompt's code block) as `prediction`.  Only one server works at
a time; which goes first turns with every edit; each server sees each
edit once (a server keeps earlier answers as a lookup source, so an edit
sent twice to one server would draft from its own first answer).
Reported: each edit's tokens, seconds and generating tokens a second on
both, whether the two texts are the same, and the with/without ratio end
to end; then both servers' pooled figures, the median ratio and the
prediction tokens accepted and rejected (`usage.completion_tokens_details`).

Wall clock on this machine; nothing here is asserted.  Keep anything else
heavy off the machine while it runs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_serve import post, start_serve  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("without", "with")


def ask(base: str, prompt: str, max_tokens: int, predict: bool) -> dict:
    """One edit to one server: tokens, seconds, generating seconds, text, prediction tokens."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    if predict:
        code = re.search(r"```\w*\n(.*?)```", prompt, re.S)
        if code is None:
            sys.exit("an edit's prompt holds no ``` code block to predict")
        body["prediction"] = {"type": "content", "content": "```python\n" + code.group(1) + "```"}
    out, seconds = post(base + "/v1/chat/completions", body)
    u, details = out["usage"], out["usage"].get("completion_tokens_details") or {}
    return {"tokens": u["completion_tokens"], "s": seconds,
            "gen_s": out.get("timings", {}).get("predicted_ms", 0) / 1000,
            "text": out["choices"][0]["message"]["content"],
            "accepted": details.get("accepted_prediction_tokens", 0),
            "rejected": details.get("rejected_prediction_tokens", 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-p", "--prompts", default=str(ROOT.parent / "shared/bench/code-edit.jsonl"))
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an extra argument for both servers (e.g. --serve-arg=--threads=2: two servers started "
                         "together each count the other's load and may keep fewer threads)")
    a = ap.parse_args()
    if not Path(a.prompts).exists():
        sys.exit(f"{a.prompts} not found: pass -p with a JSON-lines file of code edits ({{'id', 'prompt'}})")
    rows = [json.loads(line) for line in open(a.prompts)][a.skip:a.skip + a.n]
    servers = {}
    try:
        for v in VARIANTS:
            servers[v] = start_serve(a.serve_arg)
        totals = {v: {"tokens": 0, "s": 0.0, "gen_s": 0.0} for v in VARIANTS}
        ratios, accepted, rejected = [], 0, 0
        for i, row in enumerate(rows):
            res = {v: ask(servers[v][1], row["prompt"], a.max_tokens, v == "with")
                   for v in (("without", "with") if i % 2 == 0 else ("with", "without"))}
            for v, r in res.items():
                for k in totals[v]:
                    totals[v][k] += r[k]
            accepted, rejected = accepted + res["with"]["accepted"], rejected + res["with"]["rejected"]
            ratios.append((res["with"]["tokens"] / res["with"]["s"]) / (res["without"]["tokens"] / res["without"]["s"]))
            print(row.get("id", i), {v: (r["tokens"], round(r["s"], 2), round(r["tokens"] / max(r["gen_s"], 1e-9), 1))
                                     for v, r in res.items()},
                  f"ratio {ratios[-1]:.3f}", "same text" if res["with"]["text"] == res["without"]["text"]
                  else "texts differ", flush=True)
        for v, t in totals.items():
            print(f"== {v} prediction: {t['tokens']} tokens, {t['s']:.1f} s, {t['tokens'] / t['s']:.2f} tok/s end to "
                  f"end, {t['tokens'] / max(t['gen_s'], 1e-9):.2f} generating")
        print(f"== with/without: median an edit {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
              f"accepted_prediction_tokens {accepted}, rejected {rejected}")
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(60)


if __name__ == "__main__":
    main()
