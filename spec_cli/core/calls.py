"""Reading a reply for tool calls, in every family's own syntax and in the
forms small models write.  Pure, no I/O.

The families' syntaxes (each read wherever it starts in the reply, as many
calls as it holds):

  hermes      <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>     Qwen2.5/3, Hermes
  qwen3coder  <tool_call>\\n<function=NAME>\\n<parameter=P>\\nV\\n</parameter>\\n</function>\\n</tool_call>
  mistral     [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]             Mistral Nemo and older
  mistral2    [TOOL_CALLS]NAME[ARGS]{...} (a [CALL_ID]id between, some)      Mistral Small 3.2+, Devstral
  llama3      <|python_tag|>{...}, or the reply a JSON object with "parameters"
  deepseek    <｜tool▁call▁begin｜>[function<｜tool▁sep｜>]NAME[\\n```json\\n]{...}[```]<｜tool▁call▁end｜>
  granite     <|tool_call|>[{"name": ..., "arguments": {...}}, ...] [<|/tool_call|>]  Granite, Phi-4
  commandr    <|START_ACTION|>[{"tool_name": ..., "parameters": {...}}, ...]<|END_ACTION|>
  gptoss      ...to=functions.NAME ...<|message|>{...}<|call|>              gpt-oss (harmony)

Small models also write calls their template does not define: JSON objects
naming a tool in ```json fences (one a fence, several a line each, or a
list), or bare at the reply's end; in doubled braces as Qwen2.5-Coder's GGUF
template shows one.  `Parsed.form` says which: "template", "fenced", "bare".
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass

# the marker texts a reply's text must keep (llama.vocab.Vocab.shown_specials): calls' and thinking's
MARKER_TEXTS = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>",
                "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                "<｜tool▁calls▁end｜>", "<|tool_call|>", "<|/tool_call|>", "<|START_ACTION|>", "<|END_ACTION|>",
                "<|START_THINKING|>", "<|END_THINKING|>", "[THINK]", "[/THINK]", "<think>", "</think>",
                "<|channel|>", "<|message|>", "<|constrain|>", "<|call|>")
# where a call in some family's syntax begins (the stream holds text back from there)
MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
           "<|tool_call|>", "<|START_ACTION|>", "<|channel|>commentary to=", " to=functions.")


@dataclass(frozen=True)
class Parsed:
    """A reply read for calls: the text before them (None if none), the
    calls in OpenAI's shape, the form they came in ("template", "fenced",
    "bare", or None: no call), and where in the reply the calls begin."""

    content: str | None
    calls: tuple[dict, ...] = ()
    form: str | None = None
    start: int = 0


def _new(name: str, args: dict) -> dict:
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def _names(use) -> set[str]:
    return {t.name for t in use.calls}


def _call(obj, use) -> dict | None:
    """`obj` as an OpenAI tool call, if it names one of the tools (with
    "arguments", "parameters" or, Command R's, "tool_name"/"parameters")."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name", obj.get("tool_name"))
    if name not in _names(use):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return _new(name, args) if isinstance(args, dict) else None


def _calls(value, use) -> list[dict] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_call(v, use) for v in items]
    return calls if calls and all(calls) else None


def _decode_at(text: str, pos: int):
    """The JSON value at text[pos:] (after blanks), and where it ends; None if none."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except ValueError:
        return None


def parse(text: str, use) -> Parsed:
    """The calls in a reply under `use` (core.tools.ToolUse; tool_choice
    "none": none), the family's syntax first, then the JSON forms.  With
    parallel calls off, the first call alone."""
    if use.choice == "none":
        return Parsed(text)
    found = _template_calls(text, use) or _json_calls(text, use)
    if found is None:
        return Parsed(text)
    if not use.parallel and len(found.calls) > 1:
        found = Parsed(found.content, found.calls[:1], found.form, found.start)
    return found


# -- the families' own syntaxes ------------------------------------------------------

def _hermes(text: str, at: int, use) -> tuple[list, int] | None:
    """<tool_call> blocks, JSON or Qwen3-Coder's XML, one after another."""
    calls, pos = [], at
    while True:
        body_at = pos + len("<tool_call>")
        end = text.find("</tool_call>", body_at)
        body = text[body_at:end if end >= 0 else len(text)]
        got = _xml_call(body, use) if "<function=" in body else None
        if got is None:
            found = _decode_at(text, body_at)
            got = _calls(found[0], use) if found else None
            if not got:
                return None
        calls += got
        nxt = text.find("<tool_call>", end if end >= 0 else len(text))
        if end < 0 or nxt < 0:
            return calls, at
        pos = nxt


