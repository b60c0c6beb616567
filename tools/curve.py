"""A model's c(n) on this machine well past a draft's usual length:

    python tools/curve.py MODEL.gguf [--threads N] [--prefix 300] [--rounds 3]

Decodes batches of n tokens (n up to 128) after `prefix` cached tokens,
each size `rounds` times in alternating order, and prints the median
milliseconds and the milliseconds a row: where the kernels change (on a
CPU a batch of 16 rows can cost less than one of 12) and how far a long
verify batch cheapens each row (probe.py times 1..65 within its budget).
Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 17, 20, 24, 32, 33, 48, 64, 65, 96, 128)


def main() -> None:
    from spec_cli.llama.model import LoadConfig, Model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prefix", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    m = Model(args.model, LoadConfig(n_ctx=4096, n_threads=args.threads))
    rng = random.Random(0)
    m.decode([rng.randrange(1000, 20000) for _ in range(args.prefix)])
    res: dict[int, list[float]] = {n: [] for n in SIZES}
    for r in range(args.rounds):
        for n in (SIZES if r % 2 == 0 else SIZES[::-1]):
            t0 = time.perf_counter()
            m.decode([1234 + i for i in range(n)], logits_from=0, copy=False)
            res[n].append((time.perf_counter() - t0) * 1000)
            m.truncate(args.prefix)
    for n in SIZES:
        c = statistics.median(res[n])
        print(f"{n:4d} {c:8.1f} ms {c / n:6.2f} ms a row")
    m.close()


if __name__ == "__main__":
    main()
