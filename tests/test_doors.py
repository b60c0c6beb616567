"""The front doors beside OpenAI's chat completions, for real: Anthropic's
Messages, OpenAI's Responses and Ollama's API, each driven by its own
client library (`anthropic`, `openai`, `ollama`, the OpenAI Agents SDK),
unmodified, against `spec-cli serve`; raw HTTP for the hostile cases.

On SmolLM2 with --deterministic numerics, every door's greedy answer is
the chat completions' text for the same question, streamed or not (one
engine behind them all); on the default pair, the tool round trips."""

from __future__ import annotations

import http.client
import json
import os

import anthropic
import ollama
import openai
import pytest

from test_serve import KEY, Server, client, post_raw, serving, wait_idle
from test_structured import WEATHER, qwen_server as qwen  # noqa: F401 (a fixture)

QUESTION = "What is the capital of France?"
N = 24
T0 = {"temperature": 0}  # the anthropic client of 2026 has no temperature argument: its wire field still works


@pytest.fixture(scope="module")
def server(smollm_path):
    yield from serving(smollm_path, "--parallel", "2")


def _chat_text(srv, question=QUESTION, n=N) -> str:
    r = client(srv).chat.completions.create(model="m", messages=[{"role": "user", "content": question}],
                                            temperature=0, max_tokens=n)
    return r.choices[0].message.content


def test_anthropic_messages_plain_and_streamed_equal_chat_completions(server):
    want = _chat_text(server)
    c = anthropic.Anthropic(base_url=server.url, api_key="unused")
    msg = c.messages.create(model="m", max_tokens=N, extra_body=T0, messages=[{"role": "user", "content": QUESTION}])
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "text" and msg.content[0].text == want
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.usage.output_tokens > 0
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 5
    with c.messages.stream(model="m", max_tokens=N, extra_body=T0,
                           messages=[{"role": "user", "content": QUESTION}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == want and final.stop_reason == msg.stop_reason
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_stop" in kinds
    assert c.messages.count_tokens(model="m", messages=[{"role": "user", "content": QUESTION}]).input_tokens > 5


def test_anthropic_stop_sequences_and_max_tokens_say_why_they_ended(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused")
    want = _chat_text(server)
    word = want.split()[1]  # a word the answer is known to hold
    msg = c.messages.create(model="m", max_tokens=N, extra_body=T0, stop_sequences=["zzz", word],
                            messages=[{"role": "user", "content": QUESTION}])
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", word), msg
    assert msg.content[0].text == want[:want.index(word)]
    short = c.messages.create(model="m", max_tokens=2, extra_body=T0, messages=[{"role": "user", "content": "Hi"}])
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_responses_plain_streamed_and_stored(server):
    want = _chat_text(server)
    c = client(server)
    r = c.responses.create(model="m", input=QUESTION, max_output_tokens=N, temperature=0)
    assert r.object == "response" and r.output_text == want and r.usage.output_tokens > 0
    assert r.status in ("completed", "incomplete")
    events = list(c.responses.create(model="m", input=QUESTION, max_output_tokens=N, temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == want
    assert events[-1].response.output_text == want
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # the stored conversation goes on; it can be read back and deleted
    again = c.responses.create(model="m", input="And of Spain?", previous_response_id=r.id, max_output_tokens=8,
                               temperature=0)
    assert again.previous_response_id == r.id and again.usage.input_tokens > r.usage.input_tokens
    assert c.responses.retrieve(r.id).output_text == want
    c.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    unstored = c.responses.create(model="m", input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(unstored.id)


def test_ollama_chat_generate_and_the_model_list(server):
    want = _chat_text(server)
    c = ollama.Client(host=server.url)
    opts = {"temperature": 0, "num_predict": N}
    r = c.chat(model="m", messages=[{"role": "user", "content": QUESTION}], options=opts, stream=False)
    assert r.message.content == want and r.done and r.eval_count > 0 and r.eval_duration > 0
    assert r.prompt_eval_count > 5 and r.done_reason in ("stop", "length")
    parts = list(c.chat(model="m", messages=[{"role": "user", "content": QUESTION}], options=opts, stream=True))
    assert "".join(p.message.content for p in parts) == want and parts[-1].done and not parts[0].done
    g = c.generate(model="m", prompt=QUESTION, options=opts)
    assert g.response == want  # the prompt in the chat template, as Ollama reads it
    raw = c.generate(model="m", prompt="The capital of France is", raw=True, options={"temperature": 0,
                                                                                   "num_predict": 4})
    assert raw.response.strip()
    names = [m.model for m in c.list().models]
    assert len(names) == 1 and c.show(names[0]).modelinfo["general.architecture"] == "llama"
    assert c.ps().models[0].model == names[0]


def _shape(path: str, reply: dict) -> bool:
    if path.startswith("/api/"):
        return isinstance(reply.get("error"), str)
    if path.startswith("/v1/messages"):
        return reply.get("type") == "error" and isinstance(reply["error"].get("message"), str)
    return isinstance(reply.get("error", {}).get("message"), str)


HOSTILE = [
    ("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),  # no max_tokens
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "wat"}]}]}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_never", "content": "x"}]}]}),
    ("/v1/messages", {"max_tokens": "5", "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "temperature": 1e308 * 10}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "stop_sequences": [1]}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                      "tools": [{"type": "bash_20250124", "name": "bash"}]}),
    ("/v1/messages", [1, 2]),
    ("/v1/messages/count_tokens", {"messages": "hi"}),
    ("/v1/responses", {"input": {"role": "user"}}),
    ("/v1/responses", {"input": "hi", "background": True}),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "web_search_preview"}]}),
    ("/v1/responses", {"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}),
    ("/v1/responses", {"input": "hi", "previous_response_id": "resp_unknown"}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": -3}),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema", "schema": "x"}}}),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "options": {"num_ctx": 1 << 30}}),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}),
    ("/api/chat", {"model": "m", "messages": None}),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "format": {"type": 7}}),
    ("/api/generate", {"model": "m", "prompt": ["x"]}),
    ("/api/generate", {"model": "m", "prompt": "x", "options": {"temperature": "warm"}}),
    ("/api/generate", {"model": "m", "prompt": "x", "options": {"top_k": 1 << 70}}),
    ("/api/pull", {"model": "m"}),
    # reasoning fields, in each door's own spelling
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                      "thinking": {"type": "enabled", "budget_tokens": -1}}),
    ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "max"}}),
    ("/v1/responses", {"input": "hi", "reasoning": {"effort": "extreme"}}),
    ("/v1/responses", {"input": "hi", "chat_template_kwargs": {"add_generation_prompt": False}}),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "think": "max"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_budget_tokens": "x"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]}),
    # fill-in-the-middle asked of a model without FIM tokens (SmolLM2): the field is named
    ("/api/generate", {"model": "m", "prompt": "def f(", "suffix": "):\n"}),
    ("/v1/completions", {"prompt": "def f(", "suffix": "x = 1\n" * 170_000}),  # a million characters
]


