"""The front doors' translations as pure logic: Anthropic's Messages,
OpenAI's Responses and Ollama's requests into the one chat request, and
each API's error shape.  The same through real HTTP, with each API's own
client library and a real model: test_doors.py."""

from __future__ import annotations

import pytest

from spec_cli.serve.anthropic import Anthropic, translate
from spec_cli.serve.api import ApiError
from spec_cli.serve.ollama import Chat, Generate
from spec_cli.serve.responses import Responses, Store
from spec_cli.serve.shapes import error_body

USER = [{"role": "user", "content": "hi"}]
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _param(call, *args) -> str:
    with pytest.raises(ApiError) as e:
        call(*args)
    assert 400 <= e.value.status < 500, e.value.message
    return e.value.param


def test_anthropic_blocks_become_the_chat_a_template_reads():
    body = {"model": "m", "max_tokens": 20, "system": [{"type": "text", "text": "Be brief."}],
            "stop_sequences": ["\n\n"], "temperature": 0, "top_k": 3, "tools": [WEATHER],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}, "metadata": {"user_id": "u"},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                         {"role": "assistant", "content": [
                             {"type": "thinking", "thinking": "...", "signature": "x"},
                             {"type": "text", "text": "Let me look."},
                             {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "toolu_1",
                              "content": [{"type": "text", "text": "18 C"}]},
                             {"type": "text", "text": "And so?"}]}]}
    req = Anthropic().parse(body)
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert req.messages[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert req.messages[3] == {"role": "tool", "content": "18 C", "tool_call_id": "toolu_1"}
    assert (req.max_tokens, req.stop, req.sampling.temperature, req.sampling.top_k) == (20, ("\n\n",), 0.0, 3)
    assert req.tools.choice == "required" and not req.tools.parallel and req.ignored == []
    named = Anthropic().parse({**body, "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert (named.tools.choice, named.tools.name) == ("function", "get_weather")


@pytest.mark.parametrize("change, param", [
    ({"max_tokens": None}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "never"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"system": 5}, "system"),
    ({"stop_sequences": "x"}, "stop_sequences"),
    ({"temperature": "hot"}, "temperature"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"mcp_servers": [{"url": "x"}]}, "mcp_servers"),
    ({"stream": "yes"}, "stream"),
])
def test_anthropic_refusals_name_anthropics_field(change, param):
    body = {"model": "m", "max_tokens": 8, "messages": USER, **change}
    body = {k: v for k, v in body.items() if v is not None}
    assert _param(Anthropic().parse, body) == param


def test_count_tokens_needs_no_max_tokens():
    assert translate({"messages": USER}, counting=True)["messages"] == USER


def test_responses_items_chain_calls_and_their_outputs():
    door = Responses(Store())
    body = {"model": "m", "instructions": "Be brief.", "max_output_tokens": 30, "temperature": 0,
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "18 C"}],
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}}}
    req = door.parse(body)
    assert [m["role"] for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.max_tokens == 30 and req.tools.tools[0].name == "get_weather"
    assert req.constraint is not None and req.constraint.strict
    assert door.parse({"input": "hi"}).messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("change, param", [
    ({"input": 5}, "input"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"type": "function_call_output", "call_id": "never", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"background": True}, "background"),
    ({"previous_response_id": "resp_nothing"}, "previous_response_id"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"store": "yes"}, "store"),
])
def test_responses_refusals_name_the_field(change, param):
    assert _param(Responses(Store()).parse, {"input": "hi", **change}) == param


def test_the_store_keeps_the_last_n_for_a_while():
    store = Store(n=2, seconds=60)
    for i in range(3):
        store.put({"id": f"r{i}"}, [])
    assert store.get("r0") is None and store.get("r2")[0] == {"id": "r2"}
    assert store.delete("r1") and not store.delete("r1")
    assert Store(n=2, seconds=-1).get("r2") is None


def test_ollama_options_and_messages_translate():
    req = Chat(4096).parse({"model": "m", "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "w", "arguments": {"c": 1}}}]},
        {"role": "tool", "content": "18 C", "tool_name": "w"}],
        "options": {"temperature": 0, "num_predict": 12, "stop": ["x"], "num_ctx": 2048, "num_thread": 4,
                    "weird": 1}, "keep_alive": "5m", "stream": False})
    assert req.messages[2]["tool_call_id"] == req.messages[1]["tool_calls"][0]["id"]
    assert (req.max_tokens, req.sampling.temperature, req.stop, req.stream) == (12, 0.0, ("x",), False)
    assert req.ignored == ["options.weird"]
    assert Chat(4096).parse({"messages": USER}).stream  # Ollama streams unless told not to
    assert Chat(4096).parse({"messages": USER}).sampling.temperature == 0.8
    g = Generate(4096)
    assert g.parse({"prompt": "hi", "system": "S"}).messages[0] == {"role": "system", "content": "S"}
    assert g.parse({"prompt": "hi", "raw": True}).kind == "completion"
    assert g.parse({"prompt": "def f(", "suffix": "\n"}).kind == "infill"
    assert g.parse({"model": "m"})["done_reason"] == "load"


@pytest.mark.parametrize("door, body, param", [
    (Chat(4096), {"messages": USER, "options": {"num_ctx": 8192}}, "options.num_ctx"),
    (Chat(4096), {"messages": USER, "options": "hot"}, "options"),
    (Chat(4096), {"messages": USER, "options": {"num_predict": "x"}}, "options.num_predict"),
    (Chat(4096), {"messages": USER, "format": "yaml"}, "format"),
    (Chat(4096), {"messages": USER, "options": {"temperature": "warm"}}, "options.temperature"),
    (Generate(4096), {"prompt": "x", "options": {"seed": 10 ** 400}}, "options.seed"),
    (Chat(4096), {"messages": USER, "options": {"num_predict": 10 ** 400}}, "options.num_predict"),
    (Chat(4096), {"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "messages[0].images"),
    (Chat(4096), {"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
    (Chat(4096), {"messages": USER, "stream": "no"}, "stream"),
    (Generate(4096), {"prompt": 5}, "prompt"),
    (Generate(4096), {"prompt": "x", "suffix": 5}, "suffix"),
    (Generate(4096), {"prompt": "x", "context": [1, 2]}, "context"),
])
def test_ollama_refusals_name_the_field(door, body, param):
    assert _param(door.parse, body) == param


def test_each_api_has_its_error_shape():
    e = ApiError(400, "'x' is wrong", param="x")
    assert error_body("/v1/messages", e) == {"type": "error", "error": {"type": "invalid_request_error",
                                                                        "message": "'x' is wrong"}}
    assert error_body("/v1/messages/count_tokens", ApiError(503, "busy"))["error"]["type"] == "overloaded_error"
    assert error_body("/api/chat", e) == {"error": "'x' is wrong"}
    assert error_body("/v1/responses", e)["error"]["param"] == "x"


def test_serves_help_says_what_the_responses_store_keeps():
    from spec_cli.cli.serve import serve
    from spec_cli.serve.responses import STORE_N, STORE_S

    assert f"last {STORE_N} responses" in serve.__doc__ and f"{STORE_S / 60:.0f} minutes" in serve.__doc__
