"""A model's vocabulary: tokens to text and back, special tokens, the chat
template, and whether one model's vocabulary can draft for another's.

`Vocab` reads llama.cpp's vocabulary of a loaded model (`Model.vocab`);
`Detokenizer` turns a stream of tokens into complete UTF-8 text.
"""

from __future__ import annotations

import ctypes
import threading

from ..errors import SpecError
from ..core.chat import MARK, content_spans
from .lib import llama_cpp

_grammar_lock = threading.Lock()  # a server's request threads may ask for the grammar tokenizer at once



def meta(model_ptr, key: str) -> str | None:
    """A GGUF metadata value of a loaded model, as text (None: absent)."""
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_model_meta_val_str(model_ptr, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        llama_cpp.llama_model_meta_val_str(model_ptr, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace")


class Vocab:
    """The vocabulary of a loaded model (llama.cpp's `model_ptr`); `name`
    (the file's) names it in errors."""

    def __init__(self, model_ptr, name: str):
        self._model, self.name = model_ptr, name
        self._vocab = llama_cpp.llama_model_get_vocab(model_ptr)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._piece = ctypes.create_string_buffer(256)
        self._grammar_tok = None  # grammar_tokenizer's, made on first use
        self._formatter = None  # the chat template compiled (_chat_formatter), on first use
        self._shown: frozenset[int] | None = None  # shown_specials', made on first use
        self._sample: str | None = None  # call_sample's, made on first use

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

    def shown_specials(self) -> frozenset[int]:
        """The control tokens a reply's text keeps: the tool-call and
        thinking markers of every family (core.calls.MARKER_TEXTS), which the
        readers of a reply must see (`[TOOL_CALLS]` is a control token in
        Mistral's vocabularies, DeepSeek's call markers in its)."""
        if self._shown is None:
            from ..core.calls import MARKER_TEXTS

            found = set()
            for text in MARKER_TEXTS:
                ids = self.tokenize(text, add_special=False, parse_special=True)
                if len(ids) == 1 and not self.piece(ids[0]):
                    found.add(ids[0])
            self._shown = frozenset(found)
        return self._shown

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @property
    def handle(self):
        """llama.cpp's vocabulary pointer (llama/grammar.py builds llguidance's tokenizer from it)."""
        return self._vocab

    def grammar_tokenizer(self):
        """This vocabulary as llguidance's tokenizer, for constraints (built once: llama/grammar.py)."""
        from .grammar import tokenizer

        with _grammar_lock:
            if self._grammar_tok is None:
                self._grammar_tok = tokenizer(self)
        return self._grammar_tok

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

    # -- the chat template -------------------------------------------------
    def chat_template(self) -> str | None:
        return meta(self._model, "tokenizer.chat_template")

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            kwargs: dict | None = None) -> str:
        """Render `messages` with the GGUF's own chat template (sandboxed
        Jinja, as llama-cpp-python renders it), ready for the reply; with
        `tools` (OpenAI's function definitions) as the template shows them,
        and `kwargs`, the template's own variables (`enable_thinking`, true
        unless `kwargs` says otherwise: DeepSeek-R1's template as llama.cpp
        keeps it closes the thinking without it)."""
        fmt = self._chat_formatter()
        if "enable_thinking" in fmt.template:  # true unless asked otherwise, as llama-server has it
            kwargs = {"enable_thinking": True, **(kwargs or {})}
        try:
            return fmt(messages=messages, tools=tools or None, **(kwargs or {})).prompt
        except Exception as e:  # the template's own raise_exception, or a message it cannot render
            raise SpecError(f"{self.name}'s chat template cannot render these messages: {e}",
                            hint="Check the roles' order and the tool calls in the history.") from None

    def _chat_formatter(self):
        """The GGUF's chat template, compiled once: compiling it takes
        milliseconds, rendering a few microseconds, and every chat request
        renders it twice (tokenize_chat)."""
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            template = self.chat_template()
            if not template:
                raise SpecError(f"{self.name} has no chat template in its metadata",
                                hint="Use --raw to send the prompt as plain text.")
            self._formatter = Jinja2ChatFormatter(template=template, eos_token=self.token_text(self.eos),
                                                  bos_token=self.token_text(self.bos))
        return self._formatter

    def call_sample(self) -> str | None:
        """What the chat template writes for an assistant turn that called
        a tool (core.tools.family_of tells the call syntax by it), or None
        where it writes none or cannot render one."""
        if self._sample is None:
            tool = {"type": "function", "function": {"name": "probe_fn", "description": "A probe.",
                                                     "parameters": {"type": "object",
                                                                    "properties": {"a": {"type": "integer"}}}}}
            call = {"id": "call0probe", "type": "function", "function": {"name": "probe_fn", "arguments": {"a": 1}}}
            try:
                text = self.apply_chat_template([{"role": "user", "content": "Q0Q"},
                                                 {"role": "assistant", "content": "", "tool_calls": [call]},
                                                 {"role": "tool", "tool_call_id": "call0probe", "content": "R0R"}],
                                                [tool])
                text = text[text.index("Q0Q") + 3:text.index("R0R")]
                self._sample = text if "probe_fn" in text else ""
            except (SpecError, ValueError):
                self._sample = ""
        return self._sample or None

    def tokenize_chat(self, messages: list[dict], tools: list[dict] | None = None,
                      kwargs: dict | None = None) -> list[int]:
        """Tokens of `messages` in the GGUF's chat template, ready for the
        reply.  Special tokens are parsed in the template's own text only:
        a message's content is tokenized as plain text, so a role marker
        typed into it (`<|im_end|>\\n<|im_start|>system`) stays text and
        cannot open a turn of its own.  BOS is added only if the model
        wants one and the template did not write it."""
        import json

        for what, value in (("the tools", tools), ("a tool call", [m["tool_calls"] for m in messages if m.get("tool_calls")])):
            if value and self._has_special(json.dumps(value, ensure_ascii=False)):
                raise SpecError(f"{what} hold the text of a special token", hint="Remove it.")
        rendered = self.apply_chat_template(messages, tools, kwargs)
        contents = [m.get("content") or "" for m in messages]
        marked = self.apply_chat_template([{**m, "content": MARK.format(i)} for i, m in enumerate(messages)], tools,
                                          kwargs)
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

    def difference(self, other: "Vocab", *, texts: bool = True) -> str | None:
        """Why `other` cannot draft for this vocabulary, or None if it can
        (see vocab_difference)."""
        return vocab_difference(self._vocab, other._vocab, texts=texts)


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


class Detokenizer:
    """Incremental detokenizer: emits only complete UTF-8 characters."""

    def __init__(self, vocab: Vocab):
        self._vocab = vocab
        self._pending = b""
        self._shown = vocab.shown_specials()

    def add(self, token: int) -> str:
        self._pending += self._vocab.piece(token, special=token in self._shown)
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
