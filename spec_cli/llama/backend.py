"""llama.cpp through llama-cpp-python's low-level API.  The only module that
imports `llama_cpp`.

One `Model` is one GGUF file with one context.  The context holds one
sequence, or several (`LoadConfig.n_seq`, each with a KV cache of its own:
the server keeps editors apart from chats); `use(seq)` picks the one that
decodes.  It tracks the tokens held in that sequence's KV cache
(`tokens`), so callers can reuse a cached prefix and roll back rejected
positions.  Logits are read only for the rows
asked for, copied into numpy: no `logits_all`, no n_ctx x n_vocab array.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

import llama_cpp

from ..core import sampling
from ..core.sampling import Candidates
from . import bufts, cores
from ..errors import SpecError

_GGUF_MAGIC = b"GGUF"
_Q8_0 = 8  # enum ggml_type
# rows read as candidates (Model.candidates_k): at most this many a batch
# (a verify batch of draft_max + 1), each its k + CANDIDATE_SPARE most likely
# tokens (the spare keeps ties at the k-th logit as the whole row keeps them)
CANDIDATE_ROWS = 64
CANDIDATE_SPARE = 8


@dataclass(frozen=True)
class LoadConfig:
    n_ctx: int = 4096
    n_threads: int = 0          # 0 = the cores other programs leave free (cores.py)
    gpu_layers: int = 0         # -1 = all
    n_batch: int = 512
    # False: llama.cpp's fast path for the backend (its own choices of flash
    # attention, KV type and CPU weight repacking); a batch's logits then
    # differ from one-token decodes in the last bits, as in every engine.
    # True: flash attention over a Q8_0 KV cache (see Model.__init__), and
    # verification batches capped where they stay bitwise one-token logits
    # (probe.py).  CPU weight repacking stays on: it rounds batches of 4+
    # tokens differently, which the cap excludes, and turning it off costs
    # a fifth of single-token speed here.
    deterministic: bool = False
    # ggml-cpu's extra buffer types, one of bufts.MODES ("all": AMX and
    # weight repacking as llama.cpp chooses, "repack": repacking without
    # AMX, "none"); None: as cpucheck.py decides for this build and CPU
    extra_bufts: str | None = None
    # sequences in the context, each with its own KV cache of n_ctx tokens
    # (llama.cpp's non-unified cache: a sequence attends over its own cells only)
    n_seq: int = 1
    # recurrent states llama.cpp keeps per sequence to roll back to (its
    # n_rs_seq; only some architectures can), so a rewind of up to this many
    # tokens needs no checkpoint: a verify batch of draft_max + 1 tokens
    rs_snapshots: int = 16
    # load the file's multi-token-prediction (NextN) layers too and keep the
    # target's hidden state at every position, for MTPHead (a file without
    # such layers loads as usual)
    mtp: bool = False


# -- logging: llama.cpp talks a lot on stderr; keep errors only -------------

def _log(level: int, text: bytes, _user) -> None:
    if level == 4 or os.environ.get("SPEC_CLI_DEBUG"):  # 4 = GGML_LOG_LEVEL_ERROR
        sys.stderr.write(text.decode("utf-8", "replace"))


_LOG_CB = llama_cpp.llama_log_callback(_log)  # keep a reference: C holds it
llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()


def _context_params(cfg: LoadConfig, n_batch: int, threads: int):
    """A context's parameters as `cfg` asks: n_ctx tokens for each of its
    sequences (each a KV cache of its own), batches of n_batch, and the
    deterministic numerics."""
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = cfg.n_ctx * cfg.n_seq
    if cfg.n_seq > 1:
        cparams.n_seq_max = cfg.n_seq
        cparams.kv_unified = False
    cparams.n_batch = cparams.n_ubatch = n_batch
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.no_perf = True
    if cfg.deterministic:
        # Flash attention over a Q8_0 KV cache: llama.cpp's CPU kernel
        # then treats every query row alike whatever the batch, whereas
        # over an F16 cache it splits a single query's KV across threads
        # (from 512 entries on) and rounds differently from a batch.
        cparams.flash_attn_type = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED
        cparams.type_k = cparams.type_v = _Q8_0
    return cparams


def check_gguf(path: Path) -> None:
    """Fail clearly on a missing or non-GGUF file before llama.cpp sees it."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise SpecError(f"cannot read model file {path}: {e.strerror}") from e
    if magic != _GGUF_MAGIC:
        raise SpecError(f"{path} is not a GGUF file",
                        hint="spec-cli runs llama.cpp GGUF models; convert or download a .gguf.")


