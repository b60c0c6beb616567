"""One GGUF file with one llama.cpp context: load, close, sequences,
decode, rewind, catch up.

The context holds one sequence, or several (`LoadConfig.n_seq`, each with
a KV cache of its own: the server keeps editors apart from chats);
`use(seq)` picks the one that decodes.  It tracks the tokens held in that
sequence's KV cache (`tokens`), so callers can reuse a cached prefix and
roll back rejected positions.  Logits are read only for the rows asked
for, as numpy views: no `logits_all`, no n_ctx x n_vocab array.

What the model holds beside: its vocabulary (`vocab`, vocab.py), a
recurrent state's checkpoints (recurrent.py), the hidden-state tape and
MTP block of a target that drafts for itself (mtp.py); what it is, for
`models info` and the state files, is in facts.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core import sampling
from ..core.kernel import COMPILED, Kernel
from ..core.sampling import Candidates
from ..core.tokens import common_prefix
from ..errors import SpecError
from . import cores, facts
from .batch import BatchViews, DecodePick, LogitViews, Samplers
from .config import CANDIDATE_ROWS, LoadConfig
from .files import check_gguf
from .lib import DecodeTimer, llama_cpp
from .mtp import HiddenTape, MTPHead
from .kvcache import ContextFull, KVCache
from .vocab import Vocab
from .weights import load_weights, new_context, output_on_gpu

__all__ = ["Model", "LoadConfig", "ContextFull", "check_gguf", "common_prefix"]

class Model:
    """A loaded GGUF with its context, batch and KV-cache bookkeeping.

    `timer`: where decode time is counted (a pair shares one); a new one
    by default."""

    def __init__(self, path: str | Path, cfg: LoadConfig = LoadConfig(), *, timer: DecodeTimer | None = None):
        self.path, self.config = Path(path), cfg
        self.timer = timer or DecodeTimer()
        w = load_weights(self.path, cfg)
        self.ptr, self.bufts, self.devices = w.ptr, w.bufts, w.devices  # devices: where the layers went
        self.note = w.note  # a line for the user about how the model was loaded
        self.vocab = Vocab(self.ptr, self.path.name)
        self.n_vocab = self.vocab.n_vocab
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self.ptr)
        # some layers keep a recurrent state (Mamba, RWKV; hybrids such as
        # Qwen3.5, Granite 4.0-H, LFM2): a rewind cannot cut it, see truncate
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(self.ptr)
                              or llama_cpp.llama_model_is_hybrid(self.ptr))
        # rewinds done by going back to a checkpoint and reading tokens again, and by llama.cpp's own snapshots
        self.replays = self.rollbacks = 0
        self.n_threads = cores.threads(cfg.n_threads)
        try:
            c = new_context(self.ptr, cfg, self.n_threads, recurrent=self.recurrent, bufts=self.bufts,
                            name=self.path.name)
        except SpecError:
            self.ptr = None  # new_context freed the weights
            raise
        self.ctx, self.numerics, self.flash_attn_type = c.ctx, c.numerics, c.flash_attn_type  # (bench's peer: the same)
        self.kv = KVCache(self.ctx, cfg.n_seq)
        self.n_ctx = self.kv.n_ctx  # each sequence's
        self.n_rs = int(llama_cpp.llama_n_rs_seq(self.ctx)) if self.recurrent else 0
        self.n_batch = llama_cpp.llama_n_batch(self.ctx)  # llama.cpp may lower what was asked
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._fill = BatchViews(self._batch, self.n_batch)
        self._views = LogitViews(self.ctx, self.n_vocab)
        self._pick: DecodePick | None = None  # decode_choose's one call, made at its first use
        self.mtp_layers = int(llama_cpp.llama_model_n_layer_nextn(self.ptr))
        self.n_embd = int(llama_cpp.llama_model_n_embd(self.ptr))
        # the hidden state at each position of each sequence, for MTPHead
        self._tape = HiddenTape(self.ctx, self.n_ctx, self.n_embd) if cfg.mtp and self.mtp_layers else None
        self._mtp_head: MTPHead | None = None
        # rows as candidates: with candidates_k = k, decode(..., candidates=True)
        # gives each row's k + CANDIDATE_SPARE most likely tokens, chosen by
        # llama.cpp's top-k sampler inside its graph, instead of the whole
        # row; None: whole rows always
        self.candidates_k: int | None = None
        self.device_top_k = output_on_gpu(self.ptr, cfg)  # ...where that is cheap (the tests set it on a CPU too)
        self._samplers = Samplers(self.ctx, cfg.n_seq)
        self.seq = 0
        self.tokens: list[int] = self.kv.seqs[0]  # what the sequence's KV cache holds, position by position
        # set by probe.py: seconds per batch of n tokens (the cost model's prior), the exact cap
        self.curve: dict[int, float] | None = None
        self.verify_cap: int | None = None  # deterministic: the largest bitwise-exact batch
        self.costs = None  # the cost model learned on this model's steps (engine.py)
        self.learned = None  # each draft source's acceptance over this model's generations (engine.py)

    # -- lifecycle ---------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_mtp_head", None) is not None:
            self._mtp_head.close()
            self._mtp_head = None
        if getattr(self, "ctx", None):
            self._samplers.attach(None)
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = self._pick = None
        if getattr(self, "ptr", None):
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self):
        self.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- facts ---------------------------------------------------------------
    @property
    def deterministic(self) -> bool:
        return self.config.deterministic

    @property
    def size_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self.ptr))

    def fingerprint(self) -> str:
        """Identifies this file, build, placement and numerics, for caching
        what the probe measured."""
        return facts.fingerprint(self.path, self.config, self.numerics)

    def set_threads(self, n: int) -> None:
        """llama.cpp's threads for this model's contexts from now on (cores.Recount)."""
        self.n_threads = n
        llama_cpp.llama_set_n_threads(self.ctx, n, n)
        if self._mtp_head is not None:
            self._mtp_head.set_threads(n)

    # -- sequences -------------------------------------------------------------
    @property
    def n_seq(self) -> int:
        return len(self.kv.seqs)

    def held(self, seq: int) -> list[int]:
        """What sequence `seq`'s KV cache holds, position by position (a copy)."""
        return list(self.kv.seqs[seq])

    def use(self, seq: int) -> None:
        """Decode, rewind and reset sequence `seq` from now on; each keeps its
        own KV cache and `tokens`."""
        self.seq = seq
        self.tokens = self.kv.seqs[seq]

    # -- decoding ----------------------------------------------------------
    def decode(self, tokens: Sequence[int], *, logits_from: int | None = None,
               copy: bool = True, candidates: bool = False) -> np.ndarray | list[Candidates] | None:
        """Append `tokens` to the KV cache at positions len(self.tokens)...

        Returns float32 logits of shape (len(tokens) - logits_from, n_vocab)
        for the rows from index `logits_from` on, or None when
        `logits_from` is None.  Long inputs go in chunks of n_batch.
        With copy=False (one chunk) the rows are a view of llama.cpp's own
        buffer, valid until this model's next decode: a verify batch reads
        a few of them, so none is copied.  With `candidates` and
        `candidates_k` set, each row is a Candidates (sampling.py): its
        candidates_k + CANDIDATE_SPARE most likely tokens only.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        self.kv.room(self.seq, n)
        out = None
        for start in range(0, n, self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            first = None if logits_from is None else max(logits_from - start, 0)
            if first is not None and first >= len(chunk):
                first = None
            rows = self._decode_chunk(chunk, first, copy or n > self.n_batch, candidates)
            if rows is not None:
                out = rows if out is None else (out + rows if isinstance(rows, list)
                                                else np.concatenate([out, rows]))
        return out

    def _decode_chunk(self, chunk: Sequence[int], first: int | None, copy: bool,
                      candidates: bool = False) -> np.ndarray | list[Candidates] | None:
        if first is not None:  # the samplers this read wants: whole rows, or candidates
            k = (self.candidates_k if candidates and self.device_top_k and len(chunk) - first <= CANDIDATE_ROWS
                 else None)
            if k != self._samplers.k:
                self._attach(k)
        pos0 = self.kv.settled(self.seq)
        m = len(chunk)
        if self.recurrent and m - 1 > self.n_rs:  # llama.cpp's own snapshots cannot undo this batch
            self.kv.ckpt.save(self.seq, pos0)
        self._fill.set(chunk, pos0, self.seq, first)
        t0 = time.perf_counter()
        self.kv.begin([self.seq])  # until its tokens are counted in self.tokens
        rc = llama_cpp.llama_decode(self.ctx, self._batch)
        if first is not None:
            ptr = llama_cpp.llama_get_logits(self.ctx)  # waits for the device's work to end
        self.timer.seconds += time.perf_counter() - t0
        if rc != 0:
            raise self._failed(rc)
        self.kv.done(self.seq, chunk)
        if self._tape is not None:
            self._tape.keep(self.seq, pos0, m)
        if first is None:
            return None
        n_rows = m - first
        if self._samplers.k is not None:
            return [self._samplers.candidates(first + i, copy, self.path.name) for i in range(n_rows)]
        rows = self._views.rows(n_rows, ptr)
        return rows.copy() if copy else rows

    def decode_batch(self, parts: Sequence[tuple[int, Sequence[int]] | tuple[int, Sequence[int], bool]]
                     ) -> list[np.ndarray | None]:
        """Several sequences' tokens in one llama_decode: part (seq, tokens)
        appends `tokens` to sequence `seq` at its next positions, every
        token's row read (a verify batch: its last context token and its
        draft); part (seq, tokens, False) reads none (a prompt's chunk).
        Returns each part's rows, whole, as views of llama.cpp's buffer,
        valid until this model's next decode (None for a part without).
        The sequence in use (`use`) is left as it was."""
        parts = [(p[0], p[1], p[2] if len(p) > 2 else True) for p in parts]
        n = sum(len(tokens) for _, tokens, _ in parts)
        if n == 0 or n > self.n_batch:
            raise ValueError(f"a batch of {n} tokens (1 to {self.n_batch})")
        if self._samplers.k is not None:
            self._attach(None)  # whole rows: candidates are per sequence
        placed = []
        for seq, tokens, _ in parts:
            self.kv.room(seq, len(tokens))
        # in the order of their sequences: with a KV cache per sequence, llama.cpp
        # puts into one graph only sequences that follow each other (seq, seq + 1,
        # ... in the batch's order; llama_batch_allocr::split_equal), so four rows
        # of sequences 2, 0, 3, 1 take three passes over the weights (docs/results.md,
        # "Behind the code")
        order = sorted(range(len(parts)), key=lambda i: parts[i][0])
        for i in order:
            seq, tokens, rows = parts[i]
            pos0 = self.kv.settled(seq)
            if self.recurrent and len(tokens) - 1 > self.n_rs:  # as _decode_chunk
                self.kv.ckpt.save(seq, pos0)
            placed.append((seq, tokens, pos0, rows))
        self._fill.set_many(placed)
        n_rows = sum(len(tokens) for _, tokens, _, rows in placed if rows)
        t0 = time.perf_counter()
        self.kv.begin(seq for seq, _, _ in parts)
        rc = llama_cpp.llama_decode(self.ctx, self._batch)
        ptr = llama_cpp.llama_get_logits(self.ctx) if rc == 0 and n_rows else None
        self.timer.seconds += time.perf_counter() - t0
        if rc != 0:
            raise self._failed(rc)
        all_rows = self._views.rows(n_rows, ptr) if n_rows else None
        out: list[np.ndarray | None] = [None] * len(parts)
        first, b = 0, 0  # b: the batch's row, first: the logits' row
        for i, (seq, tokens, pos0, rows) in zip(order, placed):
            self.kv.done(seq, tokens)
            if self._tape is not None:  # every row's hidden state is kept (HiddenTape)
                self._tape.keep(seq, pos0, len(tokens), b)
            b += len(tokens)
            if rows:
                out[i] = all_rows[first:first + len(tokens)]
                first += len(tokens)
        return out

    def decode_choose(self, token: int, cfg: sampling.SamplingConfig, seed: int, pos: int,
                      confidence: bool = False, *, kernel: Kernel = COMPILED) -> tuple[int, float]:
        """Append `token` and choose the next one from its row: `decode([token],
        logits_from=0)`, then `sampling.choose` at output position `pos`.
        Where the compiled kernel is there and the row comes whole, both
        happen in one call to it (batch.DecodePick)."""
        if (not DecodePick.available or not kernel.available or self._tape is not None
                or (self.candidates_k is not None and self.device_top_k)):
            row = self.decode([token], logits_from=0, copy=False, candidates=True)[0]
            return sampling.choose(row, cfg, seed, pos, confidence=confidence, kernel=kernel)
        self.kv.room(self.seq, 1)
        if self._samplers.k is not None:
            self._attach(None)
        pos0 = self.kv.settled(self.seq)
        if self._fill.seq != self.seq:
            self._fill.set([token], pos0, self.seq, 0)  # the batch's slots name this sequence
        if self._pick is None:
            self._pick = DecodePick(self.ctx, self._batch, self.n_vocab)
        self.kv.begin([self.seq])
        rc, spent, chosen, conf = self._pick(token, pos0, cfg, seed & sampling.MASK, pos, sampling.HEAD_CAP,
                                             confidence)
        self.timer.seconds += spent
        if rc != 0:
            raise self._failed(rc)
        self.kv.done(self.seq, [token])
        if chosen == -2:
            raise MemoryError("no memory for a token's candidates")
        if chosen >= 0:
            return chosen, conf if confidence else 1.0
        row = self.last_rows(1)[0]  # numpy's to decide (a NaN, a wide q)
        return sampling.choose(row, cfg, seed, pos, confidence=confidence, kernel=kernel)

    def _failed(self, rc: int) -> SpecError:
        return SpecError(f"llama_decode failed with code {rc} for {self.path.name}",
                         hint="The context may be full; try a larger --ctx.")

    def last_rows(self, n_rows: int) -> np.ndarray:
        """The last decode's logits rows, whole, as a view valid until the next decode."""
        return self._views.rows(n_rows)

    def _attach(self, k: int | None) -> None:
        """Top-k samplers in llama.cpp's graph (None: whole rows).  Where the
        backend cannot run them, rows stay whole (candidates_k is cleared)."""
        if not self._samplers.attach(k):
            self.candidates_k = None

    # -- the target's own MTP block ------------------------------------------
    def hidden(self, start: int, end: int) -> np.ndarray:
        """The hidden states (what the LM head reads) at positions
        start..end-1 of the sequence in use, kept where the model was loaded
        with LoadConfig.mtp; a view, valid until the next decode there."""
        if self._tape is None:
            raise ValueError("hidden states are kept only for a model loaded with LoadConfig(mtp=True)")
        assert 0 <= start <= end <= len(self.tokens)
        return self._tape.read(self.seq, start, end)

    def mtp_head(self) -> MTPHead:
        """The file's multi-token-prediction block, in a context of its own
        (made once)."""
        if self._mtp_head is None:
            if self._tape is None:  # the pair's loader says so to the user (proposers.registry.no_mtp)
                raise ValueError("an MTP block needs a model with NextN layers loaded with LoadConfig(mtp=True)")
            self._mtp_head = MTPHead(self)
        return self._mtp_head

    # -- rewinding -----------------------------------------------------------
    def truncate(self, n: int) -> None:
        """Drop KV entries from position n on.  A recurrent state cannot be
        cut: llama.cpp rolls it back to a snapshot where the architecture
        keeps them (n_rs), else refuses, and then the model goes back to its
        checkpoint (or to empty) and reads the tokens up to n again."""
        if n >= len(self.tokens):
            return
        at = self.kv.ckpt.usable(self.seq, n)
        if self.kv.cut(self.seq, n):
            self.rollbacks += self.recurrent
            return
        if not self.recurrent:
            raise SpecError(f"llama.cpp could not rewind {self.path.name} to position {n}")
        self.replays += 1
        again = self.kv.back_to_checkpoint(self.seq, n, at)
        if again:
            self.decode(again)

    @property
    def copyable(self) -> bool:
        """Can one sequence's cache be copied to another (copy_seq)?"""
        return not self.recurrent and self._tape is None

    def copy_seq(self, src: int, dst: int) -> bool:
        """Sequence `dst`'s KV cache holds what `src`'s holds (llama.cpp copies
        the buffer at the next decode); False, nothing done, where a state
        lives elsewhere too (recurrent layers, the MTP tape)."""
        if src == dst or not self.copyable:
            return False
        self.kv.copy(src, dst)
        return True

    def swap_seq(self, a: int, b: int, spare: int) -> bool:
        """Sequences `a` and `b` exchange their KV caches through `spare`
        (left empty); False, nothing done, as copy_seq."""
        if len({a, b, spare}) < 3 or not self.copyable:
            return False
        self.copy_seq(a, spare)
        self.copy_seq(b, a)
        self.copy_seq(spare, b)
        self.kv.clear(spare)
        return True

    def reset(self) -> None:
        """Empty this sequence's KV cache (the others keep theirs)."""
        self.kv.clear(self.seq, whole=self.n_seq == 1)

    def catch_up(self, tokens: Sequence[int], *, logits_last: bool = False,
                 copy: bool = True, candidates: bool = False) -> int | np.ndarray | Candidates:
        """Make the KV cache hold exactly `tokens`, evaluating only what is
        not cached yet (the one rewind-and-extend helper).  Returns how many
        tokens were evaluated, or with `logits_last` the last token's logits
        (that token is then always evaluated)."""
        keep = common_prefix(self.tokens, tokens)
        if logits_last:
            keep = min(keep, len(tokens) - 1)
        self.truncate(keep)
        if len(tokens) > keep:
            rows = self.decode(list(tokens[keep:]), logits_from=len(tokens) - keep - 1 if logits_last else None,
                               copy=copy, candidates=candidates)
            if logits_last:
                return rows[0]
        return len(tokens) - keep
