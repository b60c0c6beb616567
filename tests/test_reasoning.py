"""A reasoning model's thinking read apart from its answer (core/reasoning.py),
the constraint that starts after it and the budget that ends it
(core/thinking.py), and the request fields (serve/thinking.py).  Pure: the
templates are the published models' own (tests/templates), rendered with
the Jinja the server renders them with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spec_cli.core.reasoning import Markers, Split, markers_of, opened, split
from spec_cli.core.thinking import ThinkingGrammar
from spec_cli.serve.api import ApiError, parse_chat
from spec_cli.serve.thinking import template_kwargs

TEMPLATES = Path(__file__).parent / "templates"
THINK = Markers("<think>", "</think>")


def render(name: str, messages: list[dict], **kwargs) -> str:
    """`messages` in a template, rendered as llama-cpp-python's Jinja2ChatFormatter renders it."""
    import jinja2.sandbox

    def raise_exception(message):
        raise ValueError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    return env.from_string((TEMPLATES / name).read_text()).render(
        messages=messages, add_generation_prompt=True, eos_token="<|im_end|>", bos_token="",
        raise_exception=raise_exception, strftime_now=lambda f: "07 Dec 2026", **kwargs)


HELLO = [{"role": "user", "content": "hi"}]


def test_each_reasoning_template_names_its_markers_and_where_the_reply_starts():
    # Qwen3.5 opens the block in the prompt; enable_thinking false writes an empty one
    q35 = (TEMPLATES / "Qwen3.5-4B.jinja").read_text()
    assert markers_of(q35) == THINK
    assert opened(render("Qwen3.5-4B.jinja", HELLO), THINK) == "inside"
    assert opened(render("Qwen3.5-4B.jinja", HELLO, enable_thinking=False), THINK) == "closed"
    # Qwen3 (hybrid): the model opens it itself, or the template closes it
    assert opened(render("Qwen-Qwen3-0.6B.jinja", HELLO), THINK) == "maybe"
    assert opened(render("Qwen-Qwen3-0.6B.jinja", HELLO, enable_thinking=False), THINK) == "closed"
    # DeepSeek-R1's distill opens it in the prompt
    r1_template = (TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text()
    assert "enable_thinking" in r1_template  # the server gives it true (Vocab.apply_chat_template), as llama-server
    r1 = render("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", HELLO, enable_thinking=True)
    assert markers_of((TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text()) == THINK
    assert opened(r1, THINK) == "inside"
    # templates without a thinking block
    assert markers_of((TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()) is None
    assert markers_of((TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()) is None


def test_a_reply_splits_the_same_whole_and_streamed_in_any_pieces():
    text = "<think>\nLet me add.\n2 and 2 is 4.\n</think>\n\nThe answer is 4."
    whole = split(text, THINK, "maybe")
    assert (whole.reasoning, whole.content, whole.unfinished) == ("Let me add.\n2 and 2 is 4.", "The answer is 4.",
                                                                  False)
    for size in (1, 2, 3, 5, 7):
        s, r, c = Split(THINK, "maybe"), "", ""
        for i in range(0, len(text), size):
            got = s.feed(text[i:i + size])
            r, c = r + got[0], c + got[1]
            assert "<" not in got[0] and "<" not in got[1]  # no marker's piece ever goes out
        got = s.finish()
        assert (r + got[0], c + got[1]) == (whole.reasoning, whole.content)


def test_where_the_prompt_opened_it_the_reply_starts_inside_and_may_end_unfinished():
    s = split("still thinking about it", THINK, "inside")
    assert (s.reasoning, s.content, s.unfinished) == ("still thinking about it", "", True)
    assert split("Just the answer.", THINK, "maybe").content == "Just the answer."
    assert split("Just the answer.", THINK, "maybe").opened is False
    assert split("\n\nHello", THINK, "closed").content == "Hello"


class _Vocab:
    """Tokens as single bytes: token i is chr(i)."""

    @staticmethod
    def piece(t: int) -> bytes:
        return bytes([t])


def _ids(text: str) -> list[int]:
    return list(text.encode())


def _grammar(budget=None) -> ThinkingGrammar:
    return ThinkingGrammar(None, b"</think>", tuple(_ids("</think>")), budget, _Vocab.piece, 256)


def test_the_thinking_ends_at_its_marker_and_the_state_rolls_back_across_it():
    c = _grammar().start()
    c.advance(_ids("abc</thi"))
    assert not c.ended
    c.advance(_ids("nk>{"))
    assert c.ended and c.count == 12 and c.after == 1
    c.rollback(3)  # back over "k>{": inside again
    assert not c.ended and c.count == 9
    assert c.legal(_ids("k>xyz")) == 5 and not c.ended  # legal leaves the state as it found it


def test_a_budget_forces_the_close_marker_and_refuses_anything_else():
    c = _grammar(budget=3).start()
    c.advance(_ids("abc"))
    assert c.forced() == _ids("</think>")
    assert c.legal(_ids("</tx")) == 3
    mask = c.mask()
    assert c.allows(mask, ord("<")) and not c.allows(mask, ord("a"))
    row = np.zeros(256, dtype=np.float32)
    row[ord("a")] = 5.0
    assert c.choose(row, lambda r: int(np.argmax(r)), greedy=True) == ord("<")
    c.advance(_ids("</think>"))
    assert c.ended and c.forced() == []
    rows = np.zeros((3, 256), dtype=np.float32)
    assert c.rows_along(rows, _ids("hi")).shape == (3, 256)


def test_request_fields_are_checked_and_effort_maps_to_what_the_template_knows():
    body = {"messages": HELLO, "chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "low",
            "thinking_budget_tokens": 32}
    ask = parse_chat(body).reasoning
    assert (ask.kwargs, ask.effort, ask.budget) == ({"enable_thinking": False}, "low", 32)
    for bad, field in (({"chat_template_kwargs": []}, "chat_template_kwargs"),
                       ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
                       ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
                       ({"reasoning_effort": "huge"}, "reasoning_effort"),
                       ({"reasoning_format": "xml"}, "reasoning_format"),
                       ({"reasoning_budget_tokens": -5}, "reasoning_budget_tokens")):
        with pytest.raises(ApiError) as e:
            parse_chat({"messages": HELLO, **bad})
        assert e.value.param == field
    qwen3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    gpt_oss = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text()
    llama = (TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
    none = parse_chat({"messages": HELLO, "reasoning_effort": "none"}).reasoning
    assert template_kwargs(qwen3, none) == ({"enable_thinking": False}, False)
    assert template_kwargs(gpt_oss, none) == ({"reasoning_effort": "none"}, False)
    assert template_kwargs(llama, none) == ({}, True)  # named as ignored
    off = render("Qwen-Qwen3-0.6B.jinja", HELLO, **template_kwargs(qwen3, none)[0])
    assert opened(off, THINK) == "closed"
