"""A chat request's messages and tools, checked field by field into what
the chat template reads: roles, text parts, an assistant's `tool_calls`, a
tool's result; OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`.
Pure functions, no HTTP."""

from __future__ import annotations

import json
from typing import Any

from ..core.tools import MAX_TOOLS, NAME, Tool, ToolUse
from .checks import flag, string, bad


def message(m: Any, where: str) -> dict:
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
        out["tool_call_id"] = string(m, "tool_call_id")
        if m.get("name") is not None:
            out["name"] = string(m, "name")
    thought = m.get("reasoning_content", m.get("reasoning"))
    if thought is not None and role == "assistant":  # a template that shows past thinking reads it
        if not isinstance(thought, str):
            raise bad(f"{where}.reasoning_content", "must be a string")
        out["reasoning_content"] = thought
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


def tools(body: dict) -> ToolUse | None:
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
    parallel = flag(body, "parallel_tool_calls", True)
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


# parts that are not text, as the APIs name them (what a refusal calls them)
MEDIA = {"image": "an image", "image_url": "an image", "input_image": "an image", "document": "a document",
         "input_file": "a file", "file": "a file", "input_audio": "audio"}


def text_parts(content: Any, where: str, *, kinds: tuple[str, ...], shape: str) -> str:
    """A string, or a list of parts of `kinds` (their "text", or a
    refusal's "refusal") joined: Anthropic's text blocks, the Responses
    API's input and output text.  A media part is refused naming what it
    is; anything else as not `shape`."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, f"must be a string or a list of {shape}s")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA:
            raise bad(f"{where}[{j}]", f"is {MEDIA[kind]}: this server reads text only")
        text = part.get("text", part.get("refusal")) if kind in kinds else None
        if not isinstance(text, str):
            raise bad(f"{where}[{j}]", f"must be a {shape} {{\"type\": \"{kinds[0]}\", \"text\": ...}}")
        out.append(text)
    return "".join(out)

