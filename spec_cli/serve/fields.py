"""What a request's fields are to this server, beyond the messages or
prompt: honoured, refused with a 400 that names the field, or ignored on
purpose.  No field that changes what the answer means is dropped: a
sampler this server does not run is accepted at its neutral value only.
A field this module does not know is ignored, and named in the response's
`spec-cli-ignored-fields` header (the rule docs/serving.md states).

Here: logprobs (OpenAI's and llama-server's `n_probs`), logit bias and
penalties (core/adjust.py), per-request speculation, Predicted Outputs,
llama-server's `samplers`.  Pure functions, no HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.adjust import MAX_TOP_LOGPROBS, Adjust
from .checks import number

MAX_BIAS = 256          # logit_bias entries
MAX_PREDICTION = 1 << 20  # characters of a prediction

# honoured everywhere they appear (each endpoint's parser reads them)
COMMON = {"model", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream", "stream_options", "n",
          "max_tokens", "n_predict", "response_format", "grammar", "json_schema", "logit_bias", "presence_penalty",
          "frequency_penalty", "repeat_penalty", "repeat_last_n", "n_probs", "speculation", "speculative.n_max",
          "speculative.n_min", "speculative.p_min", "samplers", "cache_prompt", "post_sampling_probs",
          "best_of", "echo", "logprobs", "ignore_eos"}
KNOWN = {
    "chat": COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                      "parallel_tool_calls", "prediction", "functions", "function_call", "audio", "modalities",
                      "web_search_options", "chat_template_kwargs", "reasoning_effort", "reasoning_format",
                      "reasoning_budget_tokens", "thinking_budget_tokens"},
    "completion": COMMON | {"prompt", "suffix", "prediction", "editor_stops"},
    "infill": COMMON | {"input_prefix", "input_suffix", "input_extra", "prompt", "n_indent", "t_max_predict_ms",
                        "t_max_prompt_ms", "response_fields", "editor_stops"},
}
KNOWN["native"] = KNOWN["completion"] | {"response_fields", "t_max_predict_ms", "t_max_prompt_ms"}
# ignored on purpose: they change nothing in the answer (docs/serving.md lists them)
IGNORED = {"user", "metadata", "store", "service_tier", "id_slot", "timings_per_token", "return_tokens",
           "n_keep", "n_cmpl", "lora", "return_progress", "safety_identifier", "prompt_cache_key", "verbosity",
           "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "mirostat_tau",
           "mirostat_eta", "dynatemp_exponent", "xtc_threshold", "min_keep"}
# samplers this server does not run: accepted at the value that leaves them off, else refused
NEUTRAL = {"mirostat": 0, "typical_p": 1.0, "typ_p": 1.0, "tfs_z": 1.0, "dry_multiplier": 0.0,
           "xtc_probability": 0.0, "top_n_sigma": -1.0, "dynatemp_range": 0.0}
SAMPLERS = {"top_k", "top_p", "min_p", "temperature", "penalties", "infill", "dry", "typ_p", "typical_p",
            "xtc", "top_n_sigma", "mirostat", "logit_bias", "temp"}
REFUSED = {
    "functions": "is the deprecated form of 'tools': send 'tools' instead",
    "function_call": "is the deprecated form of 'tool_choice': send 'tools' and 'tool_choice' instead",
    "audio": "asks for audio: this server writes text only",
    "modalities": "asks for other modalities: this server writes text only",
    "web_search_options": "asks for a web search: this server has none",
}


class FieldError(Exception):
    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param, self.message = param, message


@dataclass(frozen=True)
class Speculation:
    """A request's own speculation settings (`speculation`, llama-server's
    `speculative.*`): None where it leaves the server's."""

    proposer: str | None = None   # "none", or one the server loaded
    draft_max: int | None = None
    draft_min: int = 0            # a draft shorter than this is not verified
    p_min: float | None = None    # the draft model stops below this confidence


def unknown(body: dict, kind: str) -> list[str]:
    """The fields of `body` no rule here names (ignored; the header says so),
    and a 400 for a refused one or a sampler set to anything but off."""
    for name, why in REFUSED.items():
        if body.get(name) not in (None, [], {}, "none", "auto") and name in body:
            raise FieldError(name, why)
    for name, off in NEUTRAL.items():
        value = body.get(name)
        if value is not None and value != off:
            raise FieldError(name, f"must be {off!r} (off): this server does not run that sampler; "
                                   "leave it out")
    known = KNOWN[kind]
    return sorted(k for k in body if k not in known and k not in IGNORED and k not in NEUTRAL)


def logprobs(body: dict, kind: str) -> int | None:
    """How many alternatives each token's logprob comes with (0: the
    token's own only), or None where none are asked for: chat's `logprobs`
    + `top_logprobs`, completions' `logprobs: N`, llama-server's `n_probs`
    (the three are one setting); `post_sampling_probs` true is refused."""
    if body.get("post_sampling_probs") not in (None, False):
        raise FieldError("post_sampling_probs", "must be false: probabilities are the target's own, before "
                                                "sampling (the default of llama-server)")
    n = None
    if kind == "chat":
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise FieldError("logprobs", "must be true or false")
        top = number(body, "top_logprobs", None, lo=0, hi=MAX_TOP_LOGPROBS, integer=True)
        if top is not None and not want:
            raise FieldError("top_logprobs", "needs 'logprobs': true")
        n = (top or 0) if want else None
    elif body.get("logprobs") is not None:
        n = number(body, "logprobs", None, lo=0, hi=MAX_TOP_LOGPROBS, integer=True)
    probs = number(body, "n_probs", None, lo=0, hi=MAX_TOP_LOGPROBS, integer=True)
    if probs:
        n = max(n or 0, probs)
    return n


