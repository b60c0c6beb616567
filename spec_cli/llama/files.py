"""A model's file on disk: checked before llama.cpp reads it, and its
mapped pages let go of once llama.cpp has copied what it needs."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

from ..errors import SpecError

_GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path) -> None:
    """Fail clearly on a missing or non-GGUF file before llama.cpp sees it."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise SpecError(f"cannot read model file {path}: {e.strerror}") from e
    if magic != _GGUF_MAGIC:
        raise SpecError(f"{path} is not a GGUF file",
                        hint="spec-cli runs llama.cpp GGUF models; convert or download a .gguf.")


def release_file_pages(path: Path) -> None:
    """Drop this process's resident pages of a memory-mapped model file.

    Weights that llama.cpp repacks for the CPU (or copies to a GPU) are
    read through the mapping and then live in a buffer of their own; the
    mapping's pages would stay resident too, holding those weights twice.
    MADV_DONTNEED on a read-only file mapping only unmaps: what is still
    used from the file faults back in from the page cache, the rest is no
    longer counted.  Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    real = os.path.realpath(path)
    try:
        with open("/proc/self/maps") as f:
            spans = [line.split(None, 1)[0] for line in f if line.rstrip("\n").endswith(" " + real)]
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for span in spans:
        lo, hi = (int(x, 16) for x in span.split("-"))
        libc.madvise(lo, hi - lo, 4)  # MADV_DONTNEED
