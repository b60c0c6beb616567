"""Test-only, on every child's PYTHONPATH (conftest.py).

The unit tier (SPEC_CLI_TEST_NO_LLAMA=1): `import llama_cpp` fails in every
process a unit test starts, as in the test process itself.

The tests' stand-in for a llama.cpp build whose kernels fault on this CPU
(conftest.py puts this folder on every child's PYTHONPATH).  With
SPEC_CLI_TEST_FAULT=extra-bufts (AMX faults) or =repack (repacking too),
cpucheck's child, `python -m spec_cli.llama.cpuchild MODEL MODE`, dies of a
real SIGILL in the modes such a build dies in; nothing else changes."""

import os
import sys



class _NoLlama:
    """A meta-path finder that refuses llama_cpp (and leaves no trace in sys.modules)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ImportError(f"{name} is out of reach in the unit tier")
        return None


if os.environ.get("SPEC_CLI_TEST_NO_LLAMA"):
    sys.meta_path.insert(0, _NoLlama)

_FAULTING = {"extra-bufts": ("all",), "repack": ("all", "repack")}
_fault = os.environ.get("SPEC_CLI_TEST_FAULT")
_argv = list(getattr(sys, "orig_argv", ()))
if _fault and "spec_cli.llama.cpuchild" in _argv:
    _rest = _argv[_argv.index("spec_cli.llama.cpuchild") + 1:]
    if (_rest[1] if len(_rest) > 1 else "all") in _FAULTING.get(_fault, ()):
        sys.path.insert(0, os.path.dirname(__file__))
        from faults import illegal_instruction
        illegal_instruction()
