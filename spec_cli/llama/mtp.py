"""A target's own multi-token-prediction (NextN) layers: the hidden states
the block reads beside each token (`HiddenTape`, kept by the target as it
decodes) and the block itself in a context of its own (`MTPHead`)."""

from __future__ import annotations

import ctypes
import time
from typing import Sequence

import numpy as np

from ..errors import SpecError
from .facts import context_params
from .lib import llama_cpp
from llama_cpp import llama_cpp_ext


class HiddenTape:
    """The target's hidden state (what its LM head reads) at every position
    of each sequence, for MTPHead: llama.cpp is asked for every row's, not
    only those whose logits are read."""

    def __init__(self, ctx, n_ctx: int, n_embd: int):
        self._ctx, self.n_ctx, self.n_embd = ctx, n_ctx, n_embd
        self._seqs: dict[int, np.ndarray] = {}
        llama_cpp_ext.llama_set_embeddings_nextn(ctx, True, False)  # every row, not only logits'

    def keep(self, seq: int, pos0: int, m: int, first: int = 0) -> None:
        """Keep the states of the `m` rows from batch row `first` on, which
        the last decode read at positions pos0... of `seq`."""
        tape = self._seqs.get(seq)
        if tape is None:
            tape = self._seqs[seq] = np.zeros((self.n_ctx, self.n_embd), np.float32)
        ptr = llama_cpp_ext.llama_get_embeddings_nextn(self._ctx)
        tape[pos0:pos0 + m] = np.ctypeslib.as_array(ptr, shape=(first + m, self.n_embd))[first:]

    def read(self, seq: int, start: int, end: int) -> np.ndarray:
        """Positions start..end-1 of `seq`; a view, valid until its next decode."""
        return self._seqs[seq][start:end]


class MTPHead:
    """A target's own multi-token-prediction (NextN) block, as Qwen3.5/3.6,
    GLM-4.5 and DeepSeek-V3 ship it: llama.cpp runs it in a context of its
    own (LLAMA_CONTEXT_TYPE_MTP) on the target's weights, with a KV cache of
    its own.  Its entry at position p reads token p beside a hidden state:
    the target's at p-1, where the target has read that far, else the
    block's own output at p-1 (a chain of draft tokens).  From there it
    predicts token p+1.  `tokens` tracks what each entry read, per
    sequence, as Model.tokens does.  Only the first block of a model with
    several drafts here (llama.cpp chains them only for Step-3.5)."""

    def __init__(self, target: "Model"):
        self.target, self._ext = target, llama_cpp_ext
        cparams = context_params(target.config, target.n_batch, target.n_threads)
        cparams.n_rs_seq = 0
        cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = target.ctx
        self._ctx = llama_cpp.llama_init_from_model(target.ptr, cparams)
        if not self._ctx:
            raise SpecError(f"llama.cpp could not make a context for {target.path.name}'s "
                            "multi-token-prediction layers", hint="Try a smaller --ctx.")
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)  # its output hidden, for a chain
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_batch, self.n_embd, self.n_vocab = target.n_batch, target.n_embd, target.n_vocab
        self._batch = llama_cpp.llama_batch_init(self.n_batch, self.n_embd, 1)
        self._ids = (llama_cpp.llama_token * self.n_batch)()
        self._batch.token = self._ids  # tokens and hidden states together
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(self.n_batch, self.n_embd))
        self._seqs: dict[int, list[int]] = {}
        self.per_token_s: float | None = None  # what a draft token costs (run.proposers.mtp)

    def set_threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self._ctx, n, n)

    @property
    def tokens(self) -> list[int]:
        return self._seqs.setdefault(self.target.seq, [])

    def read(self, tokens: Sequence[int], hidden: np.ndarray, *, logits: bool) -> np.ndarray | None:
        """Append entries for `tokens`, each beside its row of `hidden`
        (the state at the position before it).  With `logits`, returns the
        last entry's prediction of the next token (a view of llama.cpp's
        buffer, valid until the next read)."""
        n, seq = len(tokens), self.target.seq
        pos0 = len(self.tokens)
        llama_cpp.llama_memory_seq_rm(self._mem, seq, pos0, -1)
        b = self._batch
        for start in range(0, n, self.n_batch):
            m = min(self.n_batch, n - start)
            last = logits and start + m == n
            for i in range(m):
                self._ids[i] = tokens[start + i]
                b.pos[i] = pos0 + start + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq
                b.logits[i] = last and i == m - 1
            self._embd[:m] = hidden[start:start + m]
            b.n_tokens = m
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(self._ctx, b)
            if last:
                ptr = llama_cpp.llama_get_logits_ith(self._ctx, m - 1)
            self.target.timer.seconds += time.perf_counter() - t0
            if rc != 0:
                raise SpecError(f"llama_decode failed with code {rc} for the multi-token-prediction "
                                f"layers of {self.target.path.name}")
            self.tokens.extend(tokens[start:start + m])
        if not logits:
            return None
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def out_hidden(self) -> np.ndarray:
        """The block's own hidden state at the last entry read with logits
        (a copy), to read the next draft token beside."""
        ptr = self._ext.llama_get_embeddings_nextn_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()

    def truncate(self, n: int) -> None:
        if n < len(self.tokens):
            llama_cpp.llama_memory_seq_rm(self._mem, self.target.seq, n, -1)
            del self.tokens[n:]

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self._batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # ours: not llama.cpp's to free
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
