"""What this CPU runs and what the loaded llama.cpp build uses: facts only
(cpucheck.py decides from them; bufts.py asks for AVX-512)."""

from __future__ import annotations

from pathlib import Path


def build_features() -> set[str]:
    """What the loaded ggml CPU backend was compiled to use ("AVX2", "AMX_INT8", ...)."""
    from .lib import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    out = set()
    for part in info.replace("|", "\n").splitlines():
        name, _, value = part.partition("=")
        name = name.split(":")[-1].strip()
        if value.strip() == "1":
            out.add(name)
    return out


def cpu_flags() -> set[str] | None:
    """The CPU's flags from /proc/cpuinfo; None where there is none (macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return None
