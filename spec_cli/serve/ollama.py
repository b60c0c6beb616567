"""Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`,
`/api/ps`, `/api/version`), as the `ollama` client and apps configured for
Ollama speak it: its fields and `options` translated into the request
every door shares (api.py's parsers: the same field checks), and the one
reply stream into Ollama's NDJSON lines with its timing fields (in
nanoseconds, from the real steps).  `spec-cli serve --port 11434` stands in
for Ollama.  Pure translation, no HTTP."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from .api import ApiError, Request, bad, json_object, parse_chat, parse_completion, parse_infill
from .door import Door
from .replies import Reply
from .shapes import ollama_error
from .stream import Done, Failed, Text, answer, ending, pieces
from .thinking import switch

VERSION = "0.12.0"   # the Ollama API this door follows (clients check a minimum)
# options that are the OpenAI fields of the same name
SAME = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "repeat_penalty", "repeat_last_n",
        "presence_penalty", "frequency_penalty", "typical_p", "mirostat", "tfs_z")
# options that become an OpenAI field of another name
RENAMED = {"max_tokens": "num_predict"}
# options about where and how the model runs: the server's command line decides them
PLACEMENT = {"num_keep", "num_thread", "num_gpu", "main_gpu", "num_batch", "use_mmap", "use_mlock", "numa",
             "low_vram", "vocab_only", "penalize_newline", "f16_kv", "logits_all", "mirostat_tau",
             "mirostat_eta", "num_gqa", "rope_frequency_base", "rope_frequency_scale"}
KNOWN = {"model", "messages", "prompt", "suffix", "system", "raw", "format", "options", "stream", "keep_alive",
         "tools", "think", "images", "template", "context", "speculation"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _options(body: dict, n_ctx: int) -> dict:
    """`options` (and `format`, `stream`) as the OpenAI fields they are."""
    opts = body.get("options") or {}
    if not isinstance(opts, dict):
        raise bad("options", "must be an object such as {\"temperature\": 0}")
    out = {k: opts[k] for k in SAME if k in opts}
    out.setdefault("temperature", 0.8)  # Ollama's default
    predict = opts.get("num_predict")
    if predict is not None:
        if isinstance(predict, bool) or not isinstance(predict, int) or predict < -2:
            raise bad("options.num_predict", "must be an integer: -1 (no limit), -2 (fill the context) or more")
        if predict > 0:
            out["max_tokens"] = predict
        elif predict == 0:
            raise bad("options.num_predict", "must not be 0 here: give -1 or a positive count")
    ctx = opts.get("num_ctx")
    if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, int) or ctx > n_ctx or ctx < 1):
        raise bad("options.num_ctx", f"is {ctx!r}, but this server's context holds {n_ctx} tokens: ask for at "
                                     f"most {n_ctx}, or restart it with a larger --ctx")
    fmt = body.get("format")
    if fmt == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        out["response_format"] = {"type": "json_object", "schema": fmt}
    elif fmt not in (None, ""):
        raise bad("format", "must be \"json\" or a JSON schema object")
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise bad("stream", "must be true or false")
    out["stream"] = stream
    if "speculation" in body:
        out["speculation"] = body["speculation"]
    return out


def _named(parse, fields: dict) -> Request:
    """`parse(fields)`, a refusal of an option named as Ollama names it (`options.temperature`,
    `options.num_predict` for the max_tokens it became)."""
    try:
        return parse(fields)
    except ApiError as e:
        name = RENAMED.get(e.param, e.param)
        if name in SAME or e.param in RENAMED:
            e.message = e.message.replace(f"'{e.param}'", f"'options.{name}'", 1)
            e.param = f"options.{name}"
        raise


def _ignored(body: dict) -> list[str]:
    opts = body.get("options") or {}
    names = [k for k in body if k not in KNOWN]
    names += [f"options.{k}" for k in opts if k not in SAME and k not in PLACEMENT
              and k not in ("num_predict", "num_ctx")]
    return sorted(names)


def _think(body: dict) -> dict:
    """Ollama's `think` (true, false, or "low", "medium", "high") as the chat's fields."""
    value = body.get("think")
    if value is None:
        return {}
    if isinstance(value, bool):
        return switch(value)
    if value in ("low", "medium", "high"):
        return {"reasoning_effort": value}
    raise bad("think", f"must be true, false, low, medium or high, not {value!r}")


def _messages(value: Any) -> list[dict]:
    """Ollama's messages as chat messages: tool calls get ids (Ollama's
    have none), and a tool's result answers the calls before it in turn."""
    if not isinstance(value, list) or not value:
        raise bad("messages", "must be a non-empty list of {role, content} messages")
    out, pending, n = [], [], 0
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}]", "must be an object with 'role' and 'content'")
        if m.get("images"):
            raise bad(f"messages[{i}].images", "holds images: this server reads text only")
        msg = {k: m[k] for k in ("role", "content") if k in m}
        if isinstance(m.get("thinking"), str) and m.get("role") == "assistant":
            msg["reasoning_content"] = m["thinking"]  # the template shows it or drops it
        calls = m.get("tool_calls")
        if calls is not None and m.get("role") == "assistant":
            if not isinstance(calls, list):
                raise bad(f"messages[{i}].tool_calls", "must be a list of {function: {name, arguments}}")
            msg["tool_calls"], pending = [], []
            for c in calls:
                n += 1
                call_id = f"call_{n}"
                msg["tool_calls"].append({"id": call_id, "type": "function",
                                          "function": c.get("function") if isinstance(c, dict) else None})
                pending.append(call_id)
        if m.get("role") == "tool":
            if not pending:
                raise bad(f"messages[{i}]", "is a tool's result, but no assistant message with 'tool_calls' "
                                            "comes before it")
            msg["tool_call_id"] = pending.pop(0) if len(pending) > 1 else pending[0]
        out.append(msg)
    return out


