"""What the warm server buys an editor, measured side by side in one run:

    python tools/measure_serve.py [--target NAME] [--draft NAME] [--json]

starts `spec-cli serve` on a free loopback port and measures, on ten
one-line fill-in-the-middle requests of its own (a few lines of Python
around the cursor):

- warm /infill latency, request to last byte (median of 10 distinct requests);
- the same requests again: drafted from the store of earlier outputs;
- `spec-cli complete --server` per call (a process that asks the server);
- `spec-cli complete` per call, loading the models itself (median of 3);
- a chat's second turn: prompt tokens evaluated against the prompt's length;
- with --during-chat: /infill latency while a 500-token chat answer
  streams (sent after its 20th chunk), against the same request alone
  (median of 10; each request is sent once before, and the order of the
  two alternates, so both find the same cache), and eight chat clients at
  once against each alone.

Timings are wall clock on this machine; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CASES = [
    ("def add(a, b):\n    return ", "\n\n\nprint(add(1, 2))\n"),
    ("def is_even(n):\n    return ", "\n\n\nprint(is_even(4))\n"),
    ("import os\n\n\ndef home():\n    return os.", "\n"),
    ("def square(x):\n    return ", "\n\n\ndef cube(x):\n    return x ** 3\n"),
    ("names = ['ada', 'bob']\nfor name in names:\n    print(", "\n"),
    ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = ", "\n"),
    ("def mean(xs):\n    return sum(xs) / ", "\n"),
    ("with open('data.txt') as f:\n    lines = ", "\nprint(len(lines))\n"),
    ("def greet(name):\n    return f\"Hello, ", "\n"),
    ("import json\n\n\ndef load(path):\n    with open(path) as f:\n        return ", "\n"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> tuple[dict, float]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()  # to the last byte
    return json.loads(data), time.perf_counter() - t0


def _infill(prefix: str, suffix: str) -> dict:
    return {"input_prefix": prefix, "input_suffix": suffix, "n_predict": 32, "stop": ["\n"],
            "n_indent": 0, "cache_prompt": True}


def _complete_cli(args: list[str], prefix: str, suffix: str, env: dict) -> tuple[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(suffix)
    try:
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "spec_cli", "complete", "--quiet", "--max-lines", "1",
                              "--suffix-file", f.name, *args], input=prefix, capture_output=True, text=True,
                             env=env, timeout=600)
        seconds = time.perf_counter() - t0
    finally:
        os.unlink(f.name)
    if res.returncode != 0:
        raise SystemExit(f"spec-cli complete failed: {res.stderr}")
    return res.stdout, seconds


def start_serve(args: list[str], env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`spec-cli serve ARGS` on a free loopback port, once its /health
    answers: (the process, its base URL).  Exits with its stderr if it
    ends or is not up within 15 minutes."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "spec_cli", "serve", *args, "--port", str(port), "--quiet"],
                              env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 900
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=5).read()
            return server, base
        except OSError:
            if server.poll() is not None or time.time() > deadline:
                server.kill()
                raise SystemExit(f"the server did not start: {server.stderr.read()}")
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--during-chat", action="store_true",
                    help="measure editors beside a streaming chat, and eight clients at once, only")
    ap.add_argument("--serve-arg", action="append", default=[], help="an extra argument for spec-cli serve")
    args = ap.parse_args(argv)
    models = ["--target", args.target] + (["--draft", args.draft] if args.draft else [])
    env = dict(os.environ)
    env.pop("SPEC_CLI_SERVER", None)
    server, base = start_serve([*models, *args.serve_arg], env)
    try:
        post(base + "/infill", _infill("def warm_up():\n    return ", "\n"))  # first-request costs
        if args.during_chat:
            out = _during_chat(base)
            out["target"], out["serve_args"] = args.target, args.serve_arg
            print(json.dumps(out, indent=2) if args.json else _during_chat_text(out))
            return 0
        warm, again, texts = [], [], []
        for prefix, suffix in CASES:
            reply, seconds = post(base + "/infill", _infill(prefix, suffix))
            warm.append(seconds)
            texts.append(reply["content"])
        for prefix, suffix in CASES:
            reply, seconds = post(base + "/infill", _infill(prefix, suffix))
            again.append((seconds, reply["speculation"]))
        via_server = [_complete_cli(["--server", base], p, s, env)[1] for p, s in CASES[:5]]
        alone = [_complete_cli(models, p, s, env)[1] for p, s in CASES[:3]]

        chat = base + "/v1/chat/completions"
        messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
        first, _ = post(chat, {"messages": messages, "max_tokens": 64, "temperature": 0})
        messages += [first["choices"][0]["message"], {"role": "user", "content": "Now make it handle None."}]
        second, _ = post(chat, {"messages": messages, "max_tokens": 64, "temperature": 0})
    finally:
        server.terminate()
        server.wait(60)

    med = statistics.median
    out = {
        "target": args.target,
        "fim_warm_median_s": round(med(warm), 4), "fim_warm_max_s": round(max(warm), 4),
        "fim_again_median_s": round(med(s for s, _ in again), 4),
        "fim_again_acceptance": round(sum(x["accepted"] for _, x in again)
                                      / max(1, sum(x["drafted"] for _, x in again)), 4),
        "complete_via_server_median_s": round(med(via_server), 4),
        "complete_alone_median_s": round(med(alone), 4),
        "speedup_warm_vs_complete": round(med(alone) / med(warm), 2),
        "chat_turn2_prompt_tokens": second["usage"]["prompt_tokens"],
        "chat_turn2_evaluated": second["timings"]["prompt_n"],
        "chat_turn1_prompt_tokens": first["usage"]["prompt_tokens"],
        "completions": texts,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"warm one-line FIM, request to last byte: median {out['fim_warm_median_s'] * 1000:.0f} ms "
              f"(max {out['fim_warm_max_s'] * 1000:.0f} ms, 10 requests)")
        print(f"the same requests again (drafted from the store): median {out['fim_again_median_s'] * 1000:.0f} ms, "
              f"acceptance {out['fim_again_acceptance']:.0%}")
        print(f"spec-cli complete --server per call: median {out['complete_via_server_median_s'] * 1000:.0f} ms")
        print(f"spec-cli complete per call (loads the models): median {out['complete_alone_median_s']:.2f} s "
              f"-> warm server {out['speedup_warm_vs_complete']:.1f}x faster")
        print(f"chat turn 2: {out['chat_turn2_evaluated']} of {out['chat_turn2_prompt_tokens']} prompt tokens "
              f"evaluated (turn 1's prompt: {out['chat_turn1_prompt_tokens']})")
    return 0


CHAT_PROMPTS = ["Explain how a hash map works, in detail.", "Write a long story about a lighthouse keeper.",
                "Describe the water cycle step by step.", "Explain TCP's three-way handshake and why it exists.",
                "Write a detailed guide to brewing coffee.", "Explain recursion with several examples.",
                "Describe the history of the printing press.", "Explain how compilers optimise loops."]


def _stream_chat(url: str, prompt: str, max_tokens: int, started) -> None:
    """A streamed chat answer, read to its end (or until `started` says
    stop); sets started["event"] once `started["after"]` chunks came."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
        "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    n = 0
    while not started["stop"].is_set():
        line = resp.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: "):
            n += 1
            if n == started["after"]:
                started["event"].set()
    started["chunks"] = n
    conn.close()


