"""Does this llama.cpp build run on this CPU?  Asked once per build and CPU,
in a child process, before a model of ours decodes a batch.

A default build of llama-cpp-python compiles ggml for the CPU it was built
on (`GGML_NATIVE`).  Two things then crash with SIGILL at the first batch:
on some Intel Xeons (often VMs) the AMX kernels, which ggml runs as one of
its CPU "extra buffer types", fault (llama.cpp PR 26954: tile permission is
asked on the main thread only, and the tile config can be optimised away);
and a wheel built on another machine (pip caches it) may use instructions
this CPU lacks.  So where the build reports AMX, or a feature /proc/cpuinfo
does not list, a child loads the model and decodes one small batch with
each of bufts.py's modes in turn, "all" (llama.cpp's own choice), "repack"
(weight repacking without AMX) and "none", until one does not die of a
signal; models load that way here (a note says so), and if none runs,
spec-cli stops with one line saying what to do.  The answer is kept in the
state directory per build and CPU, so the check costs its children once.

`SPEC_CLI_EXTRA_BUFTS=1|repack|0` decides by hand ("all", "repack",
"none"); `SPEC_CLI_CPU_CHECK=1` runs the check even where the build's
features look safe (and ignores a kept answer).  `python -m
spec_cli.llama.cpuchild MODEL.gguf [all|repack|none]` is the child.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from .cpu import build_features, cpu_flags

# ggml's names for what a build uses -> the flags /proc/cpuinfo lists for them
FLAGS = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
         "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
         "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8"}
TIMEOUT_S = 120
STATE = "cpu.json"  # in the state directory: build and CPU -> the first of bufts.MODES that runs
NATIVE_OFF = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON '
              '-DGGML_BMI2=ON -DGGML_AVX512=ON"')  # the AVX512 flag only where the CPU has it
REBUILD = (f"{NATIVE_OFF} pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36")
NOTES = {
    "repack": "note: this llama.cpp build's AMX kernels crash on this CPU, so models load without them "
              "(weights repacked for its AVX kernels, as a build without AMX would)",
    "none": "note: this llama.cpp build's extra CPU kernels (AMX, weight repacking) crash on this CPU, so "
            "models load without them (slower). For full speed, rebuild without AMX: " + REBUILD,
}
_BY_HAND = {"1": "all", "all": "all", "repack": "repack", "0": "none", "none": "none"}


@dataclass(frozen=True)
class Verdict:
    bufts: str                # how weights load: one of bufts.MODES
    note: str | None = None   # what the user is told, once per command


def needs_check(features: set[str], flags: set[str] | None) -> bool:
    """AMX in the build, or a feature the CPU does not list."""
    if "AMX_INT8" in features:
        return True
    if flags is None:
        return False
    return any(FLAGS[f] not in flags for f in features if f in FLAGS)


def _key() -> str:
    """This build (the ggml CPU library's file) and this CPU."""
    from .lib import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(lib.glob("libggml-cpu*")) or sorted(lib.glob("*ggml*"))
    stamp = [f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in libs if p.is_file()]
    cpu = ""
    try:
        cpu = "".join(l for l in Path("/proc/cpuinfo").read_text().splitlines()
                      if l.startswith(("model name", "flags", "Features")))[:4096]
    except OSError:
        pass
    return hashlib.sha256("|".join([llama_cpp.__version__, *stamp, cpu, "modes=2"]).encode()).hexdigest()[:32]


def _child(model: Path, mode: str) -> int:
    """Run one small batch in a child; its exit status (negative: a signal)."""
    cmd = [sys.executable, "-m", "spec_cli.llama.cpuchild", str(model), mode]
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        return 0  # it did not crash: llama.cpp is only slow here


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def verdict(model: Path) -> Verdict:
    """How models load here: decided by hand, kept from an earlier check,
    or checked now in child processes on `model`."""
    forced = os.environ.get("SPEC_CLI_EXTRA_BUFTS")
    if forced in _BY_HAND:
        return Verdict(_BY_HAND[forced])
    force_check = os.environ.get("SPEC_CLI_CPU_CHECK") == "1"
    if not force_check and not needs_check(build_features(), cpu_flags()):
        return Verdict("all")
    from ..files import read_state, write_state
    from .bufts import MODES

    key = _key()
    known = read_state(STATE)
    if known.get(key) in MODES and not force_check:
        return Verdict(known[key], NOTES.get(known[key]))
    for mode in MODES:
        code = _child(model, mode)
        if code == 0:
            break
        if code > 0 and mode == "all":
            return Verdict("all")  # it failed in a way of its own (a bad file?): the real load will say why
    else:
        what = _signal_name(code) if code < 0 else f"exit status {code}"
        raise SpecError(f"llama.cpp crashed ({what}) running a batch on this CPU: this "
                        "llama-cpp-python build uses instructions the CPU does not run (built for "
                        "another machine?)", hint=f"Rebuild it here: {REBUILD}")
    known[key] = mode
    write_state(STATE, known)
    return Verdict(mode, NOTES.get(mode))
