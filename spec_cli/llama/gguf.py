"""Just enough of the GGUF header to compare two files' vocabularies
without loading either: the raw bytes of `tokenizer.ggml.tokens`; whether
a file has multi-token-prediction layers (`mtp_layers`), which decides how
it is loaded; and its tensors' names, types and shapes (`tensors`).

Two files whose token arrays are byte for byte the same have the same text
for every token id, which is the expensive part of a pair check
(vocab.vocab_difference reads 150 K tokens through llama.cpp); reading
the array here costs a walk over its string lengths (~60 ms on Qwen's
150 K tokens), so what `token_digest` and `mtp_layers` read is kept in the
state directory per file, size and modification time.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
from pathlib import Path

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
_STRING, _ARRAY = 8, 9
TOKENS = b"tokenizer.ggml.tokens"
_U64 = struct.Struct("<Q")


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def u32(self) -> int:
        (v,) = struct.unpack_from("<I", self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self) -> int:
        (v,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        return v

    def string(self) -> bytes:
        n = self.u64()
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s

    def skip(self, kind: int) -> None:
        if kind in _SCALAR:
            self.pos += _SCALAR[kind]
        elif kind == _STRING:
            n = self.u64()
            self.pos += n
        elif kind == _ARRAY:
            elem, count = self.u32(), self.u64()
            if elem in _SCALAR:
                self.pos += _SCALAR[elem] * count
            elif elem == _STRING:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.skip(elem)
        else:
            raise ValueError(f"unknown GGUF value type {kind}")

    def skip_strings(self, count: int) -> None:
        """Past `count` strings (a vocabulary's 150 K: one tight loop, ~30 ms)."""
        buf, pos, unpack = self.buf, self.pos, _U64.unpack_from
        for _ in range(count):
            pos += 8 + unpack(buf, pos)[0]
        if pos > len(buf):
            raise ValueError("GGUF string array runs past the end of the file")
        self.pos = pos


@contextlib.contextmanager
def _header(path: str | Path):
    """The file mapped, and a reader past its counts: (buf, reader,
    n_tensors, n_kv), the reader at the first key/value pair; None where
    it is not a GGUF this reader knows (v2/v3)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF" or struct.unpack_from("<I", buf, 4)[0] not in (2, 3):
            yield None
            return
        r = _Reader(buf)
        r.pos = 8
        yield buf, r, r.u64(), r.u64()


FACTS = "gguf.json"  # in the state directory: file|size|mtime -> {"tokens": [...], "mtp": n}
_KEEP = 64           # files remembered


def _remembered(what: str, read):
    """`read(path)`, kept in the state directory for this file as it is now."""
    def cached(path: str | Path):
        from ..files import read_state, write_state

        try:
            st = os.stat(path)
        except OSError:
            return read(path)
        key = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"
        known = read_state(FACTS)
        entry = known.get(key)
        if isinstance(entry, dict) and what in entry:
            value = entry[what]
            return tuple(value) if isinstance(value, list) else value
        value = read(path)
        known.pop(key, None)
        known[key] = dict(entry if isinstance(entry, dict) else {}, **{what: value})
        write_state(FACTS, dict(list(known.items())[-_KEEP:]))
        return value
    cached.__doc__ = read.__doc__
    return cached


def _token_digest(path: str | Path) -> tuple[int, str] | None:
    """(number of tokens, SHA-256 of the token array's bytes), or None where
    the file has no such array or is not a GGUF this reader knows (v2/v3)."""
    try:
        with _header(path) as h:
            if h is None:
                return None
            buf, r, _, n_kv = h
            for _ in range(n_kv):
                key, kind = r.string(), r.u32()
                if key == TOKENS and kind == _ARRAY:
                    elem, count = r.u32(), r.u64()
                    if elem != _STRING:
                        return None
                    start = r.pos
                    r.skip_strings(count)
                    return count, hashlib.sha256(buf[start:r.pos]).hexdigest()
                r.skip(kind)
    except (OSError, ValueError, struct.error):
        return None
    return None


def _mtp_layers(path: str | Path) -> int:
    """The file's `<arch>.nextn_predict_layers` (multi-token-prediction
    blocks), 0 where it has none or cannot be read."""
    try:
        with _header(path) as h:
            if h is None:
                return 0
            buf, r, _, n_kv = h
            for _ in range(n_kv):
                key, kind = r.string(), r.u32()
                if key.endswith(b".nextn_predict_layers") and kind in (4, 5):  # uint32, int32
                    return max(struct.unpack_from("<i" if kind == 5 else "<I", buf, r.pos)[0], 0)
                r.skip(kind)
    except (OSError, ValueError, struct.error):
        return 0
    return 0


token_digest = _remembered("tokens", _token_digest)
mtp_layers = _remembered("mtp", _mtp_layers)


def tensors(path: str | Path) -> list[tuple[str, int, tuple[int, ...]]]:
    """Each tensor's (name, ggml type id, shape in ggml's order: ne[0]
    first); [] where the file cannot be read or is not a GGUF v2/v3."""
    try:
        with _header(path) as h:
            if h is None:
                return []
            _, r, n_tensors, n_kv = h
            for _ in range(n_kv):
                r.string()
                r.skip(r.u32())
            out = []
            for _ in range(n_tensors):
                name = r.string().decode("utf-8", "replace")
                dims = tuple(r.u64() for _ in range(r.u32()))
                kind = r.u32()
                r.u64()  # offset
                out.append((name, kind, dims))
            return out
    except (OSError, ValueError, struct.error):
        return []
