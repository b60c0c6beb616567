"""Many chat clients at once against any OpenAI-compatible server
(`spec-cli serve`, llama-server), as a chat UI's or an agent's clients:

    python tools/load.py --url http://127.0.0.1:8012 --clients 1,2,4,8 \\
        -p ../shared/bench/mt-bench.jsonl -p ../shared/bench/code-edit.jsonl --n 8 --max-tokens 96

At C clients, each sends a prompt, waits for its whole answer
(/v1/chat/completions, greedy, not streamed unless --stream) and sends the next, until
every prompt was answered once (a closed loop).  Reported per C: aggregate
completion tokens a second over the run, each request's latency (request
to last byte) as median and worst, and the completion tokens (a server that
stops at an end-of-generation token writes fewer).  Each prompt is sent
once before the runs, so every server finds the same warm state.

With --infill FILE an editor completes beside the chats (/infill, one
request after another, a second apart, as llama.vim asks while one
types; each a function of FILE not completed before): first alone, then
during each run, its latency reported as median and worst.

Wall clock on this machine; nothing here is asserted.  Run one server at a
time, with nothing else heavy on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import sys
import time
import urllib.request


def load_prompts(paths: list[str], n: int) -> list[str]:
    """The first n chat prompts of each file (completion prompts are asked as chats too)."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            items = [json.loads(line) for line in f if line.strip()]
        out += [item["prompt"] for item in items[:n]]
    return out


def ask(url: str, prompt: str, max_tokens: int, stream: bool = False) -> tuple[int, float]:
    """One chat request, answered whole or streamed (as a chat UI asks: a
    chunk a token or so, the token count from the last chunk's usage)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
            "seed": 1, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=1800) as r:
        if not stream:
            return json.loads(r.read())["usage"]["completion_tokens"], time.perf_counter() - t0
        usage = None
        for line in r:
            if line.startswith(b"data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    if usage is None:
        raise ValueError(f"{url}: a streamed answer without usage (stream_options.include_usage)")
    return usage["completion_tokens"], time.perf_counter() - t0


def infill(url: str, code: str, n_predict: int) -> float:
    """One editor completion (/infill, as llama.vim asks): the function's
    signature and docstring before the cursor, the file's next function
    after it; its latency (request to last byte)."""
    body = {"input_prefix": code, "input_suffix": "\n\n\ndef main():\n    pass\n", "n_predict": n_predict,
            "temperature": 0, "cache_prompt": True, "stream": False}
    req = urllib.request.Request(url + "/infill", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=1800) as r:
        json.loads(r.read())
    return time.perf_counter() - t0


def infills(url: str, codes: list[str], n_predict: int, stop: threading.Event | None = None) -> list[float]:
    """The editor's completions one after another (a second apart), until
    `stop` is set (all of them where there is none)."""
    out = []
    for code in codes:
        if stop is not None and stop.is_set():
            break
        out.append(infill(url, code, n_predict))
        if stop is not None:
            stop.wait(1.0)
    return out


def run(url: str, prompts: list[str], clients: int, max_tokens: int, editor: tuple | None = None,
        stream: bool = False) -> dict:
    todo = list(enumerate(prompts))
    lock = threading.Lock()
    done: list[tuple[int, int, float]] = []
    stop, edits = threading.Event(), []
    side = None
    if editor is not None:  # an editor completing beside the chats, while they run
        codes, n_predict = editor
        side = threading.Thread(target=lambda: edits.extend(infills(url, codes, n_predict, stop)))

    failed: list[Exception] = []

    def client():
        while True:
            with lock:
                if not todo or failed:
                    return
                i, prompt = todo.pop(0)
            try:
                tokens, seconds = ask(url, prompt, max_tokens, stream)
            except (OSError, ValueError, KeyError) as e:  # the caller says it in one line, not each thread
                with lock:
                    failed.append(e)
                return
            with lock:
                done.append((i, tokens, seconds))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    if side is not None:
        side.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if side is not None:
        stop.set()
        side.join()
    if failed:
        raise failed[0]
    latencies = [s for _, _, s in done]
    tokens = sum(t for _, t, _ in done)
    row = {"clients": clients, "requests": len(done), "tokens": tokens, "seconds": round(wall, 2),
           "tok_s": round(tokens / wall, 2), "latency_median_s": round(statistics.median(latencies), 2),
           "latency_max_s": round(max(latencies), 2)}
    if edits:
        row.update({"infills": len(edits), "infill_median_s": round(statistics.median(edits), 2),
                    "infill_max_s": round(max(edits), 2)})
    return row


def main() -> None:
    try:
        _main()
    except (OSError, ValueError, KeyError) as e:  # a prompt file not there or not JSON lines, a server not answering
        sys.exit(f"load: {e}")


def _main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("-p", "--prompts", action="append", required=True)
    ap.add_argument("--n", type=int, default=8, help="prompts from each file")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--label", default="")
    ap.add_argument("--no-warm", action="store_true", help="skip sending each prompt once before")
    ap.add_argument("--stream", action="store_true", help="answers streamed, a chunk a token, as chat UIs ask")
    ap.add_argument("--infill", metavar="FILE", help="an editor beside the chats: /infill requests one after "
                    "another (their prompts: FILE's completion prompts, e.g. humaneval-completion.jsonl), "
                    "first alone, then during each run; their latency reported")
    ap.add_argument("--infill-tokens", type=int, default=32)
    args = ap.parse_args()
    prompts = load_prompts(args.prompts, args.n)
    if not args.no_warm:
        for p in prompts:
            ask(args.url, p, 1)
    editor = None
    if args.infill:
        # each completion a file not completed before (a repeated one would be drafted
        # whole from the earlier answer): the first 8 alone, the next ones beside the chats
        codes = load_prompts([args.infill], 8 + 40)
        alone = infills(args.url, codes[:8], args.infill_tokens)
        print(json.dumps({"label": args.label, "clients": 0, "infills": len(alone),
                          "infill_median_s": round(statistics.median(alone), 2),
                          "infill_max_s": round(max(alone), 2)}), flush=True)
        editor = (codes[8:], args.infill_tokens)
    for c in (int(x) for x in args.clients.split(",")):
        row = {"label": args.label, **run(args.url, prompts, c, args.max_tokens, editor, args.stream)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
