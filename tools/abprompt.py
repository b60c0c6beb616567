"""Several servers side by side, one client, prompt by prompt:

    python tools/abprompt.py --server spec=http://127.0.0.1:18101 --server ls=http://127.0.0.1:18103 \\
        -p ../shared/bench/code-edit.jsonl -p ../shared/bench/humaneval-completion.jsonl \\
        --n 10 --offset 10 --max-tokens 128

Each prompt (a chat's, or a completion's sent to /v1/completions) goes to
every server in turn before the next, the order reversed every other
prompt, so that a machine that drifts over minutes hits all alike; greedy,
not streamed, unless the server's URL ends in `#stream` (the same server
may be named twice, once so: streamed against not; tokens then from the
final chunk's usage).  Printed per prompt: each server's completion tokens, its
tokens a second over the request's wall time (prompt included, as a
client sees it) and its own `timings.predicted_per_second` where it gives
one.  Then per server: pooled tokens a second, and the median and
quartiles of its per-prompt ratio over the first server's.

Wall clock on this machine; nothing here is asserted.  Start the servers
fresh for a run (one that kept earlier answers drafts a repeated prompt
whole), and keep anything else heavy off the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request


def prompts(paths: list[str], n: int, offset: int) -> list[tuple[str, str]]:
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            items = [json.loads(line) for line in f if line.strip()]
        out += [(it.get("kind", "chat"), it["prompt"]) for it in items[offset:offset + n]]
    return out


def ask(url: str, kind: str, prompt: str, max_tokens: int) -> tuple[int, float, dict | None]:
    url, _, how = url.partition("#")
    stream = how == "stream"
    body: dict = {"max_tokens": max_tokens, "temperature": 0}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        if not stream:
            data = json.loads(r.read())
            return data["usage"]["completion_tokens"], time.perf_counter() - t0, data.get("timings")
        usage, timings = None, None
        for line in r:  # read as a client reads: each event as it comes
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                usage = event.get("usage") or usage
                timings = event.get("timings") or timings
    return usage["completion_tokens"], time.perf_counter() - t0, timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", required=True, metavar="LABEL=URL")
    ap.add_argument("-p", "--prompts", action="append", required=True)
    ap.add_argument("--n", type=int, default=10, help="prompts of each file")
    ap.add_argument("--offset", type=int, default=0, help="the first prompt of each file")
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    servers = dict(s.split("=", 1) for s in args.server)
    names = list(servers)
    for url in servers.values():
        ask(url.partition("#")[0], "chat", "Say hi.", 4)  # loaded and warm
    rows = []
    for i, (kind, prompt) in enumerate(prompts(args.prompts, args.n, args.offset)):
        row = {}
        for name in (names if i % 2 == 0 else names[::-1]):
            row[name] = ask(servers[name], kind, prompt, args.max_tokens)
        rows.append(row)
        print(json.dumps({"prompt": i, "kind": kind, **{
            name: {"tokens": t, "tok_s": round(t / s, 2),
                   "predicted_per_second": tim and round(tim.get("predicted_per_second", 0.0), 2)}
            for name, (t, s, tim) in row.items()}}), flush=True)
    ref = names[0]
    for name in names:
        ratios = [(r[name][0] / r[name][1]) / (r[ref][0] / r[ref][1]) for r in rows]
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        pooled = sum(r[name][0] for r in rows) / sum(r[name][1] for r in rows)
        print(json.dumps({"summary": name, "tok_s": round(pooled, 2),
                          f"vs_{ref}_median": round(statistics.median(ratios), 3),
                          f"vs_{ref}_q25": round(q[0], 3), f"vs_{ref}_q75": round(q[2], 3)}))


if __name__ == "__main__":
    main()