@pytest.mark.parametrize("path, body", HOSTILE)
def test_hostile_requests_on_every_door_get_4xx_in_that_apis_shape(server, path, body):
    status, reply, _ = post_raw(server, path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert 400 <= status < 500, (status, reply)
    assert _shape(path, json.loads(reply)), reply


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses", "/api/chat"])
def test_broken_bodies_get_4xx_in_that_apis_shape(server, path):
    for raw, kind in ((b"{not json", "application/json"), (b'{"a": 1}', "text/plain")):
        status, reply, _ = post_raw(server, path, raw, {"Content-Type": kind})
        assert 400 <= status < 500 and _shape(path, json.loads(reply)), (status, reply)


def test_a_client_that_leaves_an_ollama_stream_frees_its_slot(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/api/generate", json.dumps({"model": "m", "prompt": "Once upon a time", "raw": True,
                                                      "options": {"num_predict": 1500}}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type").startswith("application/x-ndjson")
    assert json.loads(resp.readline())["done"] is False
    conn.close()
    assert wait_idle(server, 20)


@pytest.fixture(scope="module")
def guarded(smollm_path):
    env = dict(os.environ)
    srv = Server(smollm_path, env, "--parallel", "1", "--api-key", KEY, "--no-parse-special")
    yield srv
    srv.stop()


def test_the_api_key_is_taken_as_x_api_key_and_refused_in_anthropics_shape(guarded):
    ok = anthropic.Anthropic(base_url=guarded.url, api_key=KEY)
    assert ok.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "Hi"}]).content
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=guarded.url, api_key="wrong").messages.create(
            model="m", max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    status, reply, _ = guarded.get("/api/tags")
    assert status == 401 and isinstance(reply["error"], str)


def test_a_raw_prompts_special_tokens_are_the_models_unless_the_server_says_not(server, guarded):
    """`<|im_start|>` in a raw completion prompt is one special token, as
    llama-server reads it; under --no-parse-special it is text."""
    body = {"prompt": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "max_tokens": 1}
    read = server.post("/v1/completions", body)[1]["usage"]["prompt_tokens"]
    kept = guarded.post("/v1/completions", body, headers={"Authorization": f"Bearer {KEY}"})[1]
    assert read + 10 < kept["usage"]["prompt_tokens"], (read, kept["usage"])


# -- the default pair: a short factual question and the tool round trips -----------------------

ANTHROPIC_WEATHER = [{"name": "get_weather", "description": "Current weather in a city",
                      "input_schema": WEATHER[0]["function"]["parameters"]}]


@pytest.mark.pair
def test_every_client_answers_a_factual_question(qwen):
    ask = "What is the capital of France? Answer in one word."
    a = anthropic.Anthropic(base_url=qwen.url, api_key="x").messages.create(
        model="m", max_tokens=16, extra_body=T0, messages=[{"role": "user", "content": ask}])
    assert "Paris" in a.content[0].text
    assert "Paris" in client(qwen).responses.create(model="m", input=ask, max_output_tokens=16,
                                                    temperature=0).output_text
    o = ollama.Client(host=qwen.url)
    assert "Paris" in o.chat(model="m", messages=[{"role": "user", "content": ask}],
                             options={"temperature": 0, "num_predict": 16}).message.content
    assert "Paris" in o.generate(model="m", prompt=ask, options={"temperature": 0, "num_predict": 16}).response


@pytest.mark.pair
def test_a_forced_anthropic_tool_use_round_trip(qwen):
    c = anthropic.Anthropic(base_url=qwen.url, api_key="x")
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    m = c.messages.create(model="m", max_tokens=80, extra_body=T0, messages=msgs, tools=ANTHROPIC_WEATHER,
                          tool_choice={"type": "tool", "name": "get_weather"})
    use = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and use[0].name == "get_weather" and use[0].input["city"] == "Paris"
    with c.messages.stream(model="m", max_tokens=80, extra_body=T0, messages=msgs, tools=ANTHROPIC_WEATHER,
                           tool_choice={"type": "any"}) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "tool_use" and streamed.content[-1].input == use[0].input
    msgs += [{"role": "assistant", "content": m.content},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id,
                                           "content": "18 degrees Celsius, cloudy"}]}]
    m = c.messages.create(model="m", max_tokens=60, extra_body=T0, messages=msgs, tools=ANTHROPIC_WEATHER,
                          tool_choice={"type": "none"})
    assert m.stop_reason == "end_turn" and "18" in m.content[0].text


