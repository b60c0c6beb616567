"""What a model is and how it was loaded, as facts: its context's
parameters and the numerics they decide, its key in the state files
(`fingerprint`), and what `spec-cli models info` shows (`describe`)."""

from __future__ import annotations

import ctypes
from pathlib import Path

from . import cores
from .config import LoadConfig
from .lib import llama_cpp, version
from .vocab import meta

_Q8_0 = 8  # enum ggml_type


def context_params(cfg: LoadConfig, n_batch: int, threads: int):
    """A context's parameters as `cfg` asks: n_ctx tokens for each of its
    sequences (each a KV cache of its own), batches of n_batch, and the
    deterministic numerics."""
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = cfg.n_ctx * cfg.n_seq
    if cfg.n_seq > 1:
        cparams.n_seq_max = cfg.n_seq
        cparams.kv_unified = False
    cparams.n_batch = cparams.n_ubatch = n_batch
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.no_perf = True
    if cfg.deterministic:
        # Flash attention over a Q8_0 KV cache: llama.cpp's CPU kernel
        # then treats every query row alike whatever the batch, whereas
        # over an F16 cache it splits a single query's KV across threads
        # (from 512 entries on) and rounds differently from a batch.
        cparams.flash_attn_type = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED
        cparams.type_k = cparams.type_v = _Q8_0
    return cparams


def numerics(cparams, mode: str) -> str:
    """What decides the kernels: part of what a remembered cost is valid for."""
    repack = {"all": "1", "repack": "noamx", "none": "0"}[mode]
    return f"fa={cparams.flash_attn_type}|kv={cparams.type_k}/{cparams.type_v}|repack={repack}"


def fingerprint(path: Path, cfg: LoadConfig, numbers: str | None = None) -> str:
    """A model's key in the state files, also for a model not loaded yet
    (then its numerics follow from `cfg` as Model sets them)."""
    if numbers is None:
        cparams = context_params(cfg, cfg.n_batch, cores.threads(cfg.n_threads))
        mode = cfg.extra_bufts
        if mode is None:
            from .cpucheck import verdict
            mode = verdict(path).bufts
        numbers = numerics(cparams, mode)
    st = path.stat()
    # costs=3: curves remembered before then could hold a straight line where the
    # machine's rows get cheaper with the batch (core/cost.py `_from_seen`): timed anew
    return (f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}|"
            f"{version()}|gpu={cfg.gpu_layers}|threads={cores.threads(cfg.n_threads)}|"
            f"{'deterministic' if cfg.deterministic else 'fast'}|{numbers}|costs=3"
            # an RPC target's batches cross the network: its costs are its placement's
            + (f"|rpc={','.join(cfg.rpc)}|split={','.join(map(str, cfg.tensor_split))}" if cfg.rpc else ""))


def kv_bytes(model: "Model") -> int | None:
    """About what one sequence's KV cache of n_ctx tokens takes (None for
    a model with recurrent layers, whose memory is laid out otherwise)."""
    if model.recurrent:
        return None
    m = model.ptr
    n_head = max(int(llama_cpp.llama_model_n_head(m)), 1)
    head_dim = int(llama_cpp.llama_model_n_embd(m)) // n_head
    per = 34 / 32 if model.deterministic else 2.0  # Q8_0 or F16 bytes per value
    return int(int(llama_cpp.llama_model_n_layer(m)) * model.n_ctx * 2
               * int(llama_cpp.llama_model_n_head_kv(m)) * head_dim * per)


def describe(model: "Model") -> dict:
    """What `spec-cli models info` shows, from the GGUF's metadata."""
    m, vocab = model.ptr, model.vocab
    buf = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(m, buf, len(buf))
    desc = buf.value.decode("utf-8", "replace")
    special = vocab.special_tokens()
    fim = {k[4:]: vocab.token_text(v) for k, v in special.items() if k.startswith("fim_") and v >= 0}
    if "pre" not in fim:
        fim = {}  # repository/file separators alone (SmolLM2's) do not make fill-in-the-middle
    return {
        "file": str(model.path),
        "name": meta(m, "general.name"),
        "architecture": meta(m, "general.architecture"),
        "description": desc,
        "parameters": int(llama_cpp.llama_model_n_params(m)),
        "quantization": desc.split(" ", 2)[2] if desc.count(" ") >= 2 else None,
        "size_bytes": model.size_bytes,
        "layers": int(llama_cpp.llama_model_n_layer(m)),
        "vocab_size": model.n_vocab,
        "tokenizer": meta(m, "tokenizer.ggml.model"),
        "tokenizer_pre": meta(m, "tokenizer.ggml.pre"),
        "trained_context": model.n_ctx_train,
        "chat_template": bool(vocab.chat_template()),
        "bos": vocab.token_text(special["bos"]) if special["bos"] >= 0 else None,
        "eos": vocab.token_text(special["eos"]) if special["eos"] >= 0 else None,
        "fim_tokens": fim,
        # how a rewind is done (Model.truncate): a KV cache is cut; a recurrent state is rolled
        # back by llama.cpp's snapshots where the architecture keeps them, else read again
        "memory": ("hybrid (attention and recurrent layers)" if llama_cpp.llama_model_is_hybrid(m)
                   else "recurrent" if llama_cpp.llama_model_is_recurrent(m) else "KV cache"),
        "recurrent_rollback": (("snapshots" if model.n_rs else "checkpoint and read again")
                               if model.recurrent else None),
        # multi-token-prediction (NextN) layers in the file: --proposer mtp drafts with them
        "mtp_layers": model.mtp_layers,
    }
