"""How many KV sequences the machine's memory holds, before a model loads.

Each sequence of a context is a KV cache of `n_ctx` tokens in each model,
allocated when the context is made; a batch of many requests that asks for
more than memory holds would swap or fail.  So where a command lets the
memory decide (`spec-cli batch`), the sequences asked for are lowered to
what fits in a share of the memory available now, next to the weights
(which llama.cpp copies into memory of its own on a CPU).  A sequence's
cost is read from the GGUF header (each attention layer's K and V widths),
at F16, the default mode's cache type (the deterministic mode's Q8_0 takes
about half: counted as F16, the estimate errs on the safe side).  A model
whose layers keep a recurrent state has a small state besides; not
counted.  Linux only (/proc/meminfo); elsewhere nothing is lowered.
"""

from __future__ import annotations

from pathlib import Path

from .gguf import tensors

SHARE = 0.5       # of the memory available: the rest is the machine's and the weights' slack
F16_BYTES = 2


def kv_bytes_per_token(path: str | Path) -> int:
    """Bytes of KV cache one token takes in `path`'s model (0: not known)."""
    return F16_BYTES * sum(dims[1] for name, _, dims in tensors(path)
                           if name.endswith(("attn_k.weight", "attn_v.weight")) and len(dims) >= 2)


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def fit(seqs: int, per_seq: int, weights: int, available: int | None, share: float = SHARE) -> int:
    """The most of `seqs` sequences of `per_seq` bytes each that fit, with
    `weights` bytes of model, in `share` of `available` bytes; at least
    one, and all of them where nothing is known."""
    if available is None or per_seq <= 0:
        return seqs
    room = share * available - weights
    return max(1, min(seqs, int(room // per_seq)))


def seqs_that_fit(seqs: int, n_ctx: int, paths: list[Path], *, later_bytes: int = 0) -> int:
    """`fit` for the models in `paths`, each with `seqs` sequences of
    `n_ctx`, and a draft of `later_bytes` not downloaded yet (its download
    waits for the target's costs: run/plan.py) counted beside them: its
    weights, and a KV cache a token as large as the largest of the others'
    (a smaller model of the same family has no wider one)."""
    per_token = [kv_bytes_per_token(p) for p in paths]
    if later_bytes:
        per_token.append(max(per_token, default=0))
    weights = sum(Path(p).stat().st_size for p in paths) + later_bytes
    return fit(seqs, n_ctx * sum(per_token), weights, available_bytes())