@pytest.mark.pair
def test_a_responses_tool_round_trip_and_an_ollama_tool_call(qwen):
    c = client(qwen)
    tools = [{"type": "function", **WEATHER[0]["function"]}]
    ask = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    r = c.responses.create(model="m", input=ask, tools=tools, tool_choice="required", temperature=0,
                           max_output_tokens=80)
    call = next(i for i in r.output if i.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] == "Paris"
    r = c.responses.create(model="m", previous_response_id=r.id, tools=tools, tool_choice="none", temperature=0,
                           max_output_tokens=60,
                           input=[{"type": "function_call_output", "call_id": call.call_id,
                                   "output": "18 degrees Celsius, cloudy"}])
    assert "18" in r.output_text
    o = ollama.Client(host=qwen.url).chat(model="m", messages=ask, tools=WEATHER, options={"temperature": 0})
    assert o.message.tool_calls[0].function.name == "get_weather"
    assert o.message.tool_calls[0].function.arguments["city"] == "Paris"


@pytest.mark.pair
def test_the_agents_sdk_default_model_runs_a_tool_loop_to_a_typed_answer(qwen):
    agents = pytest.importorskip("agents")
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        temperature_celsius: int

    called = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        called.append(city)
        return "18 degrees Celsius, cloudy"

    agents.set_tracing_disabled(True)
    agents.set_default_openai_client(openai.AsyncOpenAI(base_url=qwen.url + "/v1", api_key="x"),
                                     use_for_tracing=False)
    agent = agents.Agent(name="weather", instructions="Call get_weather, then answer with what it said.",
                         tools=[get_weather], output_type=Weather,
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=100, tool_choice="required"))
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    assert called == ["Paris"]
    assert isinstance(result.final_output, Weather) and result.final_output.temperature_celsius == 18
