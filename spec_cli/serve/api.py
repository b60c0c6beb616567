"""The wire formats of requests: OpenAI's schema (chat completions,
completions) and llama-server's `/infill`, checked field by field into one
`Request`; errors in OpenAI's shape.  Pure functions, no HTTP.  The
responses are replies.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.constraint import ConstraintError, Spec
from ..core.tools import ToolUse
from ..core.adjust import Adjust
from ..core.config import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, SamplingConfig
from . import fields, thinking
# the errors are imported from here by the rest of serve/
from .checks import ApiError, bad, flag, internal, json_object, number, shutting_down, string  # noqa: F401
from .messages import message, tools
from .fields import FieldError, Speculation

MAX_STOPS = 16


@dataclass
class Request:
    kind: str                                  # "chat" | "completion" | "infill"
    messages: list[dict[str, str]] | None = None
    prompt: str = ""
    # /infill
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[tuple[str, str]] = field(default_factory=list)
    n_indent: int = 0
    t_max_predict_ms: float = 0.0
    cache_prompt: bool = True
    response_fields: list[str] | None = None
    # sampling and length
    max_tokens: int | None = None
    # temperature, top_k, top_p, min_p, checked; a field a request leaves out is llama-server's default
    sampling: SamplingConfig = SamplingConfig(temperature=1.0, top_k=DEFAULT_TOP_K, top_p=DEFAULT_TOP_P,
                                              min_p=DEFAULT_MIN_P)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    # structured output: what the request's response_format, grammar or
    # json_schema asked for (checked, not compiled), and once the server has
    # compiled it against the model's vocabulary, the Grammar
    constraint: Spec | None = None
    grammar: object = None
    tools: ToolUse | None = None   # chat: `tools`, `tool_choice`, `parallel_tool_calls`
    # the rest of what a request may set (fields.py)
    logprobs: int | None = None    # alternatives a token's logprob comes with; None: no logprobs
    adjust: Adjust | None = None   # logit bias and penalties
    speculation: Speculation | None = None
    prediction: str | None = None  # Predicted Outputs: text the answer is expected to repeat
    ignored: list[str] = field(default_factory=list)  # fields no rule names (the response's header lists them)
    native: bool = False           # llama-server's /completion: its response shape
    prompt_ids: list[int] | None = None  # completions: the prompt as token ids
    echo: bool = False             # completions: the prompt written back first (with its logprobs)
    door: dict | None = None       # what the API's door needs back when it answers (responses.py)
    # fill-in-the-middle asked another way than /infill (kind "infill"): the field that asked
    # ("suffix", or "prompt": a raw prompt in the model's own FIM template, read as written:
    # `fim_text`); `editor_stops` false leaves the middle untrimmed (a client that trims itself)
    fim_from: str | None = None
    fim_text: str | None = None
    editor_stops: bool = True
    # chat: what it asks of a reasoning model's thinking (thinking.Ask), and how its reply is
    # read once its prompt is known (thinking.Plan: None where the template has no thinking)
    reasoning: object = None
    thinking: object = None


# -- field checks -------------------------------------------------------------

def _stops(body: dict) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad("stop", "must be a string or a list of strings")
    if len(value) > MAX_STOPS:
        raise bad("stop", f"may hold at most {MAX_STOPS} strings")
    return tuple(s for s in value if s)


def _sampling(body: dict, req: Request, *, temperature: float) -> None:
    if number(body, "n", 1, integer=True) != 1:
        raise bad("n", "must be 1: one choice per request")
    if number(body, "best_of", 1, integer=True) != 1:
        raise bad("best_of", "must be 1: one candidate per request")
    if body.get("echo") not in (None, False) and not req.echo:
        raise bad("echo", "must be false here: only /v1/completions writes the prompt back")
    if body.get("ignore_eos") not in (None, False):
        raise bad("ignore_eos", "must be false: a generation ends at the model's end token")
    try:
        on = fields.samplers(body)
        req.ignored = fields.unknown(body, "native" if req.native else req.kind)
        req.logprobs = fields.logprobs(body, req.kind)
        req.adjust = fields.adjust(body) if on is None or "penalties" in on or "logit_bias" in on else None
        req.speculation = fields.speculation(body)
    except (FieldError, ValueError) as e:
        raise _field_error(e) from None
    try:  # the rules the generation applies, checked here so the error names its field
        req.sampling = SamplingConfig(
            temperature=number(body, "temperature", temperature, lo=0.0, hi=100.0),
            top_k=number(body, "top_k", DEFAULT_TOP_K, lo=0, integer=True) if on is None or "top_k" in on else 0,
            top_p=number(body, "top_p", DEFAULT_TOP_P, lo=0.0, hi=1.0) if on is None or "top_p" in on else 1.0,
            min_p=number(body, "min_p", DEFAULT_MIN_P, lo=0.0, hi=1.0) if on is None or "min_p" in on else 0.0)
    except ValueError as e:
        name, _, rest = str(e).partition(" ")
        raise bad(name, rest) from None
    req.seed = number(body, "seed", None, integer=True)
    if req.seed is not None:
        req.seed %= 1 << 31
    req.stop = _stops(body)
    req.stream = flag(body, "stream", False)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise bad("stream_options", "must be an object")
        req.include_usage = flag(options, "include_usage", False)


def _field_error(e: Exception) -> ApiError:
    if isinstance(e, FieldError):
        return bad(e.param, e.message)
    name, _, rest = str(e).partition(" ")  # Adjust's own checks name their field first
    return bad(name, rest)


def _prediction(body: dict, req: Request) -> None:
    try:
        req.prediction = fields.prediction(body)
    except FieldError as e:
        raise bad(e.param, e.message) from None


def _constraint(body: dict) -> Spec | None:
    """The request's structured output, from OpenAI's `response_format`
    ({"type": "text" | "json_object" | "json_schema"}, `json_schema.schema`,
    `json_schema.strict`: with it a schema keyword the engine cannot enforce
    is a 400; without it, as OpenAI's default, the schema is enforced as far
    as it can be and the response's `constraint.warnings` say what was not)
    or llama-server's `grammar` (GBNF) and `json_schema` fields, and its
    `response_format: {"type": "json_object", "schema": ...}` (not strict).
    At most one may constrain."""
    found: list[Spec] = []
    try:
        fmt = body.get("response_format")
        if fmt is not None:
            spec = _response_format(fmt)
            if spec is not None:
                found.append(spec)
        grammar = body.get("grammar")
        if grammar is not None and grammar != "":
            if not isinstance(grammar, str):
                raise bad("grammar", "must be a GBNF grammar as a string")
            found.append(Spec("gbnf", grammar, "grammar"))
        schema = body.get("json_schema")
        if schema is not None:
            if not isinstance(schema, dict):
                raise bad("json_schema", "must be a JSON schema object")
            found.append(Spec.json_schema(schema, "json_schema", strict=False))
    except ConstraintError as e:
        raise ApiError(400, e.message, param=e.where) from None
    if len(found) > 1:
        raise ApiError(400, "give one constraint: " + " and ".join(f"'{s.where}'" for s in found)
                       + " are all set", param=found[1].where)
    return found[0] if found else None


def _response_format(fmt) -> Spec | None:
    where = "response_format"
    if not isinstance(fmt, dict):
        raise bad(where, "must be an object such as {\"type\": \"json_object\"}")
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        schema = fmt.get("schema")
        if schema is None:
            return Spec("json_object", "", f"{where}.type")
        if not isinstance(schema, dict):
            raise bad(f"{where}.schema", "must be a JSON schema object")
        return Spec.json_schema(schema, f"{where}.schema", strict=False)
    if kind == "json_schema":
        inner = fmt.get("json_schema")
        if not isinstance(inner, dict):
            raise bad(f"{where}.json_schema", "must be an object with 'name' and 'schema'")
        schema = inner.get("schema")
        if not isinstance(schema, dict):
            raise bad(f"{where}.json_schema.schema", "must be a JSON schema object")
        strict = inner.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise bad(f"{where}.json_schema.strict", "must be true or false")
        return Spec.json_schema(schema, f"{where}.json_schema.schema", strict=strict is True)
    raise bad(f"{where}.type", f"must be text, json_object or json_schema, not {kind!r}")


def _max_tokens(body: dict, *names: str, zero: bool = False) -> int | None:
    """The token budget; 0 (the prompt read, nothing written) only for
    llama-server's n_predict and for an echoed prompt (`zero`)."""
    for name in names:
        value = number(body, name, None, integer=True)
        if value is not None:
            if value == -1 and name == "n_predict":
                return None  # llama-server: -1 = until the context is full
            if value < (0 if name == "n_predict" or zero else 1):
                raise bad(name, f"must be at least 1, not {value}")
            return value
    return None


def parse_chat(body: Any) -> Request:
    body = json_object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    out = [message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    for i, m in enumerate(out):  # a tool's result answers the assistant's calls just before it
        if m["role"] == "tool" and not (i and (out[i - 1].get("tool_calls") or out[i - 1]["role"] == "tool")):
            raise bad(f"messages[{i}]", "is a tool's result, but no assistant message with 'tool_calls' comes "
                                        "before it")
    req = Request("chat", messages=out, max_tokens=_max_tokens(body, "max_completion_tokens", "max_tokens",
                                                                             "n_predict"))
    _sampling(body, req, temperature=1.0)
    _prediction(body, req)
    req.constraint = _constraint(body)
    req.tools = tools(body)
    req.reasoning = thinking.parse(body)
    if req.tools is not None and req.constraint is not None and req.constraint.kind not in (
            "json_schema", "json_object"):
        raise ApiError(400, f"'{req.constraint.where}' (a grammar) together with 'tools' is not supported: "
                            "send one or the other, or a JSON schema as response_format",
                       param=req.constraint.where)
    return req


def parse_completion(body: Any, *, native: bool = False) -> Request:
    """OpenAI's /v1/completions, or (`native`) llama-server's /completion:
    the same fields, its answer in llama-server's shape.  The prompt is a
    text or its token ids (one prompt a request); `echo` writes it back
    before the completion, with its own logprobs where they are asked for
    (`max_tokens: 0` then scores the prompt alone)."""
    body = json_object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    ids = None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids, prompt = prompt, ""
    elif not isinstance(prompt, str):
        raise bad("prompt", "must be a string or a list of token ids (one prompt per request)")
    elif not prompt:
        raise bad("prompt", "is empty")
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise bad("suffix", "must be a string: the text after the cursor")
    if suffix is not None and ids is not None:
        raise bad("suffix", "needs the prompt as text, not token ids")
    echo = flag(body, "echo", False) and not native
    if echo and flag(body, "stream", False):
        raise bad("echo", "cannot be streamed here: send it with 'stream': false")
    req = Request("completion", prompt=prompt, prompt_ids=ids, echo=echo, native=native,
                  max_tokens=_max_tokens(body, "max_tokens", "n_predict", zero=echo))
    if req.max_tokens is None and not native:
        req.max_tokens = 16  # OpenAI's default for completions (llama-server's /completion: until the end)
    _sampling(body, req, temperature=1.0 if not native else 0.8)
    if native:
        req.cache_prompt = flag(body, "cache_prompt", True)
        _response_fields(body, req)
    _prediction(body, req)
    req.constraint = _constraint(body)
    req.editor_stops = flag(body, "editor_stops", True)
    if suffix is not None:
        if echo:
            raise bad("echo", "cannot be set with 'suffix': a fill-in-the-middle answer is the middle alone")
        fill_in(req, req.prompt, suffix, "suffix")
    return req


def fill_in(req: Request, prefix: str, suffix: str, where: str, text: str | None = None) -> None:
    """`req` made a fill-in-the-middle request (the editor's path, as
    /infill): the text before and after the cursor, the field that asked,
    and the raw template it came in, if it did (read as written)."""
    req.kind, req.input_prefix, req.input_suffix, req.prompt = "infill", prefix, suffix, ""
    req.fim_from, req.fim_text = where, text


def _response_fields(body: dict, req: Request) -> None:
    value = body.get("response_fields")
    if value is not None:
        if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
            raise bad("response_fields", "must be a list of field paths")
        req.response_fields = [f for f in value if f]


def parse_infill(body: Any) -> Request:
    """llama-server's /infill fields, as llama.vim and llama.vscode send them.
    Temperature defaults to 0 (the completion an editor shows is the
    model's most likely one, and the one speculation makes fastest);
    `samplers` is accepted, and `temperature`, `top_k`, `top_p`, `min_p`
    given are used."""
    body = json_object(body)
    req = Request("infill", input_prefix=string(body, "input_prefix"), input_suffix=string(body, "input_suffix"),
                  prompt=string(body, "prompt"), max_tokens=_max_tokens(body, "n_predict", "max_tokens"))
    extra = body.get("input_extra")
    if extra is not None:
        if not isinstance(extra, list):
            raise bad("input_extra", "must be a list of {filename, text} objects")
        for i, chunk in enumerate(extra):
            if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str) \
                    or not isinstance(chunk.get("filename", ""), str):
                raise bad(f"input_extra[{i}]", "must be an object with string 'filename' and 'text'")
            req.input_extra.append((chunk.get("filename") or "tmp", chunk.get("text") or ""))
    req.n_indent = number(body, "n_indent", 0, lo=0, integer=True)
    req.t_max_predict_ms = number(body, "t_max_predict_ms", 0.0, lo=0.0)
    number(body, "t_max_prompt_ms", 0.0)  # accepted; the prompt is read in one go
    req.cache_prompt = flag(body, "cache_prompt", True)
    _response_fields(body, req)
    _sampling(body, req, temperature=0.0)
    req.editor_stops = flag(body, "editor_stops", True)
    req.native = True  # llama-server's response shape
    if not (req.input_prefix or req.input_suffix or req.prompt or req.input_extra):
        raise ApiError(400, "nothing to complete: 'input_prefix', 'prompt' and 'input_suffix' are all empty")
    return req
