"""What a decode reads and writes besides the KV cache: the `llama_batch`
filled through numpy views (`BatchViews`), the logits it leaves read as
numpy views (`LogitViews`), and the top-k samplers llama.cpp runs inside
its graph so that a row comes as its candidates only (`Samplers`, read
back as sampling.Candidates)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ..core.sampling import Candidates
from ..errors import SpecError
from .config import CANDIDATE_SPARE
from .lib import function_address, llama_cpp

try:  # llama_decode and the kernel's choice in one call (_decodepick.c); absent without a C compiler
    from . import _decodepick
except ImportError:  # pragma: no cover - a build without the kernel
    _decodepick = None


class BatchViews:
    """A llama_batch's arrays as numpy views, filled a slice at a time (a
    ctypes store per field and token cost a verify batch of 17 ~0.1 ms)."""

    def __init__(self, batch, n: int):
        self.batch, self.n = batch, n
        self.token = np.ctypeslib.as_array(batch.token, shape=(n,))
        self.pos = np.ctypeslib.as_array(batch.pos, shape=(n,))
        self.logits = np.ctypeslib.as_array(batch.logits, shape=(n,))
        np.ctypeslib.as_array(batch.n_seq_id, shape=(n,))[:] = 1
        self.seq = None  # the sequence every slot's seq_id names

    def set(self, chunk: Sequence[int], pos0: int, seq: int, first: int | None) -> None:
        """Tokens `chunk` at positions pos0..., in sequence `seq`, logits
        from index `first` on (None: none)."""
        m = len(chunk)
        if seq != self.seq:  # once per change of sequence (a server's editor and chat)
            for i in range(self.n):
                self.batch.seq_id[i][0] = seq
            self.seq = seq
        self.batch.n_tokens = m
        if m == 1:  # a drafted token: element stores are the cheapest
            self.token[0], self.pos[0], self.logits[0] = chunk[0], pos0, first == 0
            return
        self.token[:m] = chunk
        self.pos[:m] = range(pos0, pos0 + m)
        self.logits[:m] = 0
        if first is not None:
            self.logits[first:m] = 1


    def set_many(self, parts: Sequence[tuple[int, Sequence[int], int, bool]]) -> None:
        """Several sequences in one batch: part (seq, tokens, pos0, rows)
        puts its tokens at positions pos0... of `seq`, with every token's
        logits asked for where `rows` (a verify batch), none where not (a
        prompt being read)."""
        i = 0
        for seq, tokens, pos0, rows in parts:
            m = len(tokens)
            self.token[i:i + m] = tokens
            self.pos[i:i + m] = range(pos0, pos0 + m)
            self.logits[i:i + m] = rows
            for j in range(i, i + m):
                self.batch.seq_id[j][0] = seq
            i += m
        self.batch.n_tokens = i
        self.seq = None  # the slots name several sequences now


class DecodePick:
    """One token decoded and the next chosen from its whole row in one call
    to the compiled kernel (_decodepick.c): right after a decode each
    Python step costs the host several us (its caches hold the weights)."""

    available = _decodepick is not None

    def __init__(self, ctx, batch, n_vocab: int):
        self._entry = (function_address("llama_decode"), function_address("llama_get_logits"),
                       ctypes.cast(ctx, ctypes.c_void_p).value, ctypes.addressof(batch), n_vocab)

    def __call__(self, token: int, pos0: int, cfg, seed: int, pos: int, head_cap: int,
                 confidence: bool) -> tuple[int, float, int, float]:
        """(llama_decode's code, seconds it took, the chosen token or -1
        where numpy must decide or -2 out of memory, its confidence)."""
        return _decodepick.decode_choose(*self._entry, token, pos0, cfg.temperature, cfg.top_k, cfg.top_p,
                                         cfg.min_p, seed, pos, head_cap, confidence)


class LogitViews:
    """llama.cpp's logits buffer as n_rows rows of n_vocab, a view made
    once per address and shape: right after a decode, making one costs the
    host far more than looking it up (its caches hold the weights)."""

    def __init__(self, ctx, n_vocab: int):
        self._ctx, self._n_vocab = ctx, n_vocab
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def rows(self, n_rows: int, ptr=None) -> np.ndarray:
        """The last decode's n_rows rows (`ptr`: llama_get_logits's answer,
        where the caller has it already)."""
        ptr = llama_cpp.llama_get_logits(self._ctx) if ptr is None else ptr
        key = (ctypes.cast(ptr, ctypes.c_void_p).value, n_rows)
        rows = self._views.get(key)
        if rows is None:
            if len(self._views) >= 64:  # the buffer moved (llama.cpp grew it): forget the old views
                self._views.clear()
            rows = np.ctypeslib.as_array(ptr, shape=(n_rows * self._n_vocab,)).reshape(n_rows, self._n_vocab)
            self._views[key] = rows
        return rows


class Samplers:
    """A top-(k + CANDIDATE_SPARE) sampler attached to every sequence of a
    context, or none.  A chain is attached once only (llama.cpp refuses one
    twice), so each change of k makes new ones."""

    def __init__(self, ctx, n_seq: int):
        self._ctx, self._n_seq = ctx, n_seq
        self._chains: list = []
        self.k: int | None = None  # the k of the samplers attached now

    def attach(self, k: int | None) -> bool:
        """Attach top-k samplers (None: detach); False where the backend
        cannot run them (then none is attached)."""
        for seq in range(self._n_seq):
            llama_cpp.llama_set_sampler(self._ctx, seq, None)
        for chain in self._chains:
            llama_cpp.llama_sampler_free(chain)
        self._chains, self.k = [], None
        if k is None:
            return True
        for seq in range(self._n_seq):
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(k + CANDIDATE_SPARE))
            self._chains.append(chain)
            if not llama_cpp.llama_set_sampler(self._ctx, seq, chain):
                self.attach(None)
                return False
        self.k = k
        return True

    def candidates(self, i: int, copy: bool, name: str) -> Candidates:
        """Batch row i's candidates, as the sampler left them (views of
        llama.cpp's buffers unless copied)."""
        n = llama_cpp.llama_get_sampled_candidates_count_ith(self._ctx, i)
        ids = llama_cpp.llama_get_sampled_candidates_ith(self._ctx, i)
        vals = llama_cpp.llama_get_sampled_logits_ith(self._ctx, i)
        if n <= 0 or not ids or not vals:
            raise SpecError(f"llama.cpp's sampler left no candidates for a row of {name}")
        ids = np.frombuffer((ctypes.c_int32 * n).from_address(ctypes.addressof(ids.contents)), dtype=np.int32)
        vals = np.frombuffer((ctypes.c_float * n).from_address(ctypes.addressof(vals.contents)), dtype=np.float32)
        return Candidates(ids.copy(), vals.copy()) if copy else Candidates(ids, vals)
