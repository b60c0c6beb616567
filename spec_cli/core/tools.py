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


def family_of(template: str | None, rendered: str | None = None) -> str | None:
    """The tool-call syntax a chat template defines, or None (no tools):
    read from `rendered`, the template's own text for an assistant turn
    that called a tool (llama.vocab.Vocab.call_sample), where there is one,
    else from the template's source."""
    if not template:
        return None
    text = rendered if rendered else template
    for family, marks in FAMILY_MARKS:
        if all(m in text for m in marks):
            return family
    if rendered is not None and ("<|python_tag|>" in template or "ipython" in template):
        return "llama3"
    return None


# how each family's call shows in a template's text, in the order they are told apart
FAMILY_MARKS = (("qwen3coder", ("<tool_call>", "<function=")), ("hermes", ("<tool_call>",)),
                ("mistral2", ("[TOOL_CALLS]", "[ARGS]")), ("mistral", ("[TOOL_CALLS]",)),
                ("deepseek", ("tool▁call▁begin",)), ("commandr", ("<|START_ACTION|>",)),
                ("granite", ("<|tool_call|>",)), ("gptoss", ("to=functions.",)),
                ("llama3", ("<|python_tag|>",)), ("llama3", ("ipython",)))
# where a call in each family's own syntax opens (under "auto" the grammar masks from there: core/lazy.py)
OPENINGS = {"hermes": "<tool_call>", "qwen3coder": "<tool_call>", "mistral": "[TOOL_CALLS]",
            "mistral2": "[TOOL_CALLS]", "deepseek": "<｜tool▁calls▁begin｜>", "granite": "<|tool_call|>",
            "commandr": "<|START_ACTION|>"}


def triggers(family: str) -> tuple[str, ...]:
    """The texts from which a lazy tool grammar masks: the family's opening,
    a ```json fence's and a JSON call's (every family's grammar takes the
    forms small models write).  The fence masks from its first line, as a
    grammar applied from the reply's start would: left to itself there, the
    default 1.5B writes several calls as a pretty-printed list that runs
    past the token limit (BFCL's parallel cases: 0 of 20 answered whole,
    against 10 of 20 with the fence constrained)."""
    return tuple(t for t in (OPENINGS.get(family), "```json", '{"name"') if t)


# the grammars core/tools.py writes (the others read their calls, core/calls.py, and get the generic form)
GRAMMARS = ("hermes", "qwen3coder", "mistral", "mistral2", "llama3", "deepseek", "granite", "commandr")


def _args_key(family: str) -> str:
    return "parameters" if family in ("llama3", "commandr") else "arguments"


def call_schema(tool: Tool, family: str) -> dict:
    """One call of `tool` in `family`'s JSON: its name, then its arguments."""
    key, name = _args_key(family), "tool_name" if family == "commandr" else "name"
    args = tool.parameters if tool.parameters is not None else {"type": "object"}
    if family == "commandr":
        return {"type": "object", "properties": {"tool_call_id": {"type": "string"}, name: {"const": tool.name},
                                                 key: args},
                "required": ["tool_call_id", name, key], "additionalProperties": False}
    return {"type": "object", "properties": {name: {"const": tool.name}, key: args},
            "required": [name, key], "additionalProperties": False}


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

    call = f"call: {_json(one, use.strict)}"
    many = "block (sep block)*" if use.parallel else "block"
    if family in ("hermes", "qwen3coder"):
        body = "call" if family == "hermes" else "xcall"
        rules = [f'block: {marker("<tool_call>")} "\\n" {body} "\\n" {marker("</tool_call>")}',
                 'sep: "\\n"', call if family == "hermes" else _xml(use)]
        return _wrap(use, f'calls: {many} "\\n"?', rules, "FREE? calls?")
    if family == "mistral":
        arr = {"type": "array", "items": one, "minItems": 1, **({} if use.parallel else {"maxItems": 1})}
        start = "start: TEXT | calls" if free else "start: calls"
        return "\n".join([start, f'calls: {marker("[TOOL_CALLS]")} call', f"call: {_json(arr, use.strict)}",
                          "TEXT: /[^\\[](.|\\n)*/"])
    if family == "mistral2":
        return _wrap(use, f"calls: {many}", [f'block: {marker("[TOOL_CALLS]")} named', "sep: \"\"",
                                            _name_then_args(use, marker("[ARGS]"))], "FREE? calls")
    if family == "deepseek":
        return _wrap(use, f'calls: {marker("<｜tool▁calls▁begin｜>")} {many} {marker("<｜tool▁calls▁end｜>")}',
                     [f'block: {marker("<｜tool▁call▁begin｜>")} named {marker("<｜tool▁call▁end｜>")}',
                      "sep: \"\"", _name_then_args(use, marker("<｜tool▁sep｜>"))], "FREE? calls")
    if family in ("granite", "commandr"):  # a list of calls, laid out as the template lays it out
        head, tail = (("<|tool_call|>", None) if family == "granite" else ("<|START_ACTION|>", "<|END_ACTION|>"))
        items = 'call (WS "," WS call)*' if use.parallel else "call"
        return _wrap(use, f'calls: {marker(head)} "[" WS {items} WS "]"' + (f" {marker(tail)}" if tail else ""),
                     [call, "WS: /[ \\t\\n]*/"], "FREE? calls")
    if family == "llama3":  # one JSON call as the whole reply; text may not start with "{"
        start = "start: TEXT | call" if free else "start: call"
        return "\n".join([start, call, "TEXT: /[^{](.|\\n)*/"])
    # any other template: the generic form, calls as JSON objects a line each
    return _wrap(use, "calls: " + ('call ("\\n" call)*' if use.parallel else "call"), [call], None)