XML_CALL = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
XML_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def _xml_call(body: str, use) -> list | None:
    """Qwen3-Coder's calls: each parameter's text, read as JSON where its
    schema says it is not a string."""
    out = []
    for m in XML_CALL.finditer(body):
        name = m.group(1).strip()
        tool = next((t for t in use.calls if t.name == name), None)
        if tool is None:
            return None
        props = (tool.parameters or {}).get("properties", {}) if isinstance(tool.parameters, dict) else {}
        args = {}
        for p in XML_PARAM.finditer(m.group(2)):
            key, value = p.group(1).strip(), p.group(2)
            kind = props.get(key, {}).get("type") if isinstance(props.get(key), dict) else None
            if kind not in (None, "string"):
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
            args[key] = value
        out.append(_new(name, args))
    return out or None


MISTRAL_NAMED = re.compile(r"\s*([A-Za-z0-9_.\-]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\]")
MISTRAL_NEXT = re.compile(r"\s*([A-Za-z0-9_.\-]+)\[ARGS\]")


def _mistral(text: str, at: int, use) -> tuple[list, int] | None:
    """[TOOL_CALLS] and a list (older), or NAME[ARGS]{...} after each
    [TOOL_CALLS] (current; a [CALL_ID]id may come between)."""
    calls, pos = [], at
    while pos >= 0:
        pos += len("[TOOL_CALLS]")
        found = _decode_at(text, pos)
        got = _calls(found[0], use) if found else None
        if got:
            calls += got
            pos = found[1]
        else:
            m = MISTRAL_NAMED.match(text, pos)
            found = _decode_at(text, m.end()) if m else None
            if not found or not isinstance(found[0], dict) or m.group(1) not in _names(use):
                return None
            calls.append(_new(m.group(1), found[0]))
            pos = found[1]
        # current Mistral writes the next call as NAME[ARGS]{...} again, or after another [TOOL_CALLS]
        while (m := MISTRAL_NEXT.match(text, pos)) and m.group(1) in _names(use):
            found = _decode_at(text, m.end())
            if not found or not isinstance(found[0], dict):
                break
            calls.append(_new(m.group(1), found[0]))
            pos = found[1]
        pos = text.find("[TOOL_CALLS]", pos)
    return calls, at


DEEPSEEK = re.compile(r"<｜tool▁call▁begin｜>(?:function<｜tool▁sep｜>)?\s*([^\n<｜]+?)\s*(?:<｜tool▁sep｜>)?\s*"
                      r"(?:```(?:json)?\s*)?(\{.*?\})\s*(?:```)?\s*<｜tool▁call▁end｜>", re.S)
GPT_OSS = re.compile(r"to=functions\.([A-Za-z0-9_.\-]+)(?:(?!<\|message\|>).)*<\|message\|>(.*?)(?:<\|call\|>|$)",
                     re.S)


def _by_pattern(pattern: re.Pattern, text: str, at: int, use) -> tuple[list, int] | None:
    calls = []
    for m in pattern.finditer(text, at):
        found = _decode_at(m.group(2), 0)
        if m.group(1) not in _names(use) or not found or not isinstance(found[0], dict):
            return None
        calls.append(_new(m.group(1), found[0]))
    return (calls, at) if calls else None


def _list_after(marker: str):
    """<|tool_call|>[...] (Granite, Phi-4), <|START_ACTION|>[...] (Command R7B), <|python_tag|>{...}."""
    def read(text: str, at: int, use) -> tuple[list, int] | None:
        found = _decode_at(text, at + len(marker))
        got = _calls(found[0], use) if found else None
        return (got, at) if got else None
    return read


READERS = (("<tool_call>", _hermes), ("[TOOL_CALLS]", _mistral),
           ("<｜tool▁call▁begin｜>", lambda t, a, u: _by_pattern(DEEPSEEK, t, a, u)),
           ("<|tool_call|>", _list_after("<|tool_call|>")), ("<|START_ACTION|>", _list_after("<|START_ACTION|>")),
           ("<|python_tag|>", _list_after("<|python_tag|>")),
           (" to=functions.", lambda t, a, u: _by_pattern(GPT_OSS, t, a, u)))


