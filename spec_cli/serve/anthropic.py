"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`),
as Claude Code and the `anthropic` client speak it: its fields checked and
named as Anthropic names them, then translated into the chat request every
door shares (api.parse_chat: the same field checks, tools, constraint,
sampling); the one reply stream translated into Anthropic's content blocks
and its event sequence.  Pure translation, no HTTP."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

from ..core.tools import MAX_TOOLS, NAME
from .api import MAX_STOPS, ApiError, Request, bad, json_object, parse_chat
from .door import Door, sse
from .messages import MEDIA, text_parts
from .replies import Reply, cached
from .shapes import anthropic_error
from .stream import Done, Failed, Text, answer, ending, pieces
from .thinking import switch

KNOWN = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
         "tools", "tool_choice", "metadata", "thinking", "service_tier", "output_config",
         # they change nothing in the answer: where it runs, caching hints, diagnostics, who asks
         "cache_control", "diagnostics", "inference_geo", "speed", "user_profile_id", "workspace_id",
         "seed", "speculation"}  # the last two: spec-cli's own, as in its OpenAI API
REFUSED = {"mcp_servers": "asks for MCP servers: this server connects to none",
           "container": "asks for a code-execution container: this server runs none"}
STOP = {"tool_calls": "tool_use", "length": "max_tokens", "word": "stop_sequence", "stop": "end_turn",
        "cancelled": "end_turn"}


def _text_of(value: Any, where: str) -> str:
    """A string, or a list of text blocks (`system`, a tool result's content)."""
    return text_parts(value, where, kinds=("text",), shape="text block")


def _message(m: Any, where: str, issued: set[str]) -> list[dict]:
    """One Anthropic message as the chat messages it stands for: an
    assistant's text and tool_use blocks as one message with tool_calls; a
    user's tool_result blocks as tool messages, then its text."""
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
        raise bad(f"{where}.role", "must be user or assistant")
    role, content = m["role"], m.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad(f"{where}.content", "must be a string or a list of content blocks")
    text, calls, results, thought = [], [], [], []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "thinking" and role == "assistant":
            if isinstance(block.get("thinking"), str):  # the template shows it or drops it
                thought.append(block["thinking"])
        elif kind == "redacted_thinking" and role == "assistant":
            continue
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                    or not isinstance(block.get("input", {}), dict):
                raise bad(at, "must be a tool_use block with string 'id' and 'name' and an object 'input'")
            issued.add(block["id"])
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": block.get("input", {})}})
        elif kind == "tool_result" and role == "user":
            call = block.get("tool_use_id")
            if call not in issued:
                raise bad(f"{at}.tool_use_id", f"is {str(call)[:80]!r}, which no earlier tool_use block issued")
            body = _text_of(block.get("content", ""), f"{at}.content")
            results.append({"role": "tool", "tool_call_id": call,
                            "content": ("Error: " + body) if block.get("is_error") is True else body})
        elif kind in MEDIA:
            raise bad(at, f"is {MEDIA[kind]}: this server reads text only")
        else:
            raise bad(at, f"is a {str(kind)[:40]!r} block: {role} messages here hold text"
                          + (" and tool_use blocks" if role == "assistant" else " and tool_result blocks"))
    out = results
    if role == "assistant":
        out.append({"role": "assistant", "content": "".join(text), **({"tool_calls": calls} if calls else {}),
                    **({"reasoning_content": "".join(thought)} if thought else {})})
    elif text or not results:
        out.append({"role": "user", "content": "".join(text)})
    return out


