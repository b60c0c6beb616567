"""Which of ggml-cpu's extra buffer types a model's weights load into.

- "all": llama.cpp's own choice (AMX kernels where the build has them,
  weight repacking for the CPU's SIMD kernels, ...).
- "repack": weight repacking without AMX, for a CPU whose AMX kernels fault
  (cpucheck.py).  llama.cpp's `use_extra_bufts` switches AMX and repacking
  off together, and repacking is worth keeping: here it made a one-token
  decode of a Q4_K 1.5B 13 % cheaper and a batch of 4 36 % cheaper (prompt
  reading 10-50 % dearer).  So the weights repacking takes are named, one
  override each layer set, to the CPU_REPACK buffer type.
- "none": plain CPU buffers (the weights stay in the file's mapping).

Which weights repacking takes is ggml's `ggml_repack_get_optimal_repack_type`
of the vendored llama.cpp (pinned with llama-cpp-python): on x86 with AVX2,
Q4_0, Q4_K, IQ4_NL and MXFP4 with a multiple of 8 rows, and Q2_K with
AVX-512.  An override is only given to weights every llama.cpp graph
multiplies as they are (`_MATMUL`), so no other operation meets a repacked
tensor; cpucheck runs one batch this way before it is the verdict.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

MODES = ("all", "repack", "none")

_Q4_0, _Q2_K, _Q4_K, _IQ4_NL, _MXFP4 = 2, 10, 12, 20, 39
# blk.N.<role>.weight that every architecture feeds to MUL_MAT (or, for
# experts, MUL_MAT_ID) unchanged
_MATMUL = ("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
           "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
_LAYER = re.compile(r"blk\.(\d+)\.([a-z_]+)\.weight")


class _Override(ctypes.Structure):  # llama.h's llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def repackable(kind: int, shape: tuple[int, ...], *, avx512: bool) -> bool:
    """Whether ggml's CPU repacking takes a weight of this type and shape
    (x86; the only place AMX, and so this mode, exists)."""
    if len(shape) < 2 or shape[1] % 8:
        return False
    return kind in (_Q4_0, _Q4_K, _IQ4_NL, _MXFP4) or (kind == _Q2_K and avx512)


def patterns(tensors, *, avx512: bool) -> list[str]:
    """Anchored regexes naming the weights to repack: one per set of layers
    sharing the same roles, and one for the output matrix."""
    by_role: dict[str, set[int]] = {}
    out = []
    for name, kind, shape in tensors:
        if not repackable(kind, shape, avx512=avx512):
            continue
        m = _LAYER.fullmatch(name)
        if m and m.group(2) in _MATMUL and (len(shape) == 2 or m.group(2).endswith("_exps")):
            by_role.setdefault(m.group(2), set()).add(int(m.group(1)))
        elif name == "output.weight" and len(shape) == 2:
            out.append(r"^output\.weight$")
    by_layers: dict[frozenset[int], list[str]] = {}
    for role, layers in by_role.items():
        by_layers.setdefault(frozenset(layers), []).append(role)
    for layers, roles in sorted(by_layers.items(), key=lambda kv: sorted(kv[1])):
        ids = "|".join(str(i) for i in sorted(layers))
        out.append(rf"^blk\.(?:{ids})\.(?:{'|'.join(sorted(roles))})\.weight$")
    return out


def _ggml(name: str) -> ctypes.CDLL:
    from .lib import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    found = sorted(lib.glob(f"lib{name}.*"))
    return ctypes.CDLL(str(found[0]) if found else f"lib{name}.so")


def cpu_extra_bufts() -> dict[str, int]:
    """ggml-cpu's extra buffer types in this build, by name ("AMX",
    "CPU_REPACK", ...), as llama.cpp asks for them."""
    gg, base = _ggml("ggml"), _ggml("ggml-base")
    gg.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    gg.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    gg.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    gg.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    base.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    base.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    base.ggml_backend_buft_name.restype = ctypes.c_char_p
    base.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    dev = gg.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    reg = gg.ggml_backend_dev_backend_reg(dev) if dev else None
    fn = base.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts") if reg else None
    if not fn:
        return {}
    arr = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(fn)(dev)
    found, i = {}, 0
    while arr and arr[i]:
        found[base.ggml_backend_buft_name(arr[i]).decode()] = arr[i]
        i += 1
    return found


def apply(mparams, mode: str, path: Path):
    """Set `mparams` for `mode`; returns what must stay alive while the
    model loads (the override array), or None."""
    mparams.use_extra_bufts = mode == "all"
    if mode != "repack":
        return None
    from .cpu import cpu_flags
    from .gguf import tensors

    repack = cpu_extra_bufts().get("CPU_REPACK")
    pats = patterns(tensors(path), avx512="avx512f" in (cpu_flags() or ())) if repack else []
    if not pats:
        return None
    keep = [p.encode() for p in pats]
    arr = (_Override * (len(keep) + 1))()
    for slot, p in zip(arr, keep):
        slot.pattern, slot.buft = p, repack
    mparams.tensor_buft_overrides = ctypes.cast(arr, ctypes.c_void_p)
    return keep, arr
