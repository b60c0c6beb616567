"""The curve c(n) of a model under each numerics configuration llama.cpp
offers the default mode (a developer's tool; probe.py's figures come from it).

    python tools/probe_configs.py MODEL.gguf [CACHED_PREFIX]
"""

from __future__ import annotations

# -- which numerics are fastest here (a developer's tool) --------------------

CONFIGS = {
    "llama.cpp defaults (flash attention auto, F16 KV, repack on)": dict(fa=-1, kv=None, repack=True),
    "flash attention off, F16 KV, repack on": dict(fa=0, kv=None, repack=True),
    "flash attention on, Q8_0 KV, repack on (--deterministic)": dict(fa=1, kv=8, repack=True),
    "flash attention on, Q8_0 KV, repack off": dict(fa=1, kv=8, repack=False),
}


def _main(argv: list[str]) -> None:
    """Print c(n) in ms, n = SIZES, for each configuration in CONFIGS."""
    from spec_cli.llama.lib import llama_cpp
    from spec_cli.llama.model import LoadConfig, Model
    from spec_cli.llama.probe import SIZES, summarise, time_sizes

    path = argv[0]
    prefix = int(argv[1]) if len(argv) > 1 else 300
    for name, c in CONFIGS.items():
        orig = llama_cpp.llama_context_default_params

        def params(c=c):
            p = orig()
            p.flash_attn_type = c["fa"]
            if c["kv"] is not None:
                p.type_k = p.type_v = c["kv"]
            return p

        morig = llama_cpp.llama_model_default_params

        def mparams(c=c):
            p = morig()
            p.use_extra_bufts = c["repack"]
            return p

        llama_cpp.llama_context_default_params, llama_cpp.llama_model_default_params = params, mparams
        try:
            with Model(path, LoadConfig(n_ctx=2048)) as m:
                curve = summarise(time_sizes(m, SIZES, rounds=3, prefix=prefix))
        finally:
            llama_cpp.llama_context_default_params, llama_cpp.llama_model_default_params = orig, morig
        cells = " ".join(f"{n}:{curve[n] * 1e3:.0f}" for n in SIZES)
        print(f"{name:<62} {cells}", flush=True)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
