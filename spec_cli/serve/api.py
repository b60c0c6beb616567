"""The wire formats of requests: OpenAI's schema (chat completions,
completions) and llama-server's `/infill`, checked field by field into one
`Request`; errors in OpenAI's shape.  Pure functions, no HTTP.  The
responses are replies.py's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..core.constraint import ConstraintError, Spec
from ..core.tools import MAX_TOOLS, NAME, Tool, ToolUse
from ..core.adjust import Adjust
from ..core.config import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, SamplingConfig
from . import fields
from .fields import FieldError, Speculation

MAX_STOPS = 16


class ApiError(Exception):
    """An error answered in OpenAI's shape, with its HTTP status."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


def internal(exc: BaseException) -> ApiError:
    """A bug's 500: its kind, never its input (the log has the traceback)."""
    return ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details",
                    kind="server_error")


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", kind="unavailable_error")


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"'{param}' {message}", param=param)


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


# -- field checks -------------------------------------------------------------

MAX_INT = 2 ** 63  # the largest integer any numeric field takes, before its own bounds (seeds: mod 2**31)


def _number(body: dict, name: str, default, *, lo: float | None = None, hi: float | None = None,
            integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(name, f"must be {'an integer' if integer else 'a number'}, not {value!r}")
    if isinstance(value, int) and abs(value) > MAX_INT:  # a float cannot hold it: refused before any arithmetic
        raise bad(name, f"must be at most 2**63 in size, not a {value.bit_length()}-bit integer")
    if integer and not float(value).is_integer():
        raise bad(name, f"must be an integer, not {value!r}")
    if not math.isfinite(value):
        raise bad(name, f"must be finite, not {value!r}")
    if lo is not None and value < lo:
        raise bad(name, f"must be at least {lo}, not {value!r}")
    if hi is not None and value > hi:
        raise bad(name, f"must be at most {hi}, not {value!r}")
    return int(value) if integer else float(value)


def _typed(body: dict, name: str, default, kind: type, wrong):
    """body[name] if it is a `kind`, `default` if absent; else 400 with
    `wrong(value)` saying what it must be."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise bad(name, wrong(value))
    return value


def _string(body: dict, name: str, default: str = "") -> str:
    return _typed(body, name, default, str, lambda v: f"must be a string, not {type(v).__name__}")


def _bool(body: dict, name: str, default: bool) -> bool:
    return _typed(body, name, default, bool, lambda v: f"must be true or false, not {v!r}")


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
    if _number(body, "n", 1, integer=True) != 1:
        raise bad("n", "must be 1: one choice per request")
    if _number(body, "best_of", 1, integer=True) != 1:
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
            temperature=_number(body, "temperature", temperature, lo=0.0, hi=100.0),
            top_k=_number(body, "top_k", DEFAULT_TOP_K, lo=0, integer=True) if on is None or "top_k" in on else 0,
            top_p=_number(body, "top_p", DEFAULT_TOP_P, lo=0.0, hi=1.0) if on is None or "top_p" in on else 1.0,
            min_p=_number(body, "min_p", DEFAULT_MIN_P, lo=0.0, hi=1.0) if on is None or "min_p" in on else 0.0)
    except ValueError as e:
        name, _, rest = str(e).partition(" ")
        raise bad(name, rest) from None
    req.seed = _number(body, "seed", None, integer=True)
    if req.seed is not None:
        req.seed %= 1 << 31
    req.stop = _stops(body)
    req.stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise bad("stream_options", "must be an object")
        req.include_usage = _bool(options, "include_usage", False)


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
        value = _number(body, name, None, integer=True)
        if value is not None:
            if value == -1 and name == "n_predict":
                return None  # llama-server: -1 = until the context is full
            if value < (0 if name == "n_predict" or zero else 1):
                raise bad(name, f"must be at least 1, not {value}")
            return value
    return None


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def parse_chat(body: Any) -> Request:
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    out = [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    for i, m in enumerate(out):  # a tool's result answers the assistant's calls just before it
        if m["role"] == "tool" and not (i and (out[i - 1].get("tool_calls") or out[i - 1]["role"] == "tool")):
            raise bad(f"messages[{i}]", "is a tool's result, but no assistant message with 'tool_calls' comes "
                                        "before it")
    req = Request("chat", messages=out, max_tokens=_max_tokens(body, "max_completion_tokens", "max_tokens",
                                                                             "n_predict"))
    _sampling(body, req, temperature=1.0)
    _prediction(body, req)
    req.constraint = _constraint(body)
    req.tools = _tools(body)
    if req.tools is not None and req.constraint is not None and req.constraint.kind not in (
            "json_schema", "json_object"):
        raise ApiError(400, f"'{req.constraint.where}' (a grammar) together with 'tools' is not supported: "
                            "send one or the other, or a JSON schema as response_format",
                       param=req.constraint.where)
    return req


def _message(m: Any, where: str) -> dict:
    """One chat message as the chat template reads it: system, user and
    assistant text, an assistant's `tool_calls` (their arguments as objects,
    as templates write them), a `tool` message's result."""
    if not isinstance(m, dict):
        raise bad(where, "must be an object with 'role' and 'content'")
    role = m.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise bad(f"{where}.role", f"must be system, user, assistant or tool, not {role!r}")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _content(m.get("content"), f"{where}.content")}
    if role == "tool":
        out["tool_call_id"] = _string(m, "tool_call_id")
        if m.get("name") is not None:
            out["name"] = _string(m, "name")
    calls = m.get("tool_calls")
    if calls is not None and role == "assistant":
        if not isinstance(calls, list):
            raise bad(f"{where}.tool_calls", "must be a list of calls")
        out["tool_calls"] = [_history_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    return out


def _history_call(c: Any, where: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(where, "must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise bad(f"{where}.function.arguments", "must be a JSON object (as a string)") from None
    if not isinstance(args, dict):
        raise bad(f"{where}.function.arguments", "must be a JSON object")
    return {"id": str(c.get("id") or ""), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def _tools(body: dict) -> ToolUse | None:
    """OpenAI's `tools` (functions, each with a JSON schema of its
    parameters), `tool_choice` and `parallel_tool_calls`; None where there
    are no tools."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "names a tool, but 'tools' defines none")
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise bad("tools", f"must be a list of at most {MAX_TOOLS} functions")
    defined = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not NAME.match(fn["name"]):
            raise bad(f"tools[{i}]", "must be {\"type\": \"function\", \"function\": {\"name\": ...}} "
                                     "with a name of letters, digits, '_', '-' or '.' (at most 64)")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON schema object")
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise bad(f"tools[{i}].function.description", "must be a string")
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise bad(f"tools[{i}].function.strict", "must be true or false")
        defined.append(Tool(fn["name"], description, params, strict is True))
    if len({t.name for t in defined}) < len(defined):
        raise bad("tools", "names a function twice")
    parallel = _bool(body, "parallel_tool_calls", True)
    if choice is None or choice in ("auto", "none", "required"):
        return ToolUse(tuple(defined), choice or "auto", parallel=parallel)
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if name not in {t.name for t in defined}:
        raise bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"function\": "
                                 "{\"name\": ...}} naming one of 'tools'")
    return ToolUse(tuple(defined), "function", name, parallel)


def _content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{j}]", "must be a text part {\"type\": \"text\", \"text\": ...}: "
                                           "this server reads text only")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(where, "must be a string or a list of text parts")


def parse_completion(body: Any, *, native: bool = False) -> Request:
    """OpenAI's /v1/completions, or (`native`) llama-server's /completion:
    the same fields, its answer in llama-server's shape.  The prompt is a
    text or its token ids (one prompt a request); `echo` writes it back
    before the completion, with its own logprobs where they are asked for
    (`max_tokens: 0` then scores the prompt alone)."""
    body = _object(body)
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
    if body.get("suffix") is not None:
        raise bad("suffix", "is not supported here: use POST /infill for fill-in-the-middle")
    echo = _bool(body, "echo", False) and not native
    if echo and _bool(body, "stream", False):
        raise bad("echo", "cannot be streamed here: send it with 'stream': false")
    req = Request("completion", prompt=prompt, prompt_ids=ids, echo=echo, native=native,
                  max_tokens=_max_tokens(body, "max_tokens", "n_predict", zero=echo))
    if req.max_tokens is None and not native:
        req.max_tokens = 16  # OpenAI's default for completions (llama-server's /completion: until the end)
    _sampling(body, req, temperature=1.0 if not native else 0.8)
    if native:
        req.cache_prompt = _bool(body, "cache_prompt", True)
        _response_fields(body, req)
    _prediction(body, req)
    req.constraint = _constraint(body)
    return req


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
    body = _object(body)
    req = Request("infill", input_prefix=_string(body, "input_prefix"), input_suffix=_string(body, "input_suffix"),
                  prompt=_string(body, "prompt"), max_tokens=_max_tokens(body, "n_predict", "max_tokens"))
    extra = body.get("input_extra")
    if extra is not None:
        if not isinstance(extra, list):
            raise bad("input_extra", "must be a list of {filename, text} objects")
        for i, chunk in enumerate(extra):
            if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str) \
                    or not isinstance(chunk.get("filename", ""), str):
                raise bad(f"input_extra[{i}]", "must be an object with string 'filename' and 'text'")
            req.input_extra.append((chunk.get("filename") or "tmp", chunk.get("text") or ""))
    req.n_indent = _number(body, "n_indent", 0, lo=0, integer=True)
    req.t_max_predict_ms = _number(body, "t_max_predict_ms", 0.0, lo=0.0)
    _number(body, "t_max_prompt_ms", 0.0)  # accepted; the prompt is read in one go
    req.cache_prompt = _bool(body, "cache_prompt", True)
    _response_fields(body, req)
    _sampling(body, req, temperature=0.0)
    if not (req.input_prefix or req.input_suffix or req.prompt or req.input_extra):
        raise ApiError(400, "nothing to complete: 'input_prefix', 'prompt' and 'input_suffix' are all empty")
    return req