# text that is not a call: none of the forms small models write a call in (a ```json fence,
# a reply that opens with {"name")
FREE = 'FREE: /(.|\\n)+/ & ~/(.|\\n)*```json\\n(.|\\n)*/ & ~/[{]"name"(.|\\n)*/'


def _wrap(use: ToolUse, calls: str, rules: list[str], template: str | None) -> str:
    """The reply's grammar around a family's `calls` rule: under "auto",
    free text (FREE) and the family's calls (`template`), or text up to a
    ```json fence of calls, or a reply that is calls as JSON a line each
    (the forms small models write, constrained once they name a tool);
    else the calls alone.  An object that names no tool of the request is
    let be, as text (`stray`): a model that reaches for a tool it was not
    given is not made to call one it was (the question needs none)."""
    if use.choice != "auto":
        return "\n".join(["start: calls", calls, *rules])
    head = '(jcall "\\n")*' if use.parallel else ""
    more = '("\\n" jcall)*' if use.parallel else ""
    alts = [template or "FREE?", "text fenced", "bare", "lines tail"]
    return "\n".join([f"start: {' | '.join(alts)}", calls, *rules, FREE,
                       'text[suffix="```json\\n"]: /(.|\\n)*/ & ~/[{]"name"(.|\\n)*/',
                       f'fenced: {head} (jcall "\\n```" FREE? | stray)', f'bare: {head} (jcall "\\n"? | stray)',
                       # text, then calls from a line's start to the end
                       'lines[suffix="\\n{\\"name\\": \\""]: /(.|\\n)*/',
                       f'tail: named {more} "\\n"? | STRAY', *_named(use)])


def _named(use: ToolUse) -> list[str]:
    """`jcall`: a call as JSON, {"name": ..., "arguments": ...}, its name one
    of the tools and its arguments that tool's; `stray`: the same opening
    and a name that is none of them, then any text to the end."""
    taken = "|".join(re.escape(t.name) for t in use.calls)
    return ['jcall: "{\\"name\\": \\"" named', _name_then_args(use, json.dumps('", "arguments": '), '"}"'),
            'stray: "{\\"name\\": \\"" STRAY', f'STRAY: /(.|\\n)*/ & ~/({taken})"(.|\\n)*/']


def _name_then_args(use: ToolUse, between: str, after: str = "") -> str:
    """`named`: a tool's name, `between` (a marker or a literal), its
    arguments by its schema (then `after`), for each tool of `use`."""
    return "named: " + " | ".join(f"{json.dumps(t.name)} {between} {_json(_args(t), use.strict)} {after}".rstrip()
                                  for t in use.calls)


def _args(tool: Tool) -> dict:
    return tool.parameters if tool.parameters is not None else {"type": "object"}


def _xml(use: ToolUse) -> str:
    """Qwen3-Coder's calls: each tool's name, then its parameters by name,
    each value text up to its closing tag (the schema's types are read
    back from the text: core/calls.py)."""
    alts = []
    for t in use.calls:
        props = list((_args(t).get("properties") or {}).keys())
        if props:
            pname = " | ".join(json.dumps(p) for p in props)
            alts.append(f'"<function={t.name}>\\n" ("<parameter=" ({pname}) ">\\n" value "\\n")* "</function>"')
        else:
            alts.append(f'"<function={t.name}>\\n</function>"')
    return "\n".join([f"xcall: {' | '.join(alts)}", 'value[suffix="\\n</parameter>"]: /(.|\\n)*/'])
