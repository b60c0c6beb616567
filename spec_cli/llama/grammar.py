"""A model's vocabulary as llguidance's tokenizer (core/constraint.py masks
with it), from llama.cpp's own pieces and tokenizer (llguidance.llamacpp),
with every end-of-generation token as an end of the grammar's text.
Building reads each token's piece, about a second for a 150k vocabulary:
Vocab.grammar_tokenizer makes it once."""

from __future__ import annotations

from ..errors import SpecError
from .lib import llama_cpp


def tokenizer(vocab):
    """llguidance's LLTokenizer for `vocab` (llama.vocab.Vocab)."""
    try:
        from llguidance.llamacpp import lltokenizer_from_vocab
    except ImportError as e:  # a core dependency: only a broken install lacks it
        raise SpecError(f"constraints need the llguidance package ({e})",
                        hint="Reinstall spec-cli: pip install -e .") from None
    eog = [t for t in range(vocab.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab.handle, t)]
    return lltokenizer_from_vocab(vocab.handle, eos_token=eog or None)