class _BatchViews:
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


class Model:
    """A loaded GGUF with its context, batch and KV-cache bookkeeping."""

    def __init__(self, path: str | Path, cfg: LoadConfig = LoadConfig()):
        self.path = Path(path)
        self._cfg = cfg
        check_gguf(self.path)
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = cfg.gpu_layers if cfg.gpu_layers >= 0 else 1_000_000
        mparams.load_mtp = cfg.mtp
        self.note = None  # a line for the user about how the model was loaded
        self.bufts = cfg.extra_bufts
        if self.bufts is None:
            from .cpucheck import verdict
            decided = verdict(self.path)
            self.bufts, self.note = decided.bufts, decided.note
        overrides = bufts.apply(mparams, self.bufts, self.path)
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        del overrides
        if not self._model:
            raise SpecError(f"llama.cpp could not load {self.path}",
                            hint="The file may be truncated or of an architecture this "
                                 "llama.cpp build does not know; set SPEC_CLI_DEBUG=1 to see why.")
        release_file_pages(self.path)
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        # some layers keep a recurrent state (Mamba, RWKV; hybrids such as
        # Qwen3.5, Granite 4.0-H, LFM2): a rewind cannot cut it, see truncate
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(self._model)
                              or llama_cpp.llama_model_is_hybrid(self._model))
        # seq -> (position, a buffer holding the recurrent state there, its bytes used)
        self._ckpt: dict[int, tuple[int, ctypes.Array, int]] = {}
        self.replays = 0    # rewinds done by going back to a checkpoint and reading tokens again
        self.rollbacks = 0  # rewinds of a recurrent state done by llama.cpp's own snapshots

        self.n_threads = cores.threads(cfg.n_threads)
        cparams = _context_params(cfg, cfg.n_batch, self.n_threads)
        if self.recurrent:
            cparams.n_rs_seq = cfg.rs_snapshots  # llama.cpp sets 0 where the architecture cannot
        # a verify batch's rows with a backend sampler attached (candidates_k)
        cparams.n_outputs_max_per_seq = CANDIDATE_ROWS
        self.numerics = numerics(cparams, self.bufts)
        self.flash_attn_type = int(cparams.flash_attn_type)
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            self._model = None
            raise SpecError(f"llama.cpp could not create a context of {cfg.n_ctx} tokens "
                            f"for {self.path.name}",
                            hint="Try a smaller --ctx, or fewer GPU layers.")
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx) // cfg.n_seq  # each sequence's
        self.n_rs = int(llama_cpp.llama_n_rs_seq(self._ctx)) if self.recurrent else 0
        self.n_batch = llama_cpp.llama_n_batch(self._ctx)  # llama.cpp may lower what was asked
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._fill = _BatchViews(self._batch, self.n_batch)
        self._rows: dict[tuple[int, int], np.ndarray] = {}  # (address, rows) -> a view of llama.cpp's logits
        self._entry: tuple | None = None  # what decode_choose hands the kernel: llama.cpp's functions, ctx, batch
        self._unsure: set[int] = set()  # sequences whose caches may hold more than their tokens
        self.mtp_layers = int(llama_cpp.llama_model_n_layer_nextn(self._model))
        self.n_embd = int(llama_cpp.llama_model_n_embd(self._model))
        # seq -> the hidden state (before the LM head) at each position, for MTPHead
        self._hidden: dict[int, np.ndarray] | None = None
        if cfg.mtp and self.mtp_layers:
            from llama_cpp import llama_cpp_ext
            llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, False)  # every row, not only logits'
            self._hidden = {}
        self._mtp_head: "MTPHead | None" = None
        # rows as candidates: with candidates_k = k, decode(..., candidates=True)
        # gives each row's k + CANDIDATE_SPARE most likely tokens, chosen by
        # llama.cpp's top-k sampler inside its graph, instead of the whole
        # row; None: whole rows always
        self.candidates_k: int | None = None
        # ...where the output layer runs on a GPU: there the graph's top-k is
        # cheap and saves copying whole rows.  On a CPU it costs more than
        # reading the rows (ggml sorts each row: measured +30-45 ms on a
        # 17-row verify batch and +0.8-1.5 ms a token on 2 cores, against
        # 0.2 ms of host time saved a row), so rows stay whole there
        # unless this is set (the tests do, to check the path)
        n_layer = int(llama_cpp.llama_model_n_layer(self._model))
        self.device_top_k = bool(llama_cpp.llama_supports_gpu_offload()) and (
            cfg.gpu_layers < 0 or cfg.gpu_layers > n_layer)
        self._sampler_k: int | None = None  # the k of the samplers attached now
        self._samplers: list = []
        self._piece = ctypes.create_string_buffer(256)
        self._seqs: list[list[int]] = [[] for _ in range(cfg.n_seq)]
        self.seq = 0
        self.tokens: list[int] = self._seqs[0]  # what the sequence's KV cache holds, position by position
        # set by probe.py: seconds per batch of n tokens (the cost model's
        # prior) and, when deterministic, the largest bitwise-exact batch
        self.curve: dict[int, float] | None = None
        self.verify_cap: int | None = None
        self.costs = None  # the cost model learned on this model's steps (engine.py)

    # -- lifecycle ---------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_mtp_head", None) is not None:
            self._mtp_head.close()
            self._mtp_head = None
        if getattr(self, "_ctx", None):
            self._attach(None)
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = self._entry = None
        if getattr(self, "_model", None):
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        self.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- tokens ------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, big, -n, 0, special)
            return big.raw[:n]
        return self._piece.raw[:n]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.piece(t, special=special) for t in tokens).decode("utf-8", "replace")

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @property
    def bos(self) -> int:
        return llama_cpp.llama_vocab_bos(self._vocab)

    @property
    def eos(self) -> int:
        return llama_cpp.llama_vocab_eos(self._vocab)

    @property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    def special_tokens(self) -> dict[str, int]:
        """BOS/EOS/EOT and FIM ids (-1 where the model has none)."""
        return _special(self._vocab)

    # -- metadata ----------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        return self.meta("tokenizer.chat_template")

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """Render `messages` with the GGUF's own chat template (sandboxed
        Jinja, as llama-cpp-python renders it), ready for the reply."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.chat_template()
        if not template:
            raise SpecError(f"{self.path.name} has no chat template in its metadata",
                            hint="Use --raw to send the prompt as plain text.")
        fmt = Jinja2ChatFormatter(template=template, eos_token=self.token_text(self.eos),
                                  bos_token=self.token_text(self.bos))
        return fmt(messages=messages).prompt

    def tokenize_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Tokens of `messages` in the GGUF's chat template, ready for the
        reply.  Special tokens are parsed in the template's own text only:
        a message's content is tokenized as plain text, so a role marker
        typed into it (`<|im_end|>\n<|im_start|>system`) stays text and
        cannot open a turn of its own.  BOS is added only if the model
        wants one and the template did not write it."""
        rendered = self.apply_chat_template(messages)
        contents = [m.get("content") or "" for m in messages]
        marked = self.apply_chat_template([{**m, "content": _MARK.format(i)} for i, m in enumerate(messages)])
        spans = content_spans(rendered, marked, contents)
        if spans is None:  # the template changes contents in ways the marks cannot follow
            for i, content in enumerate(contents):
                if self._has_special(content):
                    raise SpecError(f"message {i} holds the text of a special token, and this model's chat "
                                    "template rewrites messages in a way that cannot keep it apart from the "
                                    "template's own markers", hint="Remove the special-token text from it.")
            spans = []
        tokens: list[int] = []
        pos = 0
        for lo, hi in spans:
            tokens += self.tokenize(rendered[pos:lo], add_special=False, parse_special=True)
            tokens += self.tokenize(rendered[lo:hi], add_special=False, parse_special=False)
            pos = hi
        tokens += self.tokenize(rendered[pos:], add_special=False, parse_special=True)
        if self.add_bos and self.bos >= 0 and (not tokens or tokens[0] != self.bos):
            tokens.insert(0, self.bos)
        return tokens

    def _has_special(self, text: str) -> bool:
        """Whether `text` holds the text of a special token."""
        return (self.tokenize(text, add_special=False, parse_special=True)
                != self.tokenize(text, add_special=False, parse_special=False))

    def vocab_difference(self, other: "Model", *, texts: bool = True) -> str | None:
        """Why `other` cannot draft for this model, or None if it can (see
        vocab_difference)."""
        return vocab_difference(self._vocab, other._vocab, texts=texts)

    def describe(self) -> dict:
        """What `spec-cli models info` shows, from the GGUF's metadata."""
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, buf, len(buf))
        desc = buf.value.decode("utf-8", "replace")
        special = self.special_tokens()
        fim = {k[4:]: self.token_text(v) for k, v in special.items() if k.startswith("fim_") and v >= 0}
        if "pre" not in fim:
            fim = {}  # repository/file separators alone (SmolLM2's) do not make fill-in-the-middle
        return {
            "file": str(self.path),
            "name": self.meta("general.name"),
            "architecture": self.meta("general.architecture"),
            "description": desc,
            "parameters": self.n_params,
            "quantization": desc.split(" ", 2)[2] if desc.count(" ") >= 2 else None,
            "size_bytes": self.size_bytes,
            "layers": int(llama_cpp.llama_model_n_layer(self._model)),
            "vocab_size": self.n_vocab,
            "tokenizer": self.meta("tokenizer.ggml.model"),
            "tokenizer_pre": self.meta("tokenizer.ggml.pre"),
            "trained_context": self.n_ctx_train,
            "chat_template": bool(self.chat_template()),
            "bos": self.token_text(special["bos"]) if special["bos"] >= 0 else None,
            "eos": self.token_text(special["eos"]) if special["eos"] >= 0 else None,
            "fim_tokens": fim,
            # how a rewind is done (see truncate): a KV cache is cut; a recurrent state is rolled
            # back by llama.cpp's snapshots where the architecture keeps them, else read again
            "memory": ("hybrid (attention and recurrent layers)" if llama_cpp.llama_model_is_hybrid(self._model)
                       else "recurrent" if llama_cpp.llama_model_is_recurrent(self._model) else "KV cache"),
            "recurrent_rollback": (("snapshots" if self.n_rs else "checkpoint and read again")
                                   if self.recurrent else None),
            # multi-token-prediction (NextN) layers in the file: --proposer mtp drafts with them
            "mtp_layers": self.mtp_layers,
        }

    @property
    def kv_bytes(self) -> int | None:
        """About what one sequence's KV cache of n_ctx tokens takes (None for
        a model with recurrent layers, whose memory is laid out otherwise)."""
        if self.recurrent:
            return None
        n_head = max(int(llama_cpp.llama_model_n_head(self._model)), 1)
        head_dim = int(llama_cpp.llama_model_n_embd(self._model)) // n_head
        per = 34 / 32 if self.deterministic else 2.0  # Q8_0 or F16 bytes per value
        return int(int(llama_cpp.llama_model_n_layer(self._model)) * self.n_ctx * 2
                   * int(llama_cpp.llama_model_n_head_kv(self._model)) * head_dim * per)

    @property
    def n_params(self) -> int:
        return int(llama_cpp.llama_model_n_params(self._model))

    @property
    def size_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self._model))

    # -- decoding ----------------------------------------------------------
    @property
    def n_seq(self) -> int:
        return len(self._seqs)

    def use(self, seq: int) -> None:
        """Decode, rewind and reset sequence `seq` from now on; each keeps its
        own KV cache and `tokens`."""
        self.seq = seq
        self.tokens = self._seqs[seq]

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
        if len(self.tokens) + n > self.n_ctx:
            raise ContextFull(len(self.tokens) + n, self.n_ctx)
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
        b = self._batch
        if first is not None:  # the samplers this read wants: whole rows, or candidates
            k = (self.candidates_k if candidates and self.device_top_k and len(chunk) - first <= CANDIDATE_ROWS
                 else None)
            if k != self._sampler_k:
                self._attach(k)
        pos0 = self._settled()
        m = len(chunk)
        if self.recurrent and m - 1 > self.n_rs:  # llama.cpp's own snapshots cannot undo this batch
            self._checkpoint(pos0)
        self._fill.set(chunk, pos0, self.seq, first)
        global _decode_s
        t0 = time.perf_counter()
        self._unsure.add(self.seq)  # until its tokens are counted in self.tokens
        rc = llama_cpp.llama_decode(self._ctx, b)
        if first is not None:
            ptr = llama_cpp.llama_get_logits(self._ctx)  # waits for the device's work to end
        _decode_s += time.perf_counter() - t0
        if rc != 0:
            raise self._failed(rc)
        self.tokens.extend(chunk)
        self._unsure.discard(self.seq)
        if self._hidden is not None:
            self._keep_hidden(pos0, m)
        if first is None:
            return None
        n_rows = m - first
        if self._sampler_k is not None:
            return [self._candidates(first + i, copy) for i in range(n_rows)]
        rows = self._logits(ptr, n_rows)
        return rows.copy() if copy else rows

    def decode_choose(self, token: int, cfg: "sampling.SamplingConfig", seed: int, pos: int,
                      confidence: bool = False) -> tuple[int, float]:
        """Append `token` and choose the next one from its row: `decode([token],
        logits_from=0)`, then `sampling.choice` at output position `pos`.  Where the
        compiled kernel is there and the row comes whole, both happen in one
        call to it: right after a decode each Python step costs the host
        several us (its caches hold the weights), ~0.1 ms a drafted token
        between llama.cpp's logits and the choice."""
        kernel = sampling._fastpick
        if (kernel is None or self._hidden is not None
                or (self.candidates_k is not None and self.device_top_k)):
            row = self.decode([token], logits_from=0, copy=False, candidates=True)[0]
            return sampling.choice(row, cfg, seed, pos, confidence)
        if len(self.tokens) + 1 > self.n_ctx:
            raise ContextFull(len(self.tokens) + 1, self.n_ctx)
        if self._sampler_k is not None:
            self._attach(None)
        pos0 = self._settled()
        if self._fill.seq != self.seq:
            self._fill.set([token], pos0, self.seq, 0)  # the batch's slots name this sequence
        if self._entry is None:
            lib = llama_cpp.llama_cpp._lib
            self._entry = (ctypes.cast(lib.llama_decode, ctypes.c_void_p).value,
                           ctypes.cast(lib.llama_get_logits, ctypes.c_void_p).value,
                           ctypes.cast(self._ctx, ctypes.c_void_p).value, ctypes.addressof(self._batch), self.n_vocab)
        global _decode_s
        self._unsure.add(self.seq)
        rc, spent, chosen, conf = kernel.decode_choose(
            *self._entry, token, pos0, cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p, seed & sampling.MASK,
            pos, sampling.HEAD_CAP, confidence)
        _decode_s += spent
        if rc != 0:
            raise self._failed(rc)
        self.tokens.append(token)
        self._unsure.discard(self.seq)
        if chosen == -2:
            raise MemoryError("no memory for a token's candidates")
        if chosen >= 0:
            return chosen, conf if confidence else 1.0
        row = self.last_rows(1)[0]  # numpy's to decide (a NaN, a wide q)
        return sampling.choice(row, cfg, seed, pos, confidence)

    def _settled(self) -> int:
        """The next position, the cache made to hold exactly `tokens` first:
        anything a decode cut short by Ctrl-C may have left behind goes."""
        pos0 = len(self.tokens)
        if self.seq in self._unsure:
            llama_cpp.llama_memory_seq_rm(self._mem, self.seq, pos0, -1)
        return pos0

    def _failed(self, rc: int) -> SpecError:
        return SpecError(f"llama_decode failed with code {rc} for {self.path.name}",
                         hint="The context may be full; try a larger --ctx.")

    def last_rows(self, n_rows: int) -> np.ndarray:
        """The logits rows the last decode asked for, whole rows (not
        candidates), as a view of llama.cpp's buffer: valid until the next
        decode."""
        return self._logits(llama_cpp.llama_get_logits(self._ctx), n_rows)

    def _logits(self, ptr, n_rows: int) -> np.ndarray:
        """llama.cpp's logits buffer as n_rows rows, a view made once per
        address and shape: right after a decode, making one costs the host
        ~0.1 ms (its caches hold the weights), looking it up a few us."""
        key = (ctypes.cast(ptr, ctypes.c_void_p).value, n_rows)
        rows = self._rows.get(key)
        if rows is None:
            if len(self._rows) >= 64:  # the buffer moved (llama.cpp grew it): forget the old views
                self._rows.clear()
            rows = np.ctypeslib.as_array(ptr, shape=(n_rows * self.n_vocab,)).reshape(n_rows, self.n_vocab)
            self._rows[key] = rows
        return rows

    def _candidates(self, i: int, copy: bool) -> Candidates:
        """Batch row i's candidates, as the sampler left them (views of
        llama.cpp's buffers unless copied)."""
        n = llama_cpp.llama_get_sampled_candidates_count_ith(self._ctx, i)
        ids = llama_cpp.llama_get_sampled_candidates_ith(self._ctx, i)
        vals = llama_cpp.llama_get_sampled_logits_ith(self._ctx, i)
        if n <= 0 or not ids or not vals:
            raise SpecError(f"llama.cpp's sampler left no candidates for a row of {self.path.name}")
        ids = np.frombuffer((ctypes.c_int32 * n).from_address(ctypes.addressof(ids.contents)), dtype=np.int32)
        vals = np.frombuffer((ctypes.c_float * n).from_address(ctypes.addressof(vals.contents)), dtype=np.float32)
        return Candidates(ids.copy(), vals.copy()) if copy else Candidates(ids, vals)

    def _attach(self, k: int | None) -> None:
        """Attach a top-(k + spare) sampler to every sequence (None: detach).
        A chain is attached once only (llama.cpp refuses one twice), so
        each change makes new ones.  Where the backend cannot run it, rows
        stay whole (candidates_k is cleared)."""
        for seq in range(self.n_seq):
            llama_cpp.llama_set_sampler(self._ctx, seq, None)
        for chain in self._samplers:
            llama_cpp.llama_sampler_free(chain)
        self._samplers, self._sampler_k = [], None
        if k is None:
            return
        for seq in range(self.n_seq):
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(k + CANDIDATE_SPARE))
            self._samplers.append(chain)
            if not llama_cpp.llama_set_sampler(self._ctx, seq, chain):
                self._attach(None)
                self.candidates_k = None
                return
        self._sampler_k = k

    def _keep_hidden(self, pos0: int, m: int) -> None:
        from llama_cpp import llama_cpp_ext

        tape = self._hidden.get(self.seq)
        if tape is None:
            tape = self._hidden[self.seq] = np.zeros((self.n_ctx, self.n_embd), np.float32)
        ptr = llama_cpp_ext.llama_get_embeddings_nextn(self._ctx)
        tape[pos0:pos0 + m] = np.ctypeslib.as_array(ptr, shape=(m, self.n_embd))

    def hidden(self, start: int, end: int) -> np.ndarray:
        """The hidden states (what the LM head reads) at positions
        start..end-1 of the sequence in use, kept where the model was loaded
        with LoadConfig.mtp; a view, valid until the next decode there."""
        if self._hidden is None:
            raise ValueError("hidden states are kept only for a model loaded with LoadConfig(mtp=True)")
        assert 0 <= start <= end <= len(self.tokens)
        return self._hidden[self.seq][start:end]

    def mtp_head(self) -> "MTPHead":
        """The file's multi-token-prediction block, in a context of its own
        (made once)."""
        if self._mtp_head is None:
            if self._hidden is None:  # the pair's loader says so to the user (runner._no_mtp)
                raise ValueError("an MTP block needs a model with NextN layers loaded with LoadConfig(mtp=True)")
            self._mtp_head = MTPHead(self)
        return self._mtp_head

    def fingerprint(self) -> str:
        """Identifies this file, build, placement and numerics, for caching
        what the probe measured."""
        return fingerprint(self.path, self._cfg, self.numerics)

    @property
    def deterministic(self) -> bool:
        return self._cfg.deterministic

    def truncate(self, n: int) -> None:
        """Drop KV entries from position n on.  A recurrent state cannot be
        cut: llama.cpp rolls it back to one of its snapshots where the
        architecture keeps them (n_rs, once per decode), else it refuses,
        and the refusal is never ignored: the model goes back to the state
        it saved before its last batch of several tokens and reads the
        tokens up to n again, or, before that checkpoint, reads them all
        again."""
        if n >= len(self.tokens):
            return
        ckpt = self._ckpt.get(self.seq)
        if ckpt is not None and ckpt[0] > n:
            del self._ckpt[self.seq]  # a state past the cut is no state of what stays
            ckpt = None
        if llama_cpp.llama_memory_seq_rm(self._mem, self.seq, n, -1):
            del self.tokens[n:]
            self.rollbacks += self.recurrent
            return
        if not self.recurrent:
            raise SpecError(f"llama.cpp could not rewind {self.path.name} to position {n}")
        self.replays += 1
        if ckpt is not None and self._restore(ckpt[1], ckpt[2]) \
                and llama_cpp.llama_memory_seq_rm(self._mem, self.seq, ckpt[0], -1):
            again = self.tokens[ckpt[0]:n]
            del self.tokens[ckpt[0]:]
        else:
            llama_cpp.llama_memory_seq_rm(self._mem, self.seq, -1, -1)  # the whole sequence always goes
            again = self.tokens[:n]
            self.tokens.clear()
        if again:
            self.decode(again)

    def _checkpoint(self, pos: int) -> None:
        """Keep this sequence's recurrent state at `pos` (only the recurrent
        part: a hybrid's attention KV is cut as any other)."""
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, self.seq, flags)
        old = self._ckpt.pop(self.seq, None)
        buf = old[1] if old is not None and len(old[1]) == size else (ctypes.c_uint8 * size)()  # reused
        got = llama_cpp.llama_state_seq_get_data_ext(self._ctx, buf, size, self.seq, flags)
        if got:
            self._ckpt[self.seq] = (pos, buf, got)

    def _restore(self, buf, size: int) -> bool:
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        return llama_cpp.llama_state_seq_set_data_ext(self._ctx, buf, size, self.seq, flags) > 0

    def reset(self) -> None:
        """Empty this sequence's KV cache (the others keep theirs)."""
        if self.n_seq == 1:
            llama_cpp.llama_memory_clear(self._mem, True)
        else:
            llama_cpp.llama_memory_seq_rm(self._mem, self.seq, -1, -1)
        self.tokens.clear()
        self._ckpt.pop(self.seq, None)

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

    def __init__(self, target: Model):
        from llama_cpp import llama_cpp_ext

        self.target, self._ext = target, llama_cpp_ext
        cparams = _context_params(target._cfg, target.n_batch, target.n_threads)
        cparams.n_rs_seq = 0
        cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = target._ctx
        self._ctx = llama_cpp.llama_init_from_model(target._model, cparams)
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
        self.per_token_s: float | None = None  # what a draft token costs (run.proposers.MTPDraft)

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
            global _decode_s
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(self._ctx, b)
            if last:
                ptr = llama_cpp.llama_get_logits_ith(self._ctx, m - 1)
            _decode_s += time.perf_counter() - t0
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


