"""bench's peer: the same model file, prompts and sampling settings run
through llama-cpp-python's own generation loop (`Llama.create_completion`),
so a user sees what spec-cli costs or buys against the library it is built
on.  The peer reads the prompt but its last token before the clock starts,
as spec-cli's target alone does; its speed is generation only."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from ..errors import SpecError
from . import bufts

PEERS = ("llama-cpp-python",)


@dataclass
class PeerRun:
    n_tokens: int
    gen_s: float

    @property
    def speed(self) -> float:
        return self.n_tokens / self.gen_s if self.gen_s > 0 else 0.0


class Peer:
    name = "llama-cpp-python"

    def __init__(self, target):
        """A second copy of `target`'s file, loaded by llama_cpp.Llama with
        the same context, threads, GPU layers and CPU buffer types (the AMX
        check's verdict), and llama.cpp's own flash-attention choice, as
        spec-cli's context gets."""
        from .lib import llama_cpp

        cfg = target.config
        self.rows: list[dict] = []  # bench's line per prompt file (run/bench.py)
        try:
            with _as_spec_cli_loads(target):
                self.llm = llama_cpp.Llama(model_path=str(target.path), n_ctx=target.n_ctx, n_batch=target.n_batch,
                                           n_ubatch=target.n_batch, n_threads=target.n_threads,
                                           n_threads_batch=target.n_threads,
                                           n_gpu_layers=cfg.gpu_layers, verbose=False)
        except (ValueError, RuntimeError) as e:
            raise SpecError(f"llama-cpp-python could not load {target.path.name}: {e}") from e

    def run(self, tokens: list[int], sampling, max_tokens: int, seed: int) -> PeerRun:
        llm = self.llm
        llm.reset()
        llm.eval(tokens[:-1])  # the prompt, untimed: create_completion finds it cached
        t0 = time.perf_counter()
        out = llm.create_completion(tokens, max_tokens=max_tokens, temperature=sampling.temperature,
                                    top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p,
                                    repeat_penalty=1.0, seed=seed)
        return PeerRun(out["usage"]["completion_tokens"], time.perf_counter() - t0)

    def close(self) -> None:
        self.llm.close()


@contextlib.contextmanager
def _as_spec_cli_loads(target):
    """Llama() sets use_extra_bufts and flash attention itself; for the
    peer to run the same kernels, lend it spec-cli's choices (the buffer
    types, with their overrides) while it loads."""
    import llama_cpp.llama as llama_mod

    lib = llama_mod.llama_cpp
    default_params = lib.llama_model_default_params
    disabled = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED

    keep = []

    def params():
        p = default_params()
        keep.append(bufts.apply(p, target.bufts, target.path))
        return p
    lib.llama_model_default_params = params
    lib.LLAMA_FLASH_ATTN_TYPE_DISABLED = target.flash_attn_type
    try:
        yield
    finally:
        lib.llama_model_default_params = default_params
        lib.LLAMA_FLASH_ATTN_TYPE_DISABLED = disabled
