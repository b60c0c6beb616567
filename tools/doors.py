"""What a front door costs, measured side by side on one server:

    python tools/doors.py [--n 10] [--tokens 64] [--drafting] [--serve-arg=...] [PROMPTS.jsonl]

starts `spec-cli serve` (the default pair) on a free loopback port and asks
each prompt (`../shared/bench/mt-bench.jsonl` by default) through four
doors, streamed and greedy: OpenAI's chat completions, Anthropic's
Messages, OpenAI's Responses and Ollama's /api/chat, the doors' order
turning with each prompt.  Before the four, the prompt is asked once (one
token, or with --drafting the whole answer) so that every door finds the
same KV cache; each door's request then sets `speculation.proposer:
"none"` (the target alone: what differs is the door), or with --drafting
the server's own drafting, which then drafts from the earlier output
(more tokens a second: more events a second through the door).

Prints, for each door, the median per-prompt ratio of its tokens a second
(request sent to last byte) over the chat completions', the pooled ratio,
and how many answers were the chat completions' text.  Nothing here is
asserted; name the machine when you quote it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_serve import start_serve  # noqa: E402

DOORS = ("chat", "messages", "responses", "ollama")
DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "mt-bench.jsonl"


def _request(door: str, prompt: str, tokens: int, extra: dict) -> tuple[str, dict]:
    msgs = [{"role": "user", "content": prompt}]
    if door == "chat":
        return "/v1/chat/completions", {"messages": msgs, "max_tokens": tokens, "temperature": 0, "stream": True,
                                        "stream_options": {"include_usage": True}, **extra}
    if door == "messages":
        return "/v1/messages", {"messages": msgs, "max_tokens": tokens, "temperature": 0, "stream": True, **extra}
    if door == "responses":
        return "/v1/responses", {"input": prompt, "max_output_tokens": tokens, "temperature": 0, "stream": True,
                                 **extra}
    return "/api/chat", {"model": "m", "messages": msgs, "options": {"temperature": 0, "num_predict": tokens},
                         **extra}


def _read(door: str, resp) -> tuple[str, int]:
    """The streamed text and the token count its last event reports."""
    text, n = [], 0
    for raw in resp:
        line = raw.decode().strip()
        if door == "ollama":
            if not line:
                continue
            obj = json.loads(line)
            text.append(obj["message"]["content"])
            n = obj.get("eval_count", n)
            continue
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        obj = json.loads(line[6:])
        if door == "chat":
            if obj.get("choices"):
                text.append(obj["choices"][0]["delta"].get("content") or "")
            if obj.get("usage"):
                n = obj["usage"]["completion_tokens"]
        elif door == "messages":
            if obj["type"] == "content_block_delta" and obj["delta"]["type"] == "text_delta":
                text.append(obj["delta"]["text"])
            elif obj["type"] == "message_delta":
                n = obj["usage"]["output_tokens"]
        else:
            if obj["type"] == "response.output_text.delta":
                text.append(obj["delta"])
            elif obj["type"] in ("response.completed", "response.incomplete"):
                n = obj["response"]["usage"]["output_tokens"]
    return "".join(text), n


def ask(base: str, door: str, prompt: str, tokens: int, extra: dict) -> tuple[str, int, float]:
    """(text, tokens, seconds from sending to the last byte)."""
    path, body = _request(door, prompt, tokens, extra)
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{door}: HTTP {resp.status}: {resp.read()[:300]!r}")
    text, n = _read(door, resp)
    seconds = time.perf_counter() - t0
    conn.close()
    return text, n, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prompts", nargs="?", default=str(DEFAULT_PROMPTS))
    ap.add_argument("--n", type=int, default=10, help="prompts")
    ap.add_argument("--skip", type=int, default=0, help="prompts of the file left out first")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--drafting", action="store_true", help="the server's own drafting instead of none")
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to spec-cli serve")
    args = ap.parse_args(argv)
    try:
        lines = Path(args.prompts).read_text(encoding="utf-8").splitlines()
        prompts = [json.loads(x)["prompt"] for x in lines if x.strip()][args.skip:args.skip + args.n]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"doors: cannot read prompts from {args.prompts}: {e}")
    server, base = start_serve(args.serve_arg)
    extra = {} if args.drafting else {"speculation": {"proposer": "none"}}
    rate = {d: [] for d in DOORS}
    pooled = {d: [0, 0.0] for d in DOORS}
    same = {d: 0 for d in DOORS}
    try:
        for i, prompt in enumerate(prompts):
            ask(base, "chat", prompt, args.tokens if args.drafting else 1, {})  # the same cache for all four
            order = DOORS[i % 4:] + DOORS[:i % 4]
            got = {d: ask(base, d, prompt, args.tokens, extra) for d in order}
            for d in DOORS:
                text, n, s = got[d]
                rate[d].append(n / s)
                pooled[d][0] += n
                pooled[d][1] += s
                same[d] += text == got["chat"][0]
            print(f"prompt {i + 1}/{len(prompts)}: " + ", ".join(f"{d} {got[d][1] / got[d][2]:.2f}" for d in DOORS)
                  + " tok/s", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=60)
    base_pooled = pooled["chat"][0] / pooled["chat"][1]
    print(f"{len(prompts)} prompts, {args.tokens} tokens, greedy, streamed, "
          f"{'the server drafting' if args.drafting else 'proposer none'}")
    print(f"{'door':<10} {'tok/s pooled':>12} {'median ratio':>13} {'pooled ratio':>13} {'same text':>10}")
    for d in DOORS:
        ratios = [r / c for r, c in zip(rate[d], rate["chat"])]
        p = pooled[d][0] / pooled[d][1]
        print(f"{d:<10} {p:>12.2f} {statistics.median(ratios):>12.3f}x {p / base_pooled:>12.3f}x "
              f"{same[d]:>5}/{len(prompts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
