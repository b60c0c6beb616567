"""llama.cpp itself, made ready once: llama-cpp-python's bindings imported,
the backend initialised, its log cut to errors.  Every module of `llama/`
takes `llama_cpp` from here; nothing outside `llama/` imports it.

`DecodeTimer` counts the seconds spent inside llama.cpp's decode calls: a
step's wall time less this is the host's share (Python, sampling, the
lookup).  The models of one pair share one timer (runner.load_pair), so
the engine reads the whole step's decode time from the target's.
"""

from __future__ import annotations

import ctypes
import os
import sys

import llama_cpp
from llama_cpp import llama_cpp as _bindings  # the ctypes library (its functions' addresses)

__all__ = ["llama_cpp", "DecodeTimer", "version", "function_address"]


def _log(level: int, text: bytes, _user) -> None:
    if level == 4 or os.environ.get("SPEC_CLI_DEBUG"):  # 4 = GGML_LOG_LEVEL_ERROR
        sys.stderr.write(text.decode("utf-8", "replace"))


_LOG_CB = llama_cpp.llama_log_callback(_log)  # keep a reference: C holds it
llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()


class DecodeTimer:
    """Seconds spent in llama_decode (and waiting for its logits)."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


def version() -> str:
    """The llama-cpp-python release these bindings come from."""
    return llama_cpp.__version__


def function_address(name: str) -> int:
    """Where llama.cpp's C function `name` lives (for the compiled decode
    entry point, llama/_decodepick.c)."""
    return ctypes.cast(getattr(_bindings._lib, name), ctypes.c_void_p).value