def _during_chat(base: str) -> dict:
    """/infill alone and while a chat streams, alternated; eight chats at once."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    alone, during = [], []
    for i, (prefix, suffix) in enumerate(CASES):
        body = _infill(prefix, suffix)
        post(base + "/infill", body)  # once first, so both measured requests find what a repeat finds
        for beside in ((False, True) if i % 2 else (True, False)):
            if not beside:
                alone.append(post(base + "/infill", body)[1])
                continue
            started = {"event": threading.Event(), "stop": threading.Event(), "after": 20}
            chat = threading.Thread(target=_stream_chat, args=(base, CHAT_PROMPTS[i % len(CHAT_PROMPTS)], 500,
                                                              started))
            chat.start()
            started["event"].wait(600)
            during.append(post(base + "/infill", body)[1])
            started["stop"].set()  # the chat's client leaves: the next measurement starts from an idle server
            chat.join()
            time.sleep(0.2)

    def ask(prompt):
        reply, seconds = post(base + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": prompt}], "max_tokens": 32, "temperature": 0})
        return reply["choices"][0]["message"]["content"], seconds

    one_by_one = [ask(p) for p in CHAT_PROMPTS]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(CHAT_PROMPTS)) as pool:
        together = list(pool.map(ask, CHAT_PROMPTS))
    wall = time.perf_counter() - t0
    med = statistics.median
    return {"infill_alone_median_s": round(med(alone), 4), "infill_during_chat_median_s": round(med(during), 4),
            "ratio": round(med(during) / med(alone), 3), "infill_alone_s": [round(x, 4) for x in alone],
            "infill_during_chat_s": [round(x, 4) for x in during],
            "eight_clients_same_text": sum(a[0] == t[0] for a, t in zip(one_by_one, together)),
            "eight_clients_wall_s": round(wall, 3),
            "eight_clients_one_by_one_s": round(sum(a[1] for a in one_by_one), 3)}


def _during_chat_text(out: dict) -> str:
    return (f"/infill alone: median {out['infill_alone_median_s'] * 1000:.0f} ms; while a chat streams: median "
            f"{out['infill_during_chat_median_s'] * 1000:.0f} ms ({out['ratio']:.2f}x, 10 requests each)\n"
            f"eight chat clients at once: {out['eight_clients_wall_s']:.1f} s "
            f"(one by one: {out['eight_clients_one_by_one_s']:.1f} s), "
            f"{out['eight_clients_same_text']} of 8 with the same text as alone")


if __name__ == "__main__":
    sys.exit(main())
