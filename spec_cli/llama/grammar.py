"""A model's vocabulary as llguidance's tokenizer (core/constraint.py masks
with it): every token's bytes as llama.cpp writes them, a control token (or
a user-defined one written like `<tool_call>`) marked special as llguidance
reads them, llama.cpp's own tokenizer for text, and every end-of-generation
token as an end of the grammar's text.  Building reads each token's piece,
about a second for a 150k vocabulary: Vocab.grammar_tokenizer makes it once.

(llguidance.llamacpp.lltokenizer_from_vocab does the same through a call
llama-cpp-python has deprecated, warning once a token.)"""

from __future__ import annotations

import ctypes

from ..errors import SpecError
from .lib import llama_cpp

SPECIAL = b"\xff"  # llguidance's mark of a special token's bytes


def is_special(attr: int, piece: bytes) -> bool:
    """Whether llguidance reads a token as special: a control token, or a
    user-defined one written like `<tool_call>`."""
    lib = llama_cpp
    return bool(attr & lib.LLAMA_TOKEN_ATTR_CONTROL
                or (attr & lib.LLAMA_TOKEN_ATTR_USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">")))


def special_id(vocab, text: str) -> int | None:
    """The id of the special token (as llguidance reads them) whose text is
    `text`, else None: core/tools.py's markers."""
    ids = vocab.tokenize(text, add_special=False, parse_special=True)
    if len(ids) != 1:
        return None
    return ids[0] if is_special(llama_cpp.llama_vocab_get_attr(vocab.handle, ids[0]), text.encode()) else None


def compile_for(vocab, spec):
    """`spec` (core.constraint.Spec) compiled against `vocab`."""
    from ..core.constraint import compile_spec

    grammar = compile_spec(spec, vocab.grammar_tokenizer(), vocab.n_vocab)
    if not spec.triggers:
        return grammar
    from ..core.lazy import LazyGrammar

    return LazyGrammar(grammar, tuple(t.encode() for t in spec.triggers), lambda t: vocab.piece(t, special=True))


def tokenizer(vocab):
    """llguidance's LLTokenizer for `vocab` (llama.vocab.Vocab)."""
    try:
        from llguidance import LLTokenizer
    except ImportError as e:  # a core dependency: only a broken install lacks it
        raise SpecError(f"constraints need the llguidance package ({e})",
                        hint="Reinstall spec-cli: pip install -e .") from None
    handle, lib = vocab.handle, llama_cpp
    buf = ctypes.create_string_buffer(16 * 1024)
    tokens, eog = [], []
    for t in range(vocab.n_vocab):
        n = lib.llama_token_to_piece(handle, t, buf, len(buf), 0, True)
        if n < 0:
            raise SpecError(f"{vocab.name}: token {t}'s text is over {len(buf)} bytes")
        piece = buf.raw[:n]
        if is_special(lib.llama_vocab_get_attr(handle, t), piece):
            piece = SPECIAL + piece
        tokens.append(piece)
        if lib.llama_vocab_is_eog(handle, t):
            eog.append(t)
    tokenize = ctypes.cast(lib.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    return LLTokenizer.from_llamacpp(tokens=tokens, vocab_ptr=handle, tokenize_fptr=tokenize,
                                     eos_token=eog or lib.llama_vocab_eos(handle), slices=None)
