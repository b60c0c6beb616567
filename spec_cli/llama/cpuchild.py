"""The child process cpucheck.py runs: load a model as spec-cli would, in
one of bufts.MODES, and decode one batch.  It dies of a signal where this
llama.cpp build's kernels fault on this CPU.

    python -m spec_cli.llama.cpuchild MODEL.gguf [all|repack|none]
"""

from __future__ import annotations

import sys

from .model import LoadConfig, Model


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else "all"
    with Model(argv[0], LoadConfig(n_ctx=256, n_batch=64, extra_bufts=mode)) as m:
        tokens = (m.vocab.tokenize("def f(x):\n    return x * 2\n", add_special=False) * 8)[:16]
        m.decode(tokens, logits_from=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
