"""Rewinding a recurrent state.  A KV cache is cut at any position; the
state of a recurrent layer (Mamba, RWKV; the hybrids Qwen3.5/3.6,
Granite 4.0-H, LFM2) cannot be, and llama.cpp's `llama_memory_seq_rm`
refuses.  llama.cpp keeps `n_rs` snapshots per sequence where the
architecture can (a rewind of up to that many tokens needs nothing here);
beyond that, `Checkpoints` keeps each sequence's recurrent state as it was
before the model's last batch of several tokens, so a rewind goes back to
it and reads the tokens up to the cut again (Model.truncate)."""

from __future__ import annotations

import ctypes

from .lib import llama_cpp

_FLAGS = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY  # the recurrent part only: attention KV is cut as any other


class Checkpoints:
    """One saved recurrent state per sequence of a context: (position, buffer, bytes used)."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._saved: dict[int, tuple[int, ctypes.Array, int]] = {}

    def save(self, seq: int, pos: int) -> None:
        """Keep sequence `seq`'s recurrent state at `pos`."""
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, seq, _FLAGS)
        old = self._saved.pop(seq, None)
        buf = old[1] if old is not None and len(old[1]) == size else (ctypes.c_uint8 * size)()  # reused
        got = llama_cpp.llama_state_seq_get_data_ext(self._ctx, buf, size, seq, _FLAGS)
        if got:
            self._saved[seq] = (pos, buf, got)

    def usable(self, seq: int, n: int) -> int | None:
        """The position of `seq`'s checkpoint if a rewind to `n` can start
        from it; a state past the cut is no state of what stays, and goes."""
        saved = self._saved.get(seq)
        if saved is not None and saved[0] > n:
            del self._saved[seq]
            return None
        return None if saved is None else saved[0]

    def restore(self, seq: int) -> bool:
        """Put `seq`'s recurrent state back to its checkpoint."""
        _, buf, size = self._saved[seq]
        return llama_cpp.llama_state_seq_set_data_ext(self._ctx, buf, size, seq, _FLAGS) > 0

    def drop(self, seq: int) -> None:
        self._saved.pop(seq, None)
