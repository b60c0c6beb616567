"""A native crash ends the command with one line that says what happened
and what to do, not a bare "Illegal instruction" and exit 132.

Installed by the CLI's entry point only (tests and library users keep
their own handlers).  The handler is a ctypes callback: a crash inside
llama.cpp happens while the GIL is free (ctypes releases it for the call),
so the callback can run; it writes its line and ends the process at once
with the usual status, 128 + the signal.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_KEEP: list = []  # the C side holds the callback: keep it alive

WHAT = {
    signal.SIGILL: ("an illegal instruction", True),
    signal.SIGSEGV: ("a segmentation fault", False),
    signal.SIGBUS: ("a bus error", False),
    signal.SIGFPE: ("a floating-point exception", False),
}


def message(sig: int) -> str:
    from .llama.cpucheck import REBUILD

    what, build = WHAT.get(sig, (f"signal {sig}", False))
    if build:
        todo = ("this llama-cpp-python build uses CPU instructions this machine does not run (built for "
                "another CPU, or AMX kernels that fault here). Try SPEC_CLI_EXTRA_BUFTS=0, or rebuild: "
                + REBUILD)
    else:
        todo = "set SPEC_CLI_DEBUG=1 to see llama.cpp's log, and report it with that output."
    return f"error: llama.cpp crashed ({what}, {signal.Signals(sig).name}): {todo}\n"


def install() -> None:
    if not hasattr(signal, "SIGBUS") or sys.platform == "win32":
        return
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return
    handler_t = ctypes.CFUNCTYPE(None, ctypes.c_int)
    lines = {int(sig): message(sig).encode() for sig in WHAT}  # composed now: nothing to import in a crash

    def on_fault(sig: int) -> None:
        os.write(2, lines.get(sig, b"error: llama.cpp crashed\n"))
        os._exit(128 + sig)

    callback = handler_t(on_fault)
    _KEEP.append(callback)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, handler_t]
    for sig in WHAT:
        libc.signal(int(sig), callback)
