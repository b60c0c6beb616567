"""What a pair of models is loaded with: plain data, importable without
llama.cpp (the CLI builds it before anything heavy is loaded)."""

from __future__ import annotations

from dataclasses import dataclass


# the most a step drafts (every command's --draft-max, serve's too): long drafts pay
# only where they are likely right (a copy of the prompt or of earlier outputs) and a
# batch's rows cost little each, as on a GPU or past 16 rows on a CPU; the cost model
# drafts fewer everywhere else
DRAFT_MAX = 64


@dataclass(frozen=True, kw_only=True)
class PairConfig:
    target: str
    draft: str | None = None
    proposer: str = "hybrid"
    ctx: int = 4096
    threads: int = 0
    gpu_layers: int = 0
    draft_gpu_layers: int = 0
    p_min: float = 0.0
    deterministic: bool = False  # the target's numerics: see llama.config.LoadConfig
    # hybrid drafts from the lookup alone where remembered costs say the draft
    # model can never pay here; True: it is then not even loaded (bench loads
    # it, for `--proposer draft`)
    draft_if_it_pays: bool = True
    # llama.cpp RPC servers the target's layers spread over (HOST:PORT), and
    # their weights in the split; the draft, MTP block and lookup stay here
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    seqs: int = 1  # sequences per context, each with a KV cache of `ctx` tokens (serve: 2, editors apart)
    # `seqs` is the most: fewer where the memory free as the pair loads would
    # not hold their KV caches (llama.memory; batch)
    fit_memory: bool = False
    # the requests kept running at once (batch: all its slots): a draft model
    # that could not pay at that many is left out as one that never could
    together: int = 1
