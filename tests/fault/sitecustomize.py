"""The tests' stand-in for a llama.cpp build whose kernels fault on this CPU
(conftest.py puts this folder on every child's PYTHONPATH).  With
SPEC_CLI_TEST_FAULT=extra-bufts (AMX faults) or =repack (repacking too),
cpucheck's child, `python -m spec_cli.llama.cpuchild MODEL MODE`, dies of a
real SIGILL in the modes such a build dies in; nothing else changes."""

import os
import sys

_FAULTING = {"extra-bufts": ("all",), "repack": ("all", "repack")}
_fault = os.environ.get("SPEC_CLI_TEST_FAULT")
_argv = list(getattr(sys, "orig_argv", ()))
if _fault and "spec_cli.llama.cpuchild" in _argv:
    _rest = _argv[_argv.index("spec_cli.llama.cpuchild") + 1:]
    if (_rest[1] if len(_rest) > 1 else "all") in _FAULTING.get(_fault, ()):
        sys.path.insert(0, os.path.dirname(__file__))
        from faults import illegal_instruction
        illegal_instruction()
