"""The sequences of one llama.cpp context's KV cache: what each holds,
position by position, and the cuts, copies and clears that keep that
record true (Model decodes; this keeps the books).

A decode may be cut short (Ctrl-C between llama.cpp's ubatches) after
some of its tokens reached the cache: a sequence is `unsure` from the
start of a decode until its tokens are counted, and `settled` removes
whatever such a decode left behind before the next one.  A recurrent
state cannot be cut (`cut` returns False, recurrent.py's `Checkpoints`
and Model.truncate take it from there)."""

from __future__ import annotations

from typing import Iterable, Sequence

from ..errors import SpecError
from .lib import llama_cpp
from .recurrent import Checkpoints


class ContextFull(SpecError):
    def __init__(self, need: int, n_ctx: int):
        super().__init__(f"the context is full ({need} tokens needed, {n_ctx} available)",
                         hint="Use a larger --ctx, or a shorter prompt.")
        self.need, self.n_ctx = need, n_ctx


class KVCache:
    """`seqs[s]`: the tokens sequence s's cache holds; `ckpt`: each
    sequence's saved recurrent state (recurrent models only use it);
    `n_ctx`: each sequence's room."""

    def __init__(self, ctx, n_seq: int):
        self.n_ctx = llama_cpp.llama_n_ctx(ctx) // n_seq
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.ckpt = Checkpoints(ctx)
        self.seqs: list[list[int]] = [[] for _ in range(n_seq)]
        self._unsure: set[int] = set()  # sequences whose caches may hold more than their tokens

    def room(self, seq: int, n: int) -> None:
        """Raise ContextFull unless `seq` has room for n more tokens."""
        if len(self.seqs[seq]) + n > self.n_ctx:
            raise ContextFull(len(self.seqs[seq]) + n, self.n_ctx)

    def settled(self, seq: int) -> int:
        """Sequence `seq`'s next position, its cache made to hold exactly
        its tokens first."""
        pos0 = len(self.seqs[seq])
        if seq in self._unsure:
            llama_cpp.llama_memory_seq_rm(self._mem, seq, pos0, -1)
        return pos0

    def begin(self, seqs: Iterable[int]) -> None:
        """A decode into these sequences starts: unsure until `done`."""
        self._unsure.update(seqs)

    def done(self, seq: int, tokens: Sequence[int]) -> None:
        """The decode put `tokens` at `seq`'s next positions."""
        self.seqs[seq].extend(tokens)
        self._unsure.discard(seq)

    def cut(self, seq: int, n: int) -> bool:
        """Drop `seq`'s entries from position n on; False (nothing cut)
        where llama.cpp refuses (a recurrent state without a snapshot
        there)."""
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq, n, -1):
            return False
        del self.seqs[seq][n:]
        return True

    def back_to_checkpoint(self, seq: int, n: int, at: int | None) -> list[int]:
        """Where `cut` could not reach n: `seq`'s recurrent state goes back
        to its checkpoint at `at` (None: none usable), or to empty; returns
        the tokens to read again to reach n."""
        held = self.seqs[seq]
        if at is not None and self.ckpt.restore(seq):
            again = held[at:n]
            if self.cut(seq, at):
                return again
        again = held[:n]
        self.clear(seq)  # the whole sequence always goes
        return again

    def clear(self, seq: int, *, whole: bool = False) -> None:
        """Empty sequence `seq` (with `whole`, every sequence's cache:
        llama.cpp's faster clear, for a context of one sequence)."""
        if whole:
            llama_cpp.llama_memory_clear(self._mem, True)
        else:
            llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
        self.seqs[seq].clear()
        self.ckpt.drop(seq)

    def copy(self, src: int, dst: int) -> None:
        """`dst` holds what `src` holds (`src` keeps it too); llama.cpp
        copies the buffer at the next decode."""
        self.settled(src)
        llama_cpp.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
        self.seqs[dst][:] = self.seqs[src]
        self._unsure.discard(dst)
        self.ckpt.drop(dst)
