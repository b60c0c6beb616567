"""What the warm server buys an editor, measured side by side in one run:

    python -m spec_cli.serve.measure [--target NAME] [--draft NAME] [--json]

starts `spec-cli serve` on a free loopback port and measures, on ten
one-line fill-in-the-middle requests of its own (a few lines of Python
around the cursor):

- warm /infill latency, request to last byte (median of 10 distinct requests);
- the same requests again: drafted from the store of earlier outputs;
- `spec-cli complete --server` per call (a process that asks the server);
- `spec-cli complete` per call, loading the models itself (median of 3);
- a chat's second turn: prompt tokens evaluated against the prompt's length.

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> tuple[dict, float]:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    models = ["--target", args.target] + (["--draft", args.draft] if args.draft else [])
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.pop("SPEC_CLI_SERVER", None)
    server = subprocess.Popen([sys.executable, "-m", "spec_cli", "serve", *models, "--port", str(port), "--quiet"],
                              env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 900
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=5).read()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"the server did not start: {server.stderr.read()}")
                time.sleep(0.5)
        _post(base + "/infill", _infill("def warm_up():\n    return ", "\n"))  # first-request costs
        warm, again, texts = [], [], []
        for prefix, suffix in CASES:
            reply, seconds = _post(base + "/infill", _infill(prefix, suffix))
            warm.append(seconds)
            texts.append(reply["content"])
        for prefix, suffix in CASES:
            reply, seconds = _post(base + "/infill", _infill(prefix, suffix))
            again.append((seconds, reply["speculation"]))
        via_server = [_complete_cli(["--server", base], p, s, env)[1] for p, s in CASES[:5]]
        alone = [_complete_cli(models, p, s, env)[1] for p, s in CASES[:3]]

        chat = base + "/v1/chat/completions"
        messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
        first, _ = _post(chat, {"messages": messages, "max_tokens": 64, "temperature": 0})
        messages += [first["choices"][0]["message"], {"role": "user", "content": "Now make it handle None."}]
        second, _ = _post(chat, {"messages": messages, "max_tokens": 64, "temperature": 0})
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


if __name__ == "__main__":
    sys.exit(main())
