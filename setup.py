"""The one compiled piece: sampling's per-row kernel (spec_cli/core/_fastpick.c).

Everything else is in pyproject.toml.  The kernel is optional: where it
does not build (no C compiler), spec-cli makes the same choices in numpy,
with more host time per token.
"""

import sys

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "spec_cli.core._fastpick",
    ["spec_cli/core/_fastpick.c"],
    libraries=[] if sys.platform == "win32" else ["m"],
    optional=True,
)])