class Chat(Door):
    """`POST /api/chat`."""

    media_type = "application/x-ndjson"

    def __init__(self, n_ctx: int):
        self.n_ctx = n_ctx

    def error(self, e: ApiError) -> dict:
        return ollama_error(e)

    def parse(self, body: Any) -> Request:
        body = json_object(body)
        chat = {"messages": _messages(body.get("messages")), **_options(body, self.n_ctx), **_think(body)}
        if body.get("tools"):
            chat["tools"] = body["tools"]
        req = _named(parse_chat, chat)
        req.ignored = _ignored(body)
        return req

    def full(self, reply: Reply, session) -> dict:
        a = answer(session, reply.req)
        return {**self._line(reply), **self._said(reply, session, a), **self._end(reply, session, a.reason)}

    def _line(self, reply: Reply) -> dict:
        return {"model": reply.model, "created_at": _now()}

    def _said(self, reply: Reply, session, a) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": a.content or ""}
        if a.reasoning:
            msg["thinking"] = a.reasoning
        if a.calls:
            msg["tool_calls"] = _calls(a.calls)
        return {"message": msg}

    def _piece(self, text: str, thought: str = "") -> dict:
        return {"message": {"role": "assistant", "content": text, **({"thinking": thought} if thought else {})}}

    def _end(self, reply: Reply, session, reason: str) -> dict:
        """The last line's fields: why it ended (stream.Answer.reason) and its timings."""
        s = session.stats
        ns = lambda seconds: int(seconds * 1e9)  # noqa: E731
        return {"done": True, "done_reason": "length" if reason == "length" else "stop",
                "total_duration": ns(s.wall_s), "load_duration": 0, "prompt_eval_count": reply.n_prompt,
                "prompt_eval_duration": ns(s.prefill_s), "eval_count": s.generated,
                "eval_duration": ns(s.gen_s), **reply.extras(s)}

    async def events(self, reply: Reply, job) -> AsyncIterator[str]:
        """One JSON object a line: the text as it comes, the calls, then
        the line with `done: true` and the timings."""
        async for p in pieces(job, reply.req):
            if isinstance(p, Text):
                first = ""
                if p.reasoning and p.text:  # a step across the thinking's end: the thinking's line first
                    first = _nd({**self._line(reply), **self._piece("", p.reasoning), "done": False})
                line = {**self._line(reply), **self._piece(p.text, "" if p.text else p.reasoning), "done": False}
                if p.segments:
                    line["spec_segments"] = [{"text": t, "drafted": bool(d)} for t, d in p.segments]
                yield first + _nd(line)
            elif isinstance(p, Done):  # the calls' line and the last one in one write
                calls = ""
                if p.calls is not None and p.calls.calls:
                    calls = _nd({**self._line(reply), "message": {"role": "assistant", "content": "",
                                                                 "tool_calls": _calls(p.calls.calls)}, "done": False})
                last = self._piece("")
                yield calls + _nd({**self._line(reply), **last,
                                   **self._end(reply, p.session, ending(p.session, p.calls))})
            elif isinstance(p, Failed):
                yield _nd(ollama_error(p.error))


