"""Tool calls: the grammar that makes a model's calls parse, and the parser
that turns its text into OpenAI `tool_calls`.  Pure, no I/O.

A GGUF's chat template renders the tools and says how the model calls
them; the model family is told by that template (`family_of`):

  hermes   (Qwen2.5/3, Hermes, ...)  <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>
  llama3   (Llama 3.1-3.3)           {"name": ..., "parameters": {...}}, alone in the reply
  mistral  (Mistral, Ministral)      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]

`grammar` writes the Lark grammar (llguidance's, with inline `%json`) for
a request's tools and tool_choice: under "auto" any text may come, and once
a call starts (the family's marker) its name is one of the tools and its
arguments follow that tool's JSON schema, so every call parses; under
"required" or a named function the reply is calls from its first token.
Small models also write calls their template does not define -- a JSON
object naming a tool, in a ```json fence or bare (or in doubled braces, as
Qwen2.5-Coder's GGUF template shows one) -- and `parse` reads those too
(`Parsed.form` says which form it was).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass

from .schema import lower

FAMILIES = ("hermes", "llama3", "mistral")
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
MAX_TOOLS = 128
# JSON inside a call laid out as core/constraint.py lays out a schema's; a
# tool's parameters are enforced as far as the engine can (OpenAI's functions
# are not strict unless they say so: LENIENT): the keywords it cannot enforce
# are the compiled grammar's warnings, which the response shows; a strict
# function's are refused
LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
LENIENT = {"lenient": True, "coerce_one_of": True}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict | None = None   # a JSON schema of the arguments (None: any object)
    strict: bool = False             # OpenAI's function.strict: every keyword enforced, or a 400

    def as_openai(self) -> dict:
        fn: dict = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self.parameters if self.parameters is not None else {"type": "object"}
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolUse:
    """A request's tools and how it lets the model use them: `choice` is
    "auto", "none", "required" or "function" (then `name` is the one)."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    name: str | None = None
    parallel: bool = True

    @property
    def strict(self) -> bool:
        """A tool said `strict`: the calls' schemas are compiled strictly
        (the engine has one grammar for them all)."""
        return any(t.strict for t in self.tools)

    @property
    def calls(self) -> tuple[Tool, ...]:
        """The tools a call may name."""
        return tuple(t for t in self.tools if self.name is None or t.name == self.name)


def family_of(template: str | None) -> str | None:
    """The tool-call syntax a chat template defines, or None (no tools)."""
    if not template:
        return None
    if "<tool_call>" in template:
        return "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return None


def _args_key(family: str) -> str:
    return "parameters" if family == "llama3" else "arguments"


def call_schema(tool: Tool, family: str) -> dict:
    """One call of `tool` in `family`'s JSON: its name, then its arguments."""
    key = _args_key(family)
    return {"type": "object", "properties": {"name": {"const": tool.name},
                                             key: tool.parameters if tool.parameters is not None
                                             else {"type": "object"}},
            "required": ["name", key], "additionalProperties": False}


def _json(schema: dict, strict: bool) -> str:
    """A schema as inline JSON in the Lark grammar, rewritten first as
    core/schema.py rewrites a request's (a tool's `oneOf`, `not`, ...)."""
    schema = lower(schema)[0]
    return "%json " + json.dumps({**schema, "x-guidance": LAYOUT if strict else {**LAYOUT, **LENIENT}})


def grammar(use: ToolUse, family: str, special: dict[str, int], answer: dict | None = None,
            answer_strict: bool = False) -> str:
    """The Lark grammar of a reply under `use` in `family`'s syntax.
    `special`: the ids of the family's marker tokens where the vocabulary
    has them as special tokens (else the markers are text).  `answer`: the
    JSON schema a reply that calls no tool must follow (the request's
    response_format: an agent that wants a typed answer; `answer_strict`:
    its `strict`), else any text."""
    one = {"anyOf": [call_schema(t, family) for t in use.calls]}
    free = use.choice == "auto"
    if answer is not None:
        body = grammar(ToolUse(use.tools, "required", use.name, use.parallel), family, special)
        if not free:
            return body
        head, rest = body.split("\n", 1)
        return "\n".join([head.replace("start: ", "start: answer | "), rest,
                          f"answer: {_json(answer, answer_strict)}"])

    def marker(text: str) -> str:
        return f"<[{special[text]}]>" if text in special else json.dumps(text)

    if family == "hermes":
        block = f'{marker("<tool_call>")} "\\n" call "\\n" {marker("</tool_call>")}'
        # a newline between blocks, and one may end the reply (the model's wont)
        calls = 'block ("\\n" block)* "\\n"?' if use.parallel else 'block "\\n"?'
        start = "start: TEXT? calls?" if free else "start: calls"
        return "\n".join([start, f"calls: {calls}", f"block: {block}", f"call: {_json(one, use.strict)}",
                          "TEXT: /(.|\\n)+/"])
    if family == "mistral":
        many = {"type": "array", "items": one, "minItems": 1, **({} if use.parallel else {"maxItems": 1})}
        start = "start: TEXT | calls" if free else "start: calls"
        return "\n".join([start, f'calls: {marker("[TOOL_CALLS]")} call', f"call: {_json(many, use.strict)}",
                          "TEXT: /[^\\[](.|\\n)*/"])
    # llama3: one JSON call as the whole reply; text may not start with "{"
    start = "start: TEXT | call" if free else "start: call"
    return "\n".join([start, f"call: {_json(one, use.strict)}", "TEXT: /[^{](.|\\n)*/"])