def _tools(body: dict) -> tuple[list | None, Any, bool]:
    """Anthropic's `tools` and `tool_choice` as OpenAI's `tools`,
    `tool_choice` and `parallel_tool_calls`."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is not None and (not isinstance(tools, list) or len(tools) > MAX_TOOLS):
        raise bad("tools", f"must be a list of at most {MAX_TOOLS} tools")
    out = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict):
            raise bad(f"tools[{i}]", "must be a tool {\"name\", \"description\", \"input_schema\"}")
        if t.get("type") not in (None, "custom"):
            raise bad(f"tools[{i}].type", f"is {str(t.get('type'))[:60]!r}, a server tool: this server runs none "
                                          "(define it as a client tool with 'input_schema')")
        if not isinstance(t.get("name"), str) or not NAME.match(t["name"]):
            raise bad(f"tools[{i}].name", "must be letters, digits, '_', '-' or '.' (at most 64)")
        if not isinstance(t.get("input_schema"), dict):
            raise bad(f"tools[{i}].input_schema", "must be a JSON schema object")
        if not isinstance(t.get("description", ""), str):
            raise bad(f"tools[{i}].description", "must be a string")
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                     "parameters": t["input_schema"]}})
    if choice is None:
        return out or None, None, True
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise bad("tool_choice", "must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}")
    parallel = choice.get("disable_parallel_tool_use", False)
    if not isinstance(parallel, bool):
        raise bad("tool_choice.disable_parallel_tool_use", "must be true or false")
    if kind == "tool":
        if not isinstance(choice.get("name"), str) or choice["name"] not in {t["function"]["name"] for t in out}:
            raise bad("tool_choice.name", "must name one of 'tools'")
        return out, {"type": "function", "function": {"name": choice["name"]}}, not parallel
    if kind != "auto" and not out:
        raise bad("tool_choice", f"is {kind!r}, but 'tools' defines none")
    return out or None, {"auto": "auto", "any": "required", "none": "none"}[kind], not parallel


def _output_format(config: Any) -> dict | None:
    """`output_config.format` (Anthropic's structured outputs) as a
    response_format; `output_config.effort` has no meaning here."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise bad("output_config", "must be an object such as {\"format\": {\"type\": \"json_schema\", ...}}")
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad("output_config.format", "must be {\"type\": \"json_schema\", \"schema\": {...}}")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def translate(body: Any, *, counting: bool = False) -> dict:
    """An Anthropic request as the OpenAI chat body parse_chat checks
    (`counting`: count_tokens', which has no max_tokens)."""
    body = json_object(body)
    for name, why in REFUSED.items():
        if body.get(name):
            raise bad(name, why)
    max_tokens = body.get("max_tokens")
    if not counting and max_tokens is None:
        raise bad("max_tokens", "is required (the most tokens the answer may have)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty list of {role, content} messages")
    system = body.get("system")
    out = [{"role": "system", "content": _text_of(system, "system")}] if system else []
    issued: set[str] = set()
    for i, m in enumerate(messages):
        out += _message(m, f"messages[{i}]", issued)
    stops = body.get("stop_sequences")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)
                              or len(stops) > MAX_STOPS):
        raise bad("stop_sequences", f"must be a list of at most {MAX_STOPS} strings")
    tools, choice, parallel = _tools(body)
    fmt = _output_format(body.get("output_config"))
    if not isinstance(body.get("stream", False), bool):
        raise bad("stream", "must be true or false")
    chat = {"messages": out, "max_tokens": max_tokens, "stop": stops, "stream": body.get("stream", False),
            **{k: body[k] for k in ("temperature", "top_p", "top_k", "seed", "speculation") if k in body}}
    if fmt is not None:
        chat["response_format"] = fmt
    chat.update(_thinking(body.get("thinking")))
    if tools:
        chat.update(tools=tools, tool_choice=choice, parallel_tool_calls=parallel)
    elif choice == "none":
        chat["tool_choice"] = "none"
    return chat


