"""What constrains a request: its response_format, grammar or json_schema
(core.constraint.Spec) compiled against the target's vocabulary, and its
tools' grammar in the target's own tool-call syntax (core.tools).  Called
from a request's own thread, beside the rounds: llguidance drops the GIL
while it compiles, and its limits bound it."""

from __future__ import annotations

import functools
import json
import logging

from ..core.constraint import ConstraintError, Spec
from ..core.tools import GRAMMARS, family_of, grammar, triggers
from .api import ApiError

log = logging.getLogger("spec_cli.serve")
COMPILE_S = 10.0    # seconds a request's schema or grammar may take to compile


def refused(spec: Spec, error: ConstraintError | None = None) -> ApiError:
    """The 400 for `spec`: it cannot be compiled (`error`), or it did not
    compile within COMPILE_S (None)."""
    if error is not None:
        return ApiError(400, error.message, param=error.where)
    return ApiError(400, f"'{spec.where}' took over {COMPILE_S:g} s to compile: simplify it", param=spec.where)


def tool_spec(vocab, model: str, use, answer: Spec | None = None) -> Spec | None:
    """The constraint of a request's tools (core.tools.ToolUse) in `vocab`'s
    template's tool-call syntax (told by what it writes for a call), a reply
    that calls none following `answer` (the response_format's Spec, if
    any); or `answer` alone under tool_choice "none".  A template whose
    syntax has no grammar here gets the generic one (calls as JSON), said
    once in the log."""
    if use.choice == "none":
        return answer
    family = family_of(vocab.chat_template(), vocab.call_sample())
    if family not in GRAMMARS:
        if vocab.name not in _told:
            _told.add(vocab.name)
            log.info("%s's chat template %s: tool calls are constrained and read in the generic form, JSON objects "
                     "naming a tool (a ```json fence, or a line each)", model,
                     f"writes calls in {family}'s syntax, which has no grammar here" if family
                     else "shows no tool-call syntax")
        family = "generic"
    special = _special_markers(vocab)
    schema = None if answer is None else {"type": "object"} if answer.kind == "json_object" else json.loads(answer.text)
    where = "tools" if answer is None else f"tools and {answer.where}"
    strict = use.strict and (answer is None or answer.strict)
    try:  # the grammar is checked as any other (its size, from the tools' schemas)
        # under "auto" with no typed answer, the grammar is lazy: free text goes unmasked (core/lazy.py)
        lazy = triggers(family) if use.choice == "auto" and answer is None else ()
        return Spec("lark", grammar(use, family, special, schema, answer is not None and answer.strict), where,
                    strict=strict, triggers=lazy)
    except ConstraintError as e:
        raise ApiError(400, e.message, param="tools") from None


_told: set[str] = set()  # models whose template's syntax the log has named


@functools.lru_cache(maxsize=4)
def _special_markers(vocab) -> dict[str, int]:
    """The call and thinking markers that are special tokens in `vocab`, by their text."""
    from ..core.calls import MARKER_TEXTS
    from ..llama.grammar import special_id

    found = {m: special_id(vocab, m) for m in MARKER_TEXTS}
    return {m: t for m, t in found.items() if t is not None}