def _template_calls(text: str, use) -> Parsed | None:
    """Calls in a family's own syntax, from its first marker on."""
    for marker, read in READERS:
        at = text.find(marker)
        if at < 0:
            continue
        got = read(text, at, use)
        if got:
            begin = text.find("<｜tool▁calls▁begin｜>")
            start = begin if 0 <= begin < at else at
            if marker == " to=functions.":  # harmony's call header begins at its channel
                start = max(text.rfind("<|start|>", 0, at), text.rfind("<|channel|>", 0, at), 0)
            return Parsed(text[:start].strip() or None, tuple(got[0]), "template", start)
        return None
    return None


# -- the JSON forms small models write -------------------------------------------------

FENCE = re.compile(r"```(?:json|JSON|tool_call|tool_code)?[ \t]*\n?(.*?)```", re.S)


def _json_calls(text: str, use) -> Parsed | None:
    """Calls as JSON: in ```json fences (each fence only calls), or bare
    at the reply's end (each line from a line's start on a call)."""
    fenced, first = [], None
    for m in FENCE.finditer(text):
        calls = _sequence(m.group(1), use)
        if calls:
            fenced += calls
            first = m.start() if first is None else first
    if fenced:
        return Parsed(text[:first].strip() or None, tuple(fenced), "fenced", first)
    for at in [0] + [m.end() for m in re.finditer(r"\n", text)]:
        if text[at:].lstrip()[:1] in ("{", "["):  # the earliest line from which the rest is all calls
            calls = _sequence(text[at:], use)
            if calls:
                return Parsed(text[:at].strip() or None, tuple(calls), "bare", at)
    return None


def _sequence(body: str, use) -> list[dict] | None:
    """`body` as a run of calls: JSON objects naming a tool (or lists of
    them, or objects in doubled braces), apart by blanks, commas or
    semicolons; None if anything else is there."""
    out, pos, n = [], 0, len(body)
    while True:
        while pos < n and body[pos] in " \t\r\n,;":
            pos += 1
        if pos >= n:
            return out or None
        doubled = body.startswith("{{", pos)
        found = _decode_at(body, pos + 1 if doubled else pos)
        if found is None and out and body[pos] == "{":
            return out  # a last call cut off (at the token limit): the whole ones before it
        calls = _calls(found[0], use) if found else None
        if not calls:
            return None
        out += calls
        pos = found[1]
        if doubled:
            if not body.startswith("}", pos):
                return None
            pos += 1


# -- what of a streamed reply may go out as it comes ---------------------------------------

class StreamFilter:
    """What of a streamed reply may go out as content while calls may
    still come: text up to a family's marker; from a line that begins a
    JSON value or a ```json fence, nothing until it is known not to be a
    call (a fence of another language, JSON that names no tool)."""

    def __init__(self, use):
        self.use, self.text, self.sent = use, "", 0
        self.scan = 0  # where the line scan goes on from: text before it is known not to be calls

    def feed(self, piece: str) -> str:
        self.text += piece
        if self.use.choice == "none":
            return self._send(len(self.text))
        cut = min([i for i in (self.text.find(m) for m in MARKERS) if i >= 0], default=len(self.text))
        for m in MARKERS:  # a tail that may begin a marker
            for n in range(min(len(m) - 1, len(self.text)), 0, -1):
                if self.text.endswith(m[:n]):
                    cut = min(cut, len(self.text) - n)
                    break
        return self._send(min(cut, self._held_from()))

    def _held_from(self) -> int:
        """Where a possible call begins: the first line from `scan` that
        opens a JSON value or a fence and is not yet known to be text."""
        text, pos = self.text, self.scan
        while pos < len(text):
            line_end = text.find("\n", pos)
            head = text[pos:line_end if line_end >= 0 else len(text)].lstrip()
            if line_end < 0 and ("```".startswith(head) or head.startswith("```")):
                return pos  # a fence's first line, not whole yet
            if head.startswith("```"):
                close = text.find("```", text.find("\n", pos) + 1 if line_end >= 0 else len(text))
                if line_end < 0 or close < 0:
                    lang = head[3:].strip().lower()
                    if line_end >= 0 and lang not in ("", "json", "tool_call", "tool_code"):
                        return len(text)  # a code block: text (its lines are not scanned)
                    return pos
                if _sequence(text[text.find("\n", pos) + 1:close], self.use):
                    return pos
                pos = self.scan = close + 3
                continue
            if head[:1] in ("{", "["):
                found = _decode_at(text, pos)
                if found is None:
                    return pos  # not whole yet (or not JSON: the end tells)
                if _calls(found[0], self.use):
                    return pos
                pos = self.scan = found[1]
                continue
            if line_end < 0:
                return len(text)
            pos = self.scan = line_end + 1
        return len(text)

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