def adjust(body: dict, vocab_size: int | None = None) -> Adjust | None:
    """The request's logit bias and penalties, None where it sets none."""
    a = Adjust(bias=_bias(body.get("logit_bias"), vocab_size),
               repeat=number(body, "repeat_penalty", 1.0, lo=0.0, hi=10.0),
               frequency=number(body, "frequency_penalty", 0.0, lo=-2.0, hi=2.0),
               presence=number(body, "presence_penalty", 0.0, lo=-2.0, hi=2.0),
               last_n=number(body, "repeat_last_n", 64, lo=-1, hi=1 << 20, integer=True))
    return a if a.active else None


def _bias(value: Any, vocab_size: int | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias} or llama-server's [[token id, bias], ...]
    (bias false: never); at most MAX_BIAS; token text as a key is refused
    (its tokens depend on the context)."""
    if value is None or value == {} or value == []:
        return ()
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise FieldError("logit_bias", "must be an object of token ids to biases, or a list of [token id, bias]")
    if len(pairs) > MAX_BIAS:
        raise FieldError("logit_bias", f"may hold at most {MAX_BIAS} tokens")
    out: dict[int, float] = {}
    for key, bias in pairs:
        try:
            token = int(key)
        except (TypeError, ValueError):
            token = -1
        if isinstance(key, bool) or token < 0 or (vocab_size is not None and token >= vocab_size) \
                or isinstance(key, float):
            raise FieldError("logit_bias", f"has {key!r}: keys are token ids (0 to the vocabulary's size); "
                                           "POST /tokenize gives a text's ids")
        if bias is False:
            bias = float("-inf")
        elif isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise FieldError(f"logit_bias.{key}", f"must be a number from -100 to 100 (or false), not {bias!r}")
        out[token] = float(bias)
    return tuple(sorted(out.items()))


def speculation(body: dict) -> Speculation | None:
    """`speculation: {"proposer", "draft_max"}` and llama-server's
    `speculative.n_max` / `n_min` / `p_min` (checked against what the
    server loaded by the worker)."""
    spec = body.get("speculation")
    proposer = draft_max = None
    if spec is not None:
        if not isinstance(spec, dict):
            raise FieldError("speculation", "must be an object such as {\"proposer\": \"none\"}")
        extra = sorted(set(spec) - {"proposer", "draft_max"})
        if extra:
            raise FieldError(f"speculation.{extra[0]}", "is not a speculation setting: give proposer or draft_max")
        proposer = spec.get("proposer")
        if proposer is not None and not isinstance(proposer, str):
            raise FieldError("speculation.proposer", "must be a proposer's name, such as \"none\"")
        draft_max = number(spec, "draft_max", None, lo=0, hi=256, integer=True, where="speculation.draft_max")
    n_max = number(body, "speculative.n_max", None, lo=0, hi=256, integer=True)
    n_min = number(body, "speculative.n_min", 0, lo=0, hi=256, integer=True)
    p_min = number(body, "speculative.p_min", None, lo=0.0, hi=1.0)
    if n_max is not None:
        draft_max = n_max if draft_max is None else min(draft_max, n_max)
    if proposer is None and draft_max is None and not n_min and p_min is None:
        return None
    return Speculation(proposer, draft_max, n_min, p_min)


def prediction(body: dict) -> str | None:
    """OpenAI's Predicted Outputs: `prediction: {"type": "content",
    "content": text or [text parts]}`."""
    value = body.get("prediction")
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content":
        raise FieldError("prediction", "must be {\"type\": \"content\", \"content\": ...}")
    content = value.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in content):
            raise FieldError("prediction.content", "must be a string or a list of text parts")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise FieldError("prediction.content", "must be a string or a list of text parts")
    if len(content) > MAX_PREDICTION:
        raise FieldError("prediction.content", f"is longer than {MAX_PREDICTION} characters")
    return content or None


def samplers(body: dict) -> set[str] | None:
    """llama-server's `samplers`: which of this server's samplers are on
    (the order is this server's own); None where it is not given."""
    value = body.get("samplers")
    if value is None:
        return None
    if isinstance(value, str):  # llama-server also takes one letter a sampler ("kpm...")
        value = [_LETTERS.get(c, c) for c in value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise FieldError("samplers", "must be a list of sampler names")
    odd = [s for s in value if s not in SAMPLERS]
    if odd:
        raise FieldError("samplers", f"names {odd[0]!r}: this server runs " + ", ".join(sorted(SAMPLERS)))
    return set(value)


_LETTERS = {"k": "top_k", "p": "top_p", "m": "min_p", "t": "temperature", "e": "penalties", "d": "dry",
            "y": "typ_p", "x": "xtc", "s": "top_n_sigma", "i": "infill"}