class Generate(Chat):
    """`POST /api/generate`: a prompt in the chat template (with `system`),
    as written (`raw`), or around a `suffix` (fill-in-the-middle, as
    `/infill`)."""

    def parse(self, body: Any) -> Request | dict:
        body = json_object(body)
        prompt, suffix = body.get("prompt", ""), body.get("suffix")
        if not isinstance(prompt, str):
            raise bad("prompt", "must be a string")
        for name in ("template", "context"):
            if body.get(name):
                raise bad(name, "is not supported here: send the prompt as it should be read with 'raw': true, "
                                "or the conversation to /api/chat")
        if body.get("images"):
            raise bad("images", "holds images: this server reads text only")
        if not prompt and not suffix:  # Ollama's way to load a model: it is loaded
            return {"model": body.get("model") or "", "created_at": _now(), "response": "", "done": True,
                    "done_reason": "load"}
        fields = _options(body, self.n_ctx)
        if suffix is not None:
            if not isinstance(suffix, str):
                raise bad("suffix", "must be a string")
            if "response_format" in fields:
                raise bad("format", "cannot constrain a fill-in-the-middle completion ('suffix'): leave it out")
            opts = body.get("options") or {}
            fields["temperature"] = opts.get("temperature", 0.0)  # an editor's completion: the likeliest
            req = _named(parse_infill, {"input_prefix": prompt, "input_suffix": suffix, **fields})
            req.fim_from = "suffix"  # a model without FIM tokens: a 400 naming it
        elif body.get("raw") is True:
            req = _named(lambda body: parse_completion(body, native=True), {"prompt": prompt, **fields})
        else:
            system = body.get("system")
            if system is not None and not isinstance(system, str):
                raise bad("system", "must be a string")
            messages = ([{"role": "system", "content": system}] if system else []) + \
                [{"role": "user", "content": prompt}]
            req = _named(parse_chat, {"messages": messages, **fields, **_think(body)})
        req.ignored = _ignored(body)
        return req

    def _said(self, reply: Reply, session, a) -> dict:
        if reply.req.kind != "chat":
            return {"response": session.text}
        return {"response": a.content or "", **({"thinking": a.reasoning} if a.reasoning else {})}

    def _piece(self, text: str, thought: str = "") -> dict:
        return {"response": text, **({"thinking": thought} if thought else {})}


def _nd(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def _calls(calls) -> list[dict]:
    return [{"function": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
            for c in calls]


def model_entry(name: str, info: dict) -> dict:
    """The model as /api/tags and /api/ps list it (llama.facts.describe's facts)."""
    params = info.get("parameters") or 0
    size = f"{params / 1e9:.1f}B" if params >= 1e9 else f"{params / 1e6:.0f}M"
    family = info.get("architecture") or ""
    return {"name": name, "model": name, "modified_at": _now(), "size": info.get("size_bytes", 0),
            "digest": "", "details": {"parent_model": "", "format": "gguf", "family": family,
                                      "families": [family] if family else None, "parameter_size": size,
                                      "quantization_level": info.get("quantization") or ""}}


def show(name: str, info: dict, n_ctx: int, template: str, tools: bool) -> dict:
    """/api/show: the details, the template and what the model can do."""
    arch = info.get("architecture") or "unknown"
    from ..core.reasoning import markers_of

    caps = ["completion"] + (["tools"] if tools else []) + (["insert"] if info.get("fim_tokens") else []) \
        + (["thinking"] if markers_of(template) else [])
    return {"license": "", "modelfile": f"# served by spec-cli\nFROM {info.get('file', '')}\n",
            "parameters": "", "template": template, "details": model_entry(name, info)["details"],
            "model_info": {"general.architecture": arch, "general.name": info.get("name") or name,
                           "general.basename": name,  # the name VS Code Copilot's Ollama provider shows
                           "general.parameter_count": info.get("parameters") or 0,
                           f"{arch}.context_length": n_ctx},
            "capabilities": caps, "modified_at": _now()}
