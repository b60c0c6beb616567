"""A chat request's reasoning: its fields (`chat_template_kwargs`,
`reasoning_effort`, `reasoning_format`, `reasoning_budget_tokens` /
`thinking_budget_tokens`, as llama-server names them), what the template is
given for them, and the plan a reply is read by (`plan`): the template's
markers, where the reply starts, and a constraint that starts after the
thinking (core/thinking.py) where the request has a constraint or a budget.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..core.reasoning import EFFORTS, FORMATS, Markers, markers_of, opened
from .checks import bad, number

# what a template is given already: a request may not set these through chat_template_kwargs
RESERVED = {"messages", "tools", "functions", "function_call", "tool_choice", "add_generation_prompt",
            "bos_token", "eos_token", "raise_exception", "strftime_now"}
MAX_KWARGS = 4096  # bytes of chat_template_kwargs as JSON


@dataclass
class Ask:
    """What a request asks of the thinking (None: the server's setting)."""

    kwargs: dict = field(default_factory=dict)   # chat_template_kwargs
    effort: str | None = None
    format: str | None = None
    budget: int | None = None   # -1 or None: the server's; 0: no thinking


@dataclass(frozen=True)
class Plan:
    """How a reply is read: the markers, and where it starts (core.reasoning.opened)."""

    markers: Markers
    start: str


def switch(on: bool) -> dict:
    """Thinking turned on or off as the chat fields say it (Anthropic's
    `thinking.type`, Ollama's `think`): the template's own switch, and off
    no thinking tokens either where the template has no switch."""
    if on:
        return {"chat_template_kwargs": {"enable_thinking": True}}
    return {"chat_template_kwargs": {"enable_thinking": False}, "thinking_budget_tokens": 0}


def parse(body: dict) -> Ask:
    ask = Ask()
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise bad("chat_template_kwargs", "must be an object of the template's variables")
        taken = sorted(RESERVED & set(kwargs))
        if taken:
            raise bad("chat_template_kwargs", f"may not set {', '.join(taken)}: the request's own fields do")
        if len(json.dumps(kwargs)) > MAX_KWARGS:
            raise bad("chat_template_kwargs", f"is over {MAX_KWARGS} bytes")
        if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
            raise bad("chat_template_kwargs.enable_thinking", "must be true or false")
        ask.kwargs = dict(kwargs)
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in EFFORTS:
            raise bad("reasoning_effort", f"must be one of {', '.join(EFFORTS)}, not {effort!r}")
        ask.effort = effort
    fmt = body.get("reasoning_format")
    if fmt is not None:
        fmt = {"deepseek": "auto", "deepseek-legacy": "auto"}.get(fmt, fmt)
        if fmt not in FORMATS:
            raise bad("reasoning_format", "must be auto (the thinking in reasoning_content) or none (the raw text)")
        ask.format = fmt
    for name in ("reasoning_budget_tokens", "thinking_budget_tokens"):
        value = number(body, name, None, lo=-1, integer=True)
        if value is not None:
            ask.budget = None if value == -1 else value
    return ask


def template_kwargs(template: str | None, ask: Ask | None) -> tuple[dict, bool]:
    """The variables the template gets for `ask`, and whether its
    reasoning_effort was ignored (the template has no notion of it): the
    template's own `reasoning_effort` where it reads one (gpt-oss), else
    `enable_thinking` (Qwen3's on/off: none and minimal are off); true
    otherwise (llama.vocab.Vocab.apply_chat_template)."""
    template = template or ""
    out = dict(ask.kwargs) if ask is not None else {}
    ignored = False
    if ask is not None and ask.effort is not None:
        if "reasoning_effort" in template:
            out.setdefault("reasoning_effort", ask.effort)
        elif "enable_thinking" in template:
            out.setdefault("enable_thinking", ask.effort not in ("none", "minimal"))
        else:
            ignored = True
    return out, ignored


def reading(vocab, tokens: list[int]) -> Plan | None:
    """How a reply to the chat prompt `tokens` is read: the template's
    thinking markers and where the reply starts (core.reasoning.opened, on
    the prompt's last tokens as text); None where the template has no
    thinking block."""
    markers = markers_of(vocab.chat_template())
    if markers is None:
        return None
    tail = b"".join(vocab.piece(t, special=True) for t in tokens[-16:]).decode("utf-8", "replace")
    return Plan(markers, opened(tail, markers))


def plan(vocab, ask: Ask | None, tokens: list[int], server_format: str, server_budget: int | None,
         grammar) -> tuple[Plan | None, list[int], object]:
    """(the reading plan, the prompt's tokens, the constraint) of a chat
    reply.  Where the reply is constrained or bounded and the model may
    open a block itself, the prompt opens it (the model would), so that
    the constraint knows where the answer starts."""
    fmt = (ask.format if ask is not None and ask.format else None) or server_format
    found = reading(vocab, tokens)
    if found is None:
        return None, tokens, grammar
    markers, start = found.markers, found.start
    budget = ask.budget if ask is not None and ask.budget is not None else server_budget
    if start == "closed" or (grammar is None and budget is None):
        return (None if fmt == "none" else Plan(markers, start)), tokens, grammar
    if start == "maybe":
        tokens = tokens + vocab.tokenize(markers.open + "\n", add_special=False, parse_special=True)
        start = "inside"
    from ..core.thinking import ThinkingGrammar

    close = markers.close.encode()
    wrapped = ThinkingGrammar(grammar, close, tuple(vocab.tokenize(markers.close, add_special=False,
                                                                   parse_special=True)),
                              budget, lambda t: vocab.piece(t, special=True), vocab.n_vocab)
    return (None if fmt == "none" else Plan(markers, start)), tokens, wrapped
