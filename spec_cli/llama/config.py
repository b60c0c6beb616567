"""How a model is loaded: plain data, importable without llama.cpp."""

from __future__ import annotations

from dataclasses import dataclass

# rows read as candidates (Model.candidates_k): at most this many a batch
# (a verify batch of draft_max + 1), each its k + CANDIDATE_SPARE most likely
# tokens (the spare keeps ties at the k-th logit as the whole row keeps them)
CANDIDATE_ROWS = 64
CANDIDATE_SPARE = 8


@dataclass(frozen=True)
class LoadConfig:
    n_ctx: int = 4096
    n_threads: int = 0          # 0 = the cores other programs leave free (cores.py)
    gpu_layers: int = 0         # -1 = all
    n_batch: int = 512
    # False: llama.cpp's fast path for the backend (its own choices of flash
    # attention, KV type and CPU weight repacking); a batch's logits then
    # differ from one-token decodes in the last bits, as in every engine.
    # True: flash attention over a Q8_0 KV cache (see Model.__init__), and
    # verification batches capped where they stay bitwise one-token logits
    # (probe.py).  CPU weight repacking stays on: it rounds batches of 4+
    # tokens differently, which the cap excludes, and turning it off costs
    # a fifth of single-token speed here.
    deterministic: bool = False
    # ggml-cpu's extra buffer types, one of bufts.MODES ("all": AMX and
    # weight repacking as llama.cpp chooses, "repack": repacking without
    # AMX, "none"); None: as cpucheck.py decides for this build and CPU
    extra_bufts: str | None = None
    # sequences in the context, each with its own KV cache of n_ctx tokens
    # (llama.cpp's non-unified cache: a sequence attends over its own cells only)
    n_seq: int = 1
    # recurrent states llama.cpp keeps per sequence to roll back to (its
    # n_rs_seq; only some architectures can), so a rewind of up to this many
    # tokens needs no checkpoint: a verify batch of draft_max + 1 tokens
    rs_snapshots: int = 16
    # load the file's multi-token-prediction (NextN) layers too and keep the
    # target's hidden state at every position, for MTPHead (a file without
    # such layers loads as usual)
    mtp: bool = False
    # llama.cpp RPC servers (HOST:PORT) to spread the layers over
    # (llama.cpp's layer split, weighed by tensor_split); a model loaded
    # while they are registered but not given them stays on this machine
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
