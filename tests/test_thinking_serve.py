"""A reasoning model served for real: SmolLM2 carrying Qwen3.5-4B's own chat
template (tests/templates/Qwen3.5-4B.jinja, put into a copy of the GGUF with
`gguf-new-metadata --chat-template`, as a user gives a model another
template), which opens the thinking block in the prompt and closes an empty
one when `enable_thinking` is false.  SmolLM2 never closes the block
itself, so the thinking budget is what ends it: the close marker forced,
then the answer.  Each API's own client reads the thinking apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anthropic
import ollama
import pytest

from test_serve import client, serving

TEMPLATE = Path(__file__).parent / "templates" / "Qwen3.5-4B.jinja"
Q = [{"role": "user", "content": "What is the capital of France?"}]
BUDGET = {"thinking_budget_tokens": 4}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def thinker_gguf(smollm_path, folder: Path) -> Path:
    """SmolLM2 carrying Qwen3.5-4B's chat template, as gguf-new-metadata writes it."""
    path = folder / "smollm2-qwen3.5-template.gguf"
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(smollm_path), str(path),
                    "--chat-template", TEMPLATE.read_text(), "--force"], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def thinker(smollm_path, tmp_path_factory):
    yield from serving(thinker_gguf(smollm_path, tmp_path_factory.mktemp("thinker")), "--parallel", "2",
                       "--deterministic")


def _chat(srv, **kw):
    return client(srv).chat.completions.create(model="m", messages=Q, temperature=0, max_tokens=40, **kw)


def test_the_thinking_comes_apart_whole_and_streamed_and_the_budget_ends_it(thinker):
    r = _chat(thinker, extra_body=BUDGET)
    msg = r.choices[0].message
    thought, answer = msg.reasoning_content, msg.content
    assert thought and answer and "<think>" not in answer and "</think>" not in thought + answer
    assert r.usage.completion_tokens_details.reasoning_tokens in range(2, 6)
    # the same reply as raw text: the thinking, the forced close marker, the answer
    raw = _chat(thinker, extra_body={**BUDGET, "reasoning_format": "none"}).choices[0].message
    assert raw.reasoning_content is None if hasattr(raw, "reasoning_content") else True
    assert raw.content.replace(" ", "").replace("\n", "") == (thought + "</think>" + answer).replace(" ", "").replace("\n", "")
    chunks = list(_chat(thinker, extra_body=BUDGET, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == thought
    assert "".join(d.content or "" for d in deltas) == answer
    first_answer = next(i for i, d in enumerate(deltas) if d.content)
    assert all(not getattr(d, "reasoning_content", None) for d in deltas[first_answer:])


def test_thinking_turned_off_by_the_template_kwargs_and_unfinished_thinking_said_so(thinker):
    off = _chat(thinker, extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
    assert off.content and not getattr(off, "reasoning_content", None)
    cut = client(thinker).chat.completions.create(model="m", messages=Q, temperature=0, max_tokens=6)
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.reasoning_content and not cut.choices[0].message.content
    assert cut.model_extra["reasoning_unfinished"] is True


def test_a_schema_applies_after_the_thinking(thinker):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    r = client(thinker).chat.completions.create(model="m", temperature=0, max_tokens=60, response_format=fmt,
                                               messages=[{"role": "user", "content": "A person, please."}],
                                               extra_body={"thinking_budget_tokens": 6})
    msg = r.choices[0].message
    assert msg.reasoning_content  # it thought freely first (its thinking is not JSON)
    person = json.loads(msg.content)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)


def test_anthropic_thinking_blocks_plain_and_streamed(thinker):
    c = anthropic.Anthropic(base_url=thinker.url, api_key="unused")
    kw = dict(model="m", max_tokens=40, messages=Q, thinking={"type": "enabled", "budget_tokens": 4},
              extra_body={"temperature": 0})
    msg = c.messages.create(**kw)
    assert [b.type for b in msg.content] == ["thinking", "text"]
    with c.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert (final.content[0].thinking, final.content[1].text) == (msg.content[0].thinking, msg.content[1].text)
    # the earlier turn's thinking goes back as the template says, and thinking can be turned off
    again = c.messages.create(model="m", max_tokens=20, thinking={"type": "disabled"},
                              extra_body={"temperature": 0},
                              messages=[*Q, {"role": "assistant", "content": msg.content},
                                        {"role": "user", "content": "And two more?"}])
    assert [b.type for b in again.content] == ["text"]


def test_responses_reasoning_items_and_ollama_thinking(thinker):
    c = client(thinker)
    r = c.responses.create(model="m", input=Q[0]["content"], max_output_tokens=40, temperature=0,
                           extra_body=BUDGET)
    assert [item.type for item in r.output] == ["reasoning", "message"]
    thought = r.output[0].content[0].text
    events = list(c.responses.create(model="m", input=Q[0]["content"], max_output_tokens=40, temperature=0,
                                     extra_body=BUDGET, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == thought
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [i.type for i in events[-1].response.output] == ["reasoning", "message"]
    o = ollama.Client(host=thinker.url)
    got = o.chat(model="m", messages=Q, options={"temperature": 0, "num_predict": 6}, stream=False)
    assert got.message.thinking and not got.message.content
    parts = list(o.chat(model="m", messages=Q, options={"temperature": 0, "num_predict": 6}, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == got.message.thinking
    off = o.chat(model="m", messages=Q, think=False, options={"temperature": 0, "num_predict": 12})
    assert off.message.content and not off.message.thinking