_decode_s = 0.0  # seconds spent in llama_decode (and waiting for its logits), all models together


def decode_seconds() -> float:
    """The running total of time inside llama.cpp's decode calls: what a
    step took less this is the host's share (Python, sampling, the lookup)."""
    return _decode_s


def numerics(cparams, mode: str) -> str:
    """What decides the kernels: part of what a remembered cost is valid for."""
    repack = {"all": "1", "repack": "noamx", "none": "0"}[mode]
    return f"fa={cparams.flash_attn_type}|kv={cparams.type_k}/{cparams.type_v}|repack={repack}"


def fingerprint(path: Path, cfg: LoadConfig, numbers: str | None = None) -> str:
    """A model's key in the state files, also for a model not loaded yet
    (then its numerics follow from `cfg` as Model.__init__ sets them)."""
    if numbers is None:
        cparams = _context_params(cfg, cfg.n_batch, cores.threads(cfg.n_threads))
        mode = cfg.extra_bufts
        if mode is None:
            from .cpucheck import verdict
            mode = verdict(path).bufts
        numbers = numerics(cparams, mode)
    st = path.stat()
    return (f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}|"
            f"{llama_cpp.__version__}|gpu={cfg.gpu_layers}|threads={cores.threads(cfg.n_threads)}|"
            f"{'deterministic' if cfg.deterministic else 'fast'}|{numbers}|costs=1")


