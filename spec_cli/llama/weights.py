"""A GGUF's weights loaded where they go (this CPU's buffer types, RPC
servers, GPU layers), and a llama.cpp context made on them: what Model
starts from (model.py)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from . import bufts as buffer_types, facts
from .config import CANDIDATE_ROWS, LoadConfig
from .files import check_gguf, release_file_pages
from .lib import llama_cpp


@dataclass(frozen=True)
class Weights:
    ptr: object          # the llama_model
    bufts: object        # the buffer types the weights went into (cpucheck.py)
    note: str | None     # a line for the user about how the model was loaded
    devices: list[str]   # where the layers went, for the start-up line and `models info`


@dataclass(frozen=True)
class Context:
    ctx: object
    numerics: object
    flash_attn_type: int


def load_weights(path: Path, cfg: LoadConfig) -> Weights:
    """The weights, in the buffer types decided for this CPU (cpucheck.py)."""
    check_gguf(path)
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = cfg.gpu_layers if cfg.gpu_layers >= 0 else 1_000_000
    mparams.load_mtp = cfg.mtp
    devices, placed = _place(mparams, cfg)  # kept alive until the weights are loaded
    chosen, note = cfg.extra_bufts, None
    if chosen is None:
        from .cpucheck import verdict
        decided = verdict(path)
        chosen, note = decided.bufts, decided.note
    overrides = buffer_types.apply(mparams, chosen, path)
    ptr = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    del overrides, placed
    if not ptr:
        raise SpecError(f"llama.cpp could not load {path}",
                        hint="The file may be truncated or of an architecture this "
                             "llama.cpp build does not know; set SPEC_CLI_DEBUG=1 to see why.")
    release_file_pages(path)
    return Weights(ptr, chosen, note, devices)


def _place(mparams, cfg: LoadConfig):
    """Which devices the layers go to: the RPC servers' (all layers
    there, unless gpu_layers says how many), or, while RPC servers are
    registered in this process, this machine's only (a draft model).
    Returns their names, and what must stay alive while the weights load."""
    from . import rpc

    if cfg.rpc:
        devs = rpc.add_servers(cfg.rpc)
        if cfg.gpu_layers == 0:
            mparams.n_gpu_layers = 1_000_000
        arr = rpc.device_array(devs)
        mparams.devices = ctypes.cast(arr, ctypes.c_void_p)
        split = None
        if cfg.tensor_split:
            split = (ctypes.c_float * llama_cpp.llama_max_devices())(*cfg.tensor_split)
            mparams.tensor_split = split
        return [rpc.describe(d) for d in devs], (arr, split)
    if rpc.registered():
        arr = rpc.device_array(rpc.local_devices())
        mparams.devices = ctypes.cast(arr, ctypes.c_void_p)
        return [], arr
    return [], None


def output_on_gpu(ptr, cfg: LoadConfig) -> bool:
    """Does the output layer run on a GPU?  There llama.cpp's top-k inside
    the graph is cheap and saves copying whole rows (Model.candidates_k);
    on a CPU it costs more than reading the rows (ggml sorts each row;
    docs/results.md, "Rows as candidates")."""
    n_layer = int(llama_cpp.llama_model_n_layer(ptr))
    return bool(llama_cpp.llama_supports_gpu_offload()) and (cfg.gpu_layers < 0 or cfg.gpu_layers > n_layer)


def new_context(ptr, cfg: LoadConfig, n_threads: int, *, recurrent: bool, bufts, name: str) -> Context:
    """A context on the weights (freed, with the context, where llama.cpp cannot make one)."""
    cparams = facts.context_params(cfg, cfg.n_batch, n_threads)
    if recurrent:
        cparams.n_rs_seq = cfg.rs_snapshots  # llama.cpp sets 0 where the architecture cannot
    # a verify batch's rows with a backend sampler attached (candidates_k)
    cparams.n_outputs_max_per_seq = CANDIDATE_ROWS
    numerics = facts.numerics(cparams, bufts)
    ctx = llama_cpp.llama_init_from_model(ptr, cparams)
    if not ctx:
        llama_cpp.llama_model_free(ptr)
        raise SpecError(f"llama.cpp could not create a context of {cfg.n_ctx} tokens for {name}",
                        hint="Try a smaller --ctx, or fewer GPU layers.")
    return Context(ctx, numerics, int(cparams.flash_attn_type))
