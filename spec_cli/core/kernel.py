"""The compiled per-row kernel (_fastpick.c, built by setup.py), as an object
the code asks rather than a module global: `available`, `choose` (one row),
`walk` (the coupled rule along a verify batch).  Each gives the same choice
as sampling.py's numpy path, or None / fewer rows where it leaves a row to
numpy (a q cut by top-p or min-p that keeps more than HEAD_CAP tokens, a
NaN).  sampling.py hands it its HEAD_CAP.  `COMPILED` is the kernel where it built; `NUMPY` is none at all
(numpy decides everything: the tests' and bench's comparison)."""

from __future__ import annotations

import numpy as np

try:
    from . import _fastpick
except ImportError:  # pragma: no cover - a build without a C compiler
    _fastpick = None

MASK = (1 << 64) - 1  # seeds are reduced mod 2^64 (sampling.gumbel's key)


class Kernel:
    def __init__(self, module=None):
        self._m = module

    @property
    def available(self) -> bool:
        return self._m is not None

    @property
    def threads(self) -> bool:
        """Whether a verify batch's rows are read in threads (built with OpenMP)."""
        return bool(getattr(self._m, "OPENMP", 0))

    def note(self) -> str:
        """What makes the choices, for bench's header."""
        if self._m is None:
            return "numpy (no compiled kernel: more host time per token; reinstall with a C compiler)"
        return "compiled" + (", rows in threads" if self.threads else "")

    def choose(self, row: np.ndarray, cfg, seed: int, pos: int, confidence: bool, ids: np.ndarray | None,
               head_cap: int) -> tuple[int, float] | None:
        """(token, confidence) for a float32 row (or candidates' values with
        their int64 ids, ascending), or None: numpy's to decide (a q of more
        than `head_cap` tokens after top-p or min-p, a NaN)."""
        if self._m is None:
            return None
        return self._m.choose(row, cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p, seed & MASK, pos,
                              head_cap, confidence, ids)

    def walk(self, rows: np.ndarray, draft, cfg, seed: int, pos0: int, threads: int, head_cap: int) -> list[int]:
        """The coupled rule's choices for rows 0, 1, ... of a float32 verify
        batch while the draft agrees, and the first that does not; fewer
        where a row is numpy's."""
        if self._m is None:
            return []
        return self._m.choose_rows(rows, draft, cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p, seed & MASK,
                                   pos0, head_cap, threads)


COMPILED = Kernel(_fastpick)
NUMPY = Kernel(None)