# -- reading a reply --------------------------------------------------------------

MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>")


@dataclass(frozen=True)
class Parsed:
    """A reply read for calls: the text before them (None if none), the
    calls in OpenAI's shape, and the form they came in: "template" (the
    family's own syntax), "fenced" (a ```json block naming a tool), "bare"
    (the reply is a JSON object naming a tool), or None (no call); `start`:
    where in the reply the calls begin."""

    content: str | None
    calls: tuple[dict, ...] = ()
    form: str | None = None
    start: int = 0


def _call(obj, use: ToolUse) -> dict | None:
    """`obj` as an OpenAI tool call, if it names one of the tools."""
    if not isinstance(obj, dict) or obj.get("name") not in {t.name for t in use.calls}:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}}


def _calls(value, use: ToolUse) -> list[dict] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call(v, use) for v in items]
    return calls if calls and all(calls) else None


def _decode_at(text: str, pos: int):
    """The JSON value at text[pos:] (after blanks), and where it ends; None if none."""
    dec = json.JSONDecoder()
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    try:
        return dec.raw_decode(text, pos)
    except ValueError:
        return None


def parse(text: str, use: ToolUse) -> Parsed:
    """The calls in a reply under `use` (tool_choice "none": none)."""
    if use.choice == "none":
        return Parsed(text)
    template = _template_calls(text, use)
    if template is not None:
        return template
    stripped = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*\n?(.*?)\n?```", stripped, re.S)
    # Qwen2.5-Coder's GGUF template shows a call as {{"name": ..., "arguments": ...}} (a doubled
    # brace from a format string), and its models write it so, without the <tool_call> tags
    doubled = stripped[1:-1] if stripped.startswith("{{") and stripped.endswith("}}") else None
    for body, form in ((fence.group(1), "fenced") if fence else (None, None), (stripped, "bare"),
                       (doubled, "bare")):
        if body is None:
            continue
        found = _decode_at(body, 0)
        if found is not None and not body[found[1]:].strip():
            calls = _calls(found[0], use)
            if calls:
                return Parsed(None, tuple(calls), form)
    return Parsed(text)


def _template_calls(text: str, use: ToolUse) -> Parsed | None:
    """Calls in a family's own syntax: <tool_call> blocks, [TOOL_CALLS] and
    a list, or <|python_tag|> and an object."""
    for marker in MARKERS:
        at = text.find(marker)
        if at < 0:
            continue
        calls, pos = [], at
        while pos >= 0:
            found = _decode_at(text, pos + len(marker))
            got = _calls(found[0], use) if found else None
            if not got:
                return None
            calls += got
            pos = text.find(marker, found[1]) if marker == "<tool_call>" else -1
        content = text[:at].strip() or None
        return Parsed(content, tuple(calls), "template", at)
    return None


class StreamFilter:
    """What of a streamed reply may go out as content while calls may
    still come: text up to a call's marker; nothing of a reply that starts
    as a call might (with "{", "[" or a fence) until it is over."""

    def __init__(self, use: ToolUse):
        self.use, self.text, self.sent = use, "", 0

    def feed(self, piece: str) -> str:
        self.text += piece
        if self.use.choice == "none":
            return self._send(len(self.text))
        head = self.text.lstrip()
        if head[:1] in ("{", "[", "`") or (not head and self.text):
            return ""  # the whole reply may be a call: wait for its end
        cut = min([i for i in (self.text.find(m) for m in MARKERS) if i >= 0], default=None)
        if cut is None:  # hold back a tail that may begin a marker
            cut = len(self.text)
            for m in MARKERS:
                for n in range(min(len(m) - 1, len(self.text)), 0, -1):
                    if self.text.endswith(m[:n]):
                        cut = min(cut, len(self.text) - n)
                        break
        return self._send(cut)

    def _send(self, upto: int) -> str:
        out = self.text[self.sent:upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return out

    def finish(self) -> tuple[str, Parsed]:
        """At the end: the content not sent yet, and the reply read for calls."""
        parsed = parse(self.text, self.use)
        if parsed.calls:
            return self.text[self.sent:parsed.start].rstrip() if parsed.start > self.sent else "", parsed
        return self._send(len(self.text)), parsed
