"""What constrains a request: its response_format, grammar or json_schema
(core.constraint.Spec) compiled against the target's vocabulary, and its
tools' grammar in the target's own tool-call syntax (core.tools).  Called
from a request's own thread, beside the rounds: llguidance drops the GIL
while it compiles, and its limits bound it."""

from __future__ import annotations

import json

from ..core.constraint import ConstraintError, Spec
from ..core.tools import family_of, grammar
from .api import ApiError

COMPILE_S = 10.0    # seconds a request's schema or grammar may take to compile


def refused(spec: Spec, error: ConstraintError | None = None) -> ApiError:
    """The 400 for `spec`: it cannot be compiled (`error`), or it did not
    compile within COMPILE_S (None)."""
    if error is not None:
        return ApiError(400, error.message, param=error.where)
    return ApiError(400, f"'{spec.where}' took over {COMPILE_S:g} s to compile: simplify it", param=spec.where)


def tool_spec(vocab, model: str, use, answer: Spec | None = None) -> Spec | None:
    """The constraint of a request's tools (core.tools.ToolUse) in `vocab`'s
    template's tool-call syntax, a reply that calls none following `answer`
    (the response_format's Spec, if any); or `answer` alone: tool_choice
    "none", or "auto" with a chat template that defines no syntax (then only
    the forms small models write anyway are read: core.tools.parse)."""
    if use.choice == "none":
        return answer
    family = family_of(vocab.chat_template())
    if family is None:
        if use.choice == "auto":
            return answer
        raise ApiError(400, f"tool_choice {use.choice!r} needs a tool-call syntax, and {model}'s chat template "
                            "defines none", param="tool_choice")
    from ..llama.grammar import special_id

    special = {m: special_id(vocab, m) for m in ("<tool_call>", "</tool_call>", "[TOOL_CALLS]")}
    special = {m: t for m, t in special.items() if t is not None}
    schema = None if answer is None else {"type": "object"} if answer.kind == "json_object" else json.loads(answer.text)
    where = "tools" if answer is None else f"tools and {answer.where}"
    strict = use.strict and (answer is None or answer.strict)
    try:  # the grammar is checked as any other (its size, from the tools' schemas)
        return Spec("lark", grammar(use, family, special, schema, answer is not None and answer.strict), where,
                    strict=strict)
    except ConstraintError as e:
        raise ApiError(400, e.message, param="tools") from None
