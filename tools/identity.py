"""Identity before/after a change: every proposer's tokens on the shared prompt
sets (or any JSON-lines prompt files), written as one JSON object, so that two
checkouts' outputs can be compared with `--compare A.json B.json`.

Draft lengths are fixed (no cost model): what is drafted then depends on the
code alone, not on this machine's timing, so a residual-rule run (whose text
follows the drafts) is reproducible too.

    python tools/identity.py -p ../shared/bench/*.jsonl -o before.json
    python tools/identity.py --compare before.json after.json
    python tools/identity.py -p ../shared/bench/*.jsonl --parallel 4 -o before4.json   # 4 at once, one batch

With --parallel N the requests of one setting and proposer run N at a time in
one target batch (run/batch.py, as `serve --parallel N`), each with its seed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

SETTINGS = {  # name -> (temperature, top_k, top_p, min_p, rule)
    "greedy": (0.0, 0, 1.0, 0.0, "gumbel"),
    "t0.8": (0.8, 40, 0.95, 0.05, "gumbel"),
    "t1-residual": (1.0, 0, 1.0, 0.0, "residual"),
}
PROPOSERS = ("none", "ngram", "draft", "hybrid")


def capture(args) -> dict:
    from spec_cli.core.config import SamplingConfig
    from spec_cli.run.config import PairConfig
    from spec_cli.run.engine import GenConfig
    from spec_cli.run.runner import load_pair, prompt_tokens
    from spec_cli.run.session import Session

    pair = load_pair(PairConfig(target=args.target, draft=args.draft, proposer="hybrid", ctx=2048,
                                draft_if_it_pays=False, seqs=max(1, args.parallel)))
    if args.parallel:
        try:
            return capture_parallel(args, pair)
        finally:
            pair.close()
    out = {}
    try:
        for path in args.prompts:
            items = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
            for item in items[:args.n_prompts]:
                tokens = prompt_tokens(pair.target, item["prompt"], raw=item.get("kind") == "completion")
                for setting, (t, k, p, mp, rule) in SETTINGS.items():
                    for name in PROPOSERS:
                        gen = GenConfig(sampling=SamplingConfig(t, k, p, mp), max_tokens=args.max_tokens,
                                        draft_max=args.draft_max, seed=args.seed, adaptive=False, rule=rule)
                        pair.reset()
                        s = Session(pair, tokens, gen, pair.new_proposer(name=name)).run()
                        key = f"{Path(path).stem}/{item.get('id', items.index(item))}/{setting}/{name}"
                        out[key] = s.tokens
                        print(key, hashlib.md5(str(s.tokens).encode()).hexdigest()[:8], file=sys.stderr)
    finally:
        pair.close()
    return out


def _items(args) -> list[tuple[str, dict]]:
    out = []
    for path in args.prompts:
        items = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        out += [(f"{Path(path).stem}/{item.get('id', i)}", item) for i, item in enumerate(items[:args.n_prompts])]
    return out


def capture_parallel(args, pair) -> dict:
    """Each setting and proposer: every prompt, args.parallel at a time in one Batch."""
    from spec_cli.core.config import SamplingConfig
    from spec_cli.run.batch import Batch
    from spec_cli.run.engine import GenConfig, Generation
    from spec_cli.run.runner import prompt_tokens

    items = _items(args)
    prompts = [prompt_tokens(pair.target, item["prompt"], raw=item.get("kind") == "completion")
               for _, item in items]
    out = {}
    for setting, (t, k, p, mp, rule) in SETTINGS.items():
        for name in PROPOSERS:
            for seq in range(pair.target.n_seq):
                pair.use(seq)
                pair.reset()
            batch, pending, free, got = Batch(pair), list(range(len(items))), list(range(args.parallel)), {}
            while pending or len(batch):
                while pending and free:
                    i, seq = pending.pop(0), free.pop(0)
                    gen = GenConfig(sampling=SamplingConfig(t, k, p, mp), max_tokens=args.max_tokens,
                                    draft_max=args.draft_max, seed=args.seed + i, adaptive=False, rule=rule)
                    pair.use(seq)
                    g = Generation(pair.target, pair.new_proposer(name=name), prompts[i], gen)
                    got[batch.add(seq, g)] = (i, seq, [])
                for stream, st in batch.round():
                    got[stream][2].extend(st.tokens)
                    if st.finish_reason is not None:
                        batch.drop(stream)
                        free.append(got[stream][1])
            for i, _, tokens in got.values():
                key = f"{items[i][0]}/{setting}/{name}"
                out[key] = tokens
                print(key, hashlib.md5(str(tokens).encode()).hexdigest()[:8], file=sys.stderr)
    return out


def compare(a: dict, b: dict) -> int:
    same = [k for k in a if k in b and a[k] == b[k]]
    differ = [k for k in a if k in b and a[k] != b[k]]
    for k in differ:
        j = next((i for i, (x, y) in enumerate(zip(a[k], b[k])) if x != y), min(len(a[k]), len(b[k])))
        print(f"differ: {k} from token {j}")
    print(f"{len(same)} identical, {len(differ)} differ, {len(set(a) ^ set(b))} in one only")
    return 1 if differ or set(a) ^ set(b) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--prompts", nargs="*", default=[])
    ap.add_argument("-o", "--out")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--n-prompts", type=int, default=2)
    ap.add_argument("-n", "--max-tokens", type=int, default=48)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--parallel", type=int, default=0, help="this many requests at once in one batch")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(f).read_text()) for f in args.compare)
        return compare(a, b)
    Path(args.out).write_text(json.dumps(capture(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
