"""The compiled pieces: sampling's per-row kernel (spec_cli/core/_fastpick.c)
and the drafted token's decode-and-choose call that uses its core
(spec_cli/llama/_decodepick.c, through the capsule of core/_pick.h).

Everything else is in pyproject.toml.  Both are optional: where they do
not build (no C compiler), spec-cli makes the same choices in numpy, with
more host time per token.  The kernel is built with OpenMP where the
compiler takes -fopenmp (a verify batch's rows are then read in the
threads llama.cpp's CPU backend uses), else without.
"""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    def build_extension(self, ext):
        if self.compiler.compiler_type == "unix" and ext.name.endswith("_fastpick"):
            compile_args, link_args = list(ext.extra_compile_args), list(ext.extra_link_args)
            ext.extra_compile_args, ext.extra_link_args = compile_args + ["-fopenmp"], link_args + ["-fopenmp"]
            try:
                return super().build_extension(ext)
            except Exception as e:  # no OpenMP here (Apple's clang without libomp): without it
                print(f"building {ext.name} without OpenMP: {e}", file=sys.stderr)
                ext.extra_compile_args, ext.extra_link_args = compile_args, link_args
        return super().build_extension(ext)


LIBM = [] if sys.platform == "win32" else ["m"]
setup(cmdclass={"build_ext": BuildExt}, ext_modules=[
    Extension("spec_cli.core._fastpick", ["spec_cli/core/_fastpick.c"], depends=["spec_cli/core/_pick.h"],
              libraries=LIBM, optional=True),
    Extension("spec_cli.llama._decodepick", ["spec_cli/llama/_decodepick.c"], include_dirs=["spec_cli/core"],
              depends=["spec_cli/core/_pick.h"], libraries=LIBM, optional=True),
])
