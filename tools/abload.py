"""Several servers side by side under the same chat load, interleaved so
that a drifting machine cancels out:

    python tools/abload.py --server spec=http://127.0.0.1:18101 \\
        --server ls=http://127.0.0.1:18103 --clients 8 --block 8 --rounds 6 \\
        -p ../shared/bench/mt-bench.jsonl --max-tokens 64

All servers are up at once, but only one is worked at a time.  Each round
takes the next `--block` prompts (none sent before to any server: a
server that keeps earlier answers as a lookup source would draft a
repeated one whole, and a prompt cache would skip its reading) and sends
them to every server in turn, C clients at once (tools/load.py's closed
loop); the order of the servers turns each round, so no server always
follows the same one.  Reported: each block as a JSON line, then for each
server its pooled tokens a second and, against the first server, the
median and the range of the per-round ratios (a ratio of two blocks a
minute apart, on the same prompts).

Wall clock on this machine; nothing here is asserted.  Keep anything else
heavy off the machine while it runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import ask, load_prompts, run  # noqa: E402


def orders(names: list[str], rounds: int) -> list[list[str]]:
    """Round r's order: the list turned by r, reversed every other round."""
    out = []
    for r in range(rounds):
        turned = names[r % len(names):] + names[:r % len(names)]
        out.append(turned[::-1] if r % 2 else turned)
    return out


def summary(rows: list[dict], names: list[str]) -> list[dict]:
    ref = names[0]
    by = {(row["round"], row["label"]): row for row in rows}
    out = []
    for name in names:
        mine = [row for row in rows if row["label"] == name]
        tokens, seconds = sum(r["tokens"] for r in mine), sum(r["seconds"] for r in mine)
        ratios = [by[(r["round"], name)]["tok_s"] / by[(r["round"], ref)]["tok_s"] for r in mine
                  if (r["round"], ref) in by]
        out.append({"label": name, "rounds": len(mine), "tokens": tokens, "seconds": round(seconds, 1),
                    "tok_s": round(tokens / seconds, 2),
                    f"vs_{ref}_median": round(statistics.median(ratios), 3),
                    f"vs_{ref}_min": round(min(ratios), 3), f"vs_{ref}_max": round(max(ratios), 3)})
    return out


def server(text: str) -> tuple[str, str]:
    label, sep, url = text.partition("=")
    if not sep or not label or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r} is not LABEL=URL (e.g. spec=http://127.0.0.1:8012)")
    return label, url.rstrip("/")


def main() -> None:
    try:
        _main()
    except (OSError, ValueError) as e:  # a prompt file not there or not JSON lines, a server not answering
        sys.exit(f"abload: {e}")


def _main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", required=True, metavar="LABEL=URL", type=server,
                    help="a server to compare; the first is the one the ratios are against")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("-p", "--prompts", action="append", required=True)
    ap.add_argument("--block", type=int, default=8, help="prompts a round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--stream", action="store_true", help="answers streamed, a chunk a token, as chat UIs ask")
    ap.add_argument("--seed", type=int, default=0, help="the prompts' shuffle")
    ap.add_argument("--offset", type=int, default=0,
                    help="prompts to skip after the warm-up ones (those an earlier run on the same servers sent)")
    args = ap.parse_args()
    servers = dict(args.server)
    names = list(servers)
    prompts = load_prompts(args.prompts, 10**9)
    random.Random(args.seed).shuffle(prompts)
    warm, prompts = prompts[:2], prompts[2 + args.offset:]
    if len(prompts) < args.block * args.rounds:
        sys.exit(f"{len(prompts)} prompts after the 2 that warm up and the {args.offset} skipped; "
                 f"{args.block} x {args.rounds} asked for")
    for url in servers.values():  # load, first batches, threads: not on the clock
        for p in warm:
            ask(url, p, 8)
    rows = []
    for r, order in enumerate(orders(names, args.rounds)):
        block = prompts[r * args.block:(r + 1) * args.block]
        for name in order:
            row = {"round": r, "label": name, **run(servers[name], block, args.clients, args.max_tokens,
                                                        stream=args.stream)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for row in summary(rows, names):
        print(json.dumps({"summary": True, **row}), flush=True)


if __name__ == "__main__":
    main()
