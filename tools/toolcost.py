"""What offering tools costs a reply that calls none: the same questions
asked of one server with and without `tools` (tool_choice auto, greedy),
in turn, each question's two requests back to back; the tokens/s of each
pair, the constraint's host time a token (`speculation.mask_ms`), and
whether the text came out the same.

    python tools/toolcost.py --url http://127.0.0.1:8012 --n 12 --tokens 96
    python tools/toolcost.py --url NEW --against OLD   # two servers, the same requests with tools, in turn
"""

from __future__ import annotations

import argparse
import json
import statistics
import urllib.request

QUESTIONS = [
    "Write a haiku about the sea.", "Explain what a hash map is in two sentences.",
    "Give three tips for writing clear commit messages.", "What does the Python `with` statement do?",
    "Summarise the plot of Romeo and Juliet in three sentences.", "Why is the sky blue? Answer briefly.",
    "Write a limerick about a cat who codes.", "List four uses of a binary search.",
    "Describe a rainy morning in a city in one paragraph.", "What is the difference between TCP and UDP?",
    "Write a short motivational note for a student before an exam.", "Explain recursion to a child.",
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "search_files", "description": "Find files by a pattern.",
                                           "parameters": {"type": "object", "properties": {
                                               "pattern": {"type": "string"}}, "required": ["pattern"]}}}]


def ask(url: str, question: str, tokens: int, tools: bool) -> dict:
    body = {"model": "m", "messages": [{"role": "user", "content": question}], "temperature": 0,
            "max_tokens": tokens, **({"tools": TOOLS, "tool_choice": "auto"} if tools else {})}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8012")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--against", default=None, help="another server: compare the two, tools offered to both")
    args = ap.parse_args()
    if args.against:
        return against(args)
    ratios, mask_per_token, same, called = [], [], 0, 0
    for i, q in enumerate((QUESTIONS * 4)[:args.n]):
        pair = {}
        for tools in ((False, True) if i % 2 == 0 else (True, False)):  # order turns, against drift
            pair[tools] = ask(args.url, q, args.tokens, tools)
        plain, offered = pair[False], pair[True]
        if offered["choices"][0]["message"].get("tool_calls"):
            called += 1
            continue
        ratios.append(offered["speculation"]["tokens_per_s"] / plain["speculation"]["tokens_per_s"])
        n = offered["usage"]["completion_tokens"]
        mask_per_token.append(offered["speculation"].get("mask_ms", 0.0) / max(n, 1))
        same += offered["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    print(f"questions {args.n}, answered without a call {len(ratios)} ({called} called a tool)")
    print(f"tok/s with tools over without, median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    print(f"constraint host time a token, median {statistics.median(mask_per_token):.4f} ms "
          f"(max {max(mask_per_token):.4f})")
    print(f"same text with and without tools: {same}/{len(ratios)}")


def against(args) -> None:
    """--url over --against, the same questions with tools to both, in turn."""
    ratios, same, masks = [], 0, {args.url: [], args.against: []}
    for i, q in enumerate((QUESTIONS * 4)[:args.n]):
        got = {}
        for url in ((args.url, args.against) if i % 2 == 0 else (args.against, args.url)):
            got[url] = ask(url, q, args.tokens, True)
            n = got[url]["usage"]["completion_tokens"]
            masks[url].append(got[url]["speculation"].get("mask_ms", 0.0) / max(n, 1))
        ratios.append(got[args.url]["speculation"]["tokens_per_s"] / got[args.against]["speculation"]["tokens_per_s"])
        same += got[args.url]["choices"][0]["message"] == got[args.against]["choices"][0]["message"]
    print(f"tok/s {args.url} over {args.against}, tools offered to both: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); the same message {same}/{len(ratios)}")
    for url, m in masks.items():
        print(f"  {url}: constraint host time a token, median {statistics.median(m):.4f} ms")


if __name__ == "__main__":
    main()