def release_file_pages(path: Path) -> None:
    """Drop this process's resident pages of a memory-mapped model file.

    Weights that llama.cpp repacks for the CPU (or copies to a GPU) are
    read through the mapping and then live in a buffer of their own; the
    mapping's pages would stay resident too, holding those weights twice.
    MADV_DONTNEED on a read-only file mapping only unmaps: what is still
    used from the file faults back in from the page cache, the rest is no
    longer counted.  Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    real = os.path.realpath(path)
    try:
        with open("/proc/self/maps") as f:
            spans = [line.split(None, 1)[0] for line in f if line.rstrip("\n").endswith(" " + real)]
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for span in spans:
        lo, hi = (int(x, 16) for x in span.split("-"))
        libc.madvise(lo, hi - lo, 4)  # MADV_DONTNEED


def _special(v) -> dict[str, int]:
    return {
        "bos": llama_cpp.llama_vocab_bos(v), "eos": llama_cpp.llama_vocab_eos(v),
        "eot": llama_cpp.llama_vocab_eot(v),
        "fim_pre": llama_cpp.llama_vocab_fim_pre(v), "fim_suf": llama_cpp.llama_vocab_fim_suf(v),
        "fim_mid": llama_cpp.llama_vocab_fim_mid(v), "fim_pad": llama_cpp.llama_vocab_fim_pad(v),
        "fim_rep": llama_cpp.llama_vocab_fim_rep(v), "fim_sep": llama_cpp.llama_vocab_fim_sep(v),
    }


def vocab_difference(a, b, *, texts: bool = True) -> str | None:
    """Why vocabulary `b` cannot draft for `a` (llama_vocab pointers), or None.

    Same rules as llama.cpp's speculative example: vocabulary type,
    BOS/EOS, sizes within 128 tokens of padding, and the same text for
    every token id both have (`texts=False`: known to be the same already,
    gguf.token_digest).
    """
    if llama_cpp.llama_vocab_type(a) != llama_cpp.llama_vocab_type(b):
        return "the tokenizer types differ"
    na, nb = llama_cpp.llama_vocab_n_tokens(a), llama_cpp.llama_vocab_n_tokens(b)
    if abs(na - nb) > 128:
        return f"the vocabulary sizes differ ({na} vs {nb} tokens)"
    mine, theirs = _special(a), _special(b)
    for what in ("bos", "eos", "eot"):
        if mine[what] != theirs[what]:
            return f"the special tokens differ ({what.upper()} is {mine[what]} vs {theirs[what]})"
    if not texts:
        return None
    text = llama_cpp.llama_vocab_get_text
    n = min(na, nb)
    ta, tb = [text(a, i) for i in range(n)], [text(b, i) for i in range(n)]
    if ta != tb:
        i = next(i for i in range(n) if ta[i] != tb[i])
        return (f"token {i} is {ta[i].decode('utf-8', 'replace')!r} in one and "
                f"{tb[i].decode('utf-8', 'replace')!r} in the other")
    return None


class ContextFull(SpecError):
    def __init__(self, need: int, n_ctx: int):
        super().__init__(f"the context is full ({need} tokens needed, {n_ctx} available)",
                         hint="Use a larger --ctx, or a shorter prompt.")
        self.need, self.n_ctx = need, n_ctx


_MARK = "\ue000{}\ue001"  # a message's place in the rendered template (private-use characters)
_MARKS = re.compile("\ue000(\\d+)\ue001")


def content_spans(rendered: str, marked: str, contents: list[str]) -> list[tuple[int, int]] | None:
    """Where the messages' contents lie in `rendered`, as (start, end)
    spans in order: `marked` is the same template rendered with mark i in
    place of content i, so what lies between marks is the template's own
    text.  A content may appear as given or trimmed, or as what follows its
    last "</think>" (a reasoning model's past answers).  None if `rendered`
    does not follow `marked` so (a template that inspects or rewrites
    contents)."""
    parts = _MARKS.split(marked)  # [text, index, text, index, ..., text]
    spans, pos = [], 0
    for k in range(0, len(parts) - 1, 2):
        if not rendered.startswith(parts[k], pos):
            return None
        pos += len(parts[k])
        i, after = int(parts[k + 1]), parts[k + 2]
        if i >= len(contents):
            return None
        c = contents[i]
        # as given or trimmed; reasoning models' templates (DeepSeek-R1, Qwen3) keep only what
        # follows a past answer's "</think>"
        forms = [form for part in (c, c.rsplit("</think>", 1)[-1])
                 for form in (part, part.strip(), part.lstrip(), part.rstrip())]
        for text in dict.fromkeys(forms):
            if rendered.startswith(text, pos) and rendered.startswith(after, pos + len(text)):
                break
        else:
            return None
        if text:
            spans.append((pos, pos + len(text)))
        pos += len(text)
    return spans if rendered[pos:] == parts[-1] else None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix: list slices compared at C speed (the
    usual case, one a prefix of the other, is one comparison), else a
    binary search of them."""
    n = min(len(a), len(b))
    a, b = list(a[:n]), list(b[:n])
    if a == b:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Detokenizer:
    """Incremental detokenizer: emits only complete UTF-8 characters."""

    def __init__(self, model: Model):
        self._model = model
        self._pending = b""

    def add(self, token: int) -> str:
        self._pending += self._model.piece(token)
        try:
            text = self._pending.decode("utf-8")
            self._pending = b""
            return text
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data":  # an incomplete tail: wait for more
                text = self._pending[:e.start].decode("utf-8", "replace")
                self._pending = self._pending[e.start:]
                return text
            text = self._pending.decode("utf-8", "replace")
            self._pending = b""
            return text

    def flush(self) -> str:
        text = self._pending.decode("utf-8", "replace")
        self._pending = b""
        return text
