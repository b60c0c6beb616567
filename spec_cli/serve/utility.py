"""llama-server's utility endpoints, which tools probe before they send
anything else: `/tokenize`, `/detokenize`, `/apply-template`, `/props`
(`/metrics` under llama-server's `llamacpp:` names is metrics.py's).  Each reads the
target's vocabulary only (no decode), in a thread of its own; the same
access checks, body limit and error shapes as the rest (app.py).  The
bodies are checked here, pure functions but for the vocabulary."""

from __future__ import annotations

from typing import Any

from ..errors import SpecError
from .api import ApiError, parse_chat
from .checks import bad, flag, json_object

MAX_DETOKENIZE = 1 << 20   # tokens /detokenize reads


def tokenize(vocab, body: Any) -> dict:
    """{"content", "add_special" (false), "parse_special" (true),
    "with_pieces" (false)} -> {"tokens": ids, or [{"id", "piece"}]}; a
    piece that is not whole UTF-8 is given as its bytes, as llama-server does.
    vLLM's names are read too ("prompt", "add_special_tokens": what
    lm-evaluation-harness's remote tokenizer sends), with its "count"."""
    body = json_object(body)
    name = "content" if "content" in body or "prompt" not in body else "prompt"
    content = body.get(name)
    if not isinstance(content, str):
        raise bad(name, "must be the text to tokenize, as a string")
    special = flag(body, "add_special", False) if "add_special" in body else flag(body, "add_special_tokens",
                                                                                   False)
    ids = vocab.tokenize(content, add_special=special, parse_special=flag(body, "parse_special", True))
    if not flag(body, "with_pieces", False):
        return {"tokens": ids, "count": len(ids)}
    out = []
    for t in ids:
        b = vocab.piece(t, special=True)
        try:
            piece: Any = b.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(b)
        out.append({"id": t, "piece": piece})
    return {"tokens": out}


def detokenize(vocab, body: Any) -> dict:
    """{"tokens": ids} -> {"content": text}; an id outside the vocabulary is a 400."""
    body, n_vocab = json_object(body), vocab.n_vocab
    tokens = body.get("tokens", [])
    if not isinstance(tokens, list) or len(tokens) > MAX_DETOKENIZE:
        raise bad("tokens", f"must be a list of at most {MAX_DETOKENIZE} token ids")
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab:
            raise bad(f"tokens[{i}]", f"must be a token id from 0 to {n_vocab - 1}, not {t!r}")
    text = b"".join(vocab.piece(t, special=True) for t in tokens).decode("utf-8", errors="replace")
    return {"content": text, "prompt": text}  # llama-server's name, and vLLM's


def apply_template(vocab, body: Any) -> dict:
    """A chat request's messages (and tools) -> {"prompt": the text the
    model would read}, checked as /v1/chat/completions checks them."""
    req = parse_chat(body)
    use = req.tools
    tools = [t.as_openai() for t in use.tools] if use is not None and use.choice != "none" else None
    from .thinking import template_kwargs

    try:
        return {"prompt": vocab.apply_chat_template(req.messages, tools,
                                                    template_kwargs(vocab.chat_template(), req.reasoning)[0])}
    except SpecError as e:
        raise ApiError(400, e.message, param="messages") from None


def tokenizer_info(worker) -> dict:
    """vLLM's /tokenizer_info (lm-evaluation-harness reads it to use this
    server's tokenizer): the special tokens and the chat template."""
    t = worker.pair.target
    vocab = t.vocab
    return {"tokenizer_class": "llama.cpp", "eos_token": _special(vocab, vocab.eos),
            "bos_token": _special(vocab, vocab.bos) if vocab.add_bos else None, "pad_token": None,
            "chat_template": vocab.chat_template() or "", "model_max_length": t.n_ctx}


def props(worker) -> dict:
    """llama-server's /props: the defaults a request gets, the slots, the
    model and its template."""
    from ..core.config import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P

    pair, cfg = worker.pair, worker.cfg
    t = pair.target
    vocab = t.vocab
    return {
        "default_generation_settings": {
            "n_ctx": t.n_ctx, "model": cfg.model,
            "params": {"temperature": 0.8, "top_k": DEFAULT_TOP_K, "top_p": DEFAULT_TOP_P, "min_p": DEFAULT_MIN_P,
                       "repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0,
                       "frequency_penalty": 0.0, "n_predict": -1, "seed": -1, "n_probs": 0,
                       "speculative.n_max": cfg.draft_max, "speculative.n_min": 0,
                       "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"]}},
        "total_slots": worker.parallel,
        "model_alias": cfg.model, "model_path": str(t.path),
        "chat_template": vocab.chat_template() or "",
        "bos_token": _special(vocab, vocab.bos), "eos_token": _special(vocab, vocab.eos),
        "modalities": {"vision": False, "audio": False},
        "build_info": f"spec-cli {_version()}",
        "speculation": {"proposer": cfg.proposer or pair.config.proposer, "draft": pair.draft_name,
                        "mtp": pair.mtp, "draft_max": cfg.draft_max},
    }


def _special(vocab, token: int) -> str | None:
    return vocab.token_text(token) if token >= 0 else None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spec-cli")
    except PackageNotFoundError:
        return "unknown"