class Anthropic(Door):
    """`POST /v1/messages`."""

    def parse(self, body: Any) -> Request:
        req = parse_chat(translate(body))
        req.ignored = sorted(k for k in body if k not in KNOWN)
        if isinstance(body.get("output_config"), dict) and body["output_config"].get("effort") is not None:
            req.ignored.append("output_config.effort")
        return req

    def error(self, e: ApiError) -> dict:
        return anthropic_error(e)

    def full(self, reply: Reply, session) -> dict:
        a = answer(session, reply.req)
        content = [_thought(a.reasoning)] if a.reasoning else []
        content += [{"type": "text", "text": a.content}] if a.content else []
        content += [_tool_use(c) for c in a.calls]
        return {**_message_head(reply), "content": content, "stop_reason": STOP[a.reason],
                "stop_sequence": a.stop_word if a.reason == "word" else None,
                "usage": _usage(reply, session.stats), **reply.extras(session.stats)}

    async def events(self, reply: Reply, job) -> AsyncIterator[str]:
        """message_start, ping, a text block's deltas, each tool_use block
        (its input in one input_json_delta), message_delta, message_stop;
        what one piece of the job brings in one write."""
        head = {**_message_head(reply), "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": reply.n_prompt, "output_tokens": 0}}
        yield sse({"type": "message_start", "message": head}, "message_start") + sse({"type": "ping"}, "ping")
        state = _Blocks()
        async for p in pieces(job, reply.req):
            out = "".join(self._events_of(p, reply, state))
            if out:
                yield out

    def _events_of(self, p, reply: Reply, state: _Blocks) -> Iterator[str]:
        """The events of one piece of the job (stream.pieces)."""
        index, block = state.index, state.block
        if isinstance(p, Text):
            if p.reasoning:
                if block != "thinking":
                    yield _event("content_block_start", index=index, content_block=_thought(""))
                    block = "thinking"
                yield _event("content_block_delta", index=index,
                             delta={"type": "thinking_delta", "thinking": p.reasoning})
            if p.text:
                if block != "text":
                    if block == "thinking":
                        yield from_thought(index)
                        index += 1
                    yield _event("content_block_start", index=index, content_block={"type": "text", "text": ""})
                    block = "text"
                delta = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta",
                                                                                  "text": p.text}}
                if p.segments:
                    delta["spec_segments"] = [{"text": t, "drafted": bool(d)} for t, d in p.segments]
                yield sse(delta, "content_block_delta")
        elif isinstance(p, Done):
            if block is not None:
                yield from_thought(index) if block == "thinking" else _event("content_block_stop", index=index)
                index += 1
            calls = p.calls.calls if p.calls is not None else ()
            for call in calls:
                tool = _tool_use(call)
                yield _event("content_block_start", index=index, content_block={**tool, "input": {}})
                yield _event("content_block_delta", index=index,
                             delta={"type": "input_json_delta", "partial_json": json.dumps(tool["input"])})
                yield _event("content_block_stop", index=index)
                index += 1
            block = None
            s = p.session
            reason = ending(s, p.calls)
            yield sse({"type": "message_delta",
                       "delta": {"stop_reason": STOP[reason],
                                 "stop_sequence": s.stop_word if reason == "word" else None},
                       "usage": {"output_tokens": s.stats.generated}, **reply.extras(s.stats)}, "message_delta")
            yield _event("message_stop")
        elif isinstance(p, Failed):
            yield sse(anthropic_error(p.error), "error")
        state.index, state.block = index, block


@dataclass
class _Blocks:
    """A streamed message's state between pieces: the next block's index,
    and the block open ("thinking", "text" or None)."""

    index: int = 0
    block: str | None = None


def _thinking(value: Any) -> dict:
    """Anthropic's `thinking` as the chat fields: enabled (or adaptive)
    with its budget_tokens, or disabled (the template's own switch, and no
    thinking tokens where the template has none)."""
    if value is None:
        return {}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "disabled":
        return switch(False)
    if kind not in ("enabled", "adaptive"):
        raise bad("thinking", "must be {\"type\": \"enabled\", \"budget_tokens\": N}, adaptive or disabled")
    out = switch(True)
    budget = value.get("budget_tokens")
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise bad("thinking.budget_tokens", "must be a whole number of tokens")
        out["thinking_budget_tokens"] = budget
    return out


def _thought(text: str) -> dict:
    """A thinking block (its signature empty: nothing here signs it)."""
    return {"type": "thinking", "thinking": text, "signature": ""}


def from_thought(index: int) -> str:
    """The end of a streamed thinking block: its (empty) signature, then its stop."""
    return (_event("content_block_delta", index=index, delta={"type": "signature_delta", "signature": ""})
            + _event("content_block_stop", index=index))


def _event(kind: str, **fields) -> str:
    return sse({"type": kind, **fields}, kind)


def _message_head(reply: Reply) -> dict:
    return {"id": "msg_" + reply.rid.rsplit("-", 1)[-1], "type": "message", "role": "assistant",
            "model": reply.model}


def _tool_use(call: dict) -> dict:
    fn = call["function"]
    return {"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"), "name": fn["name"],
            "input": json.loads(fn["arguments"])}


def _usage(reply: Reply, stats) -> dict:
    """Anthropic counts the prompt tokens read from the cache apart."""
    hit = cached(reply.n_prompt, stats)
    return {"input_tokens": reply.n_prompt - hit, "output_tokens": stats.generated,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": hit}


def count_tokens(vocab, body: Any) -> dict:
    """`POST /v1/messages/count_tokens`: the prompt's tokens in the chat
    template, tools included."""
    req = parse_chat(translate(body, counting=True))
    use = req.tools
    tools = [t.as_openai() for t in use.tools] if use is not None and use.choice != "none" else None
    return {"input_tokens": len(vocab.tokenize_chat(req.messages, tools))}
