"""Structured output and tool calls on real models: a JSON schema or grammar
masks every token (core/constraint.py), drafts included, in one request and
in a shared batch; the server's response_format, grammar and json_schema
fields and tools, spoken to with the real `openai` client; the CLI's
--json-schema and --grammar.

Exactness under a constraint is the same promise as without: greedy text is
`--proposer none`'s under the same constraint (bit for bit with
--deterministic numerics), a seed fixes the text whatever drafted, and in a
shared batch a request parts from itself alone only at a near-tie of its
masked rows."""

import dataclasses
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from test_cli import assert_clean_error, spec
from test_serve import Server, client, serving

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3},
    "email": {"type": ["string", "null"]}}, "required": ["name", "age", "hobbies"], "additionalProperties": False}
PROMPTS = ["Describe a person called Ada as JSON.", "Make up a JSON record for a sailor.",
           "A JSON profile of a retired teacher, please.", "Invent someone who likes chess, as JSON."]
YES_NO = 'root ::= ("yes" | "no") "."'


@pytest.fixture(scope="module")
def person(smollm):
    from spec_cli.core.constraint import Spec, compile_spec

    return compile_spec(Spec.json_schema(PERSON), smollm.vocab.grammar_tokenizer(), smollm.n_vocab)


def _text(vocab, tokens):
    """The text of `tokens`, end-of-generation tokens left out."""
    from spec_cli.llama.vocab import Detokenizer

    d = Detokenizer(vocab)
    return "".join(d.add(t) for t in tokens if not vocab.is_eog(t)) + d.flush()


def _chat_tokens(model, text):
    return model.vocab.tokenize_chat([{"role": "user", "content": text}])


def _run(model, proposer, tokens, grammar, **cfg):
    from spec_cli.run.engine import GenConfig, generate

    model.reset()
    out, drafted, sources = [], 0, set()
    for st in generate(model, proposer, tokens, GenConfig(grammar=grammar, **{"max_tokens": 64, **cfg})):
        out += st.tokens
        drafted += st.drafted
        sources.add(st.source)
    return out, drafted, sources


def test_constrained_text_is_the_target_alones_whatever_drafted(smollm, smollm_draft, person):
    """--deterministic numerics: greedy and seeded sampled text under a
    schema are bit for bit --proposer none's, with the draft model, the
    lookup and the schema's forced tokens drafting; every answer that ends
    validates."""
    from spec_cli.core.sampling import SamplingConfig
    from spec_cli.run.proposers import DraftModel, NoDraft
    from spec_cli.run.proposers.hybrid import Hybrid
    from spec_cli.run.suffix import Lookup

    grammar_drafted = 0
    for i, text in enumerate(PROMPTS[:3]):
        tokens = _chat_tokens(smollm, text)
        for sampling in (SamplingConfig(), SamplingConfig(temperature=0.8, top_k=40)):
            ref, _, _ = _run(smollm, NoDraft(), tokens, person, sampling=sampling, seed=7 + i)
            got, drafted, sources = _run(smollm, Hybrid(Lookup(), DraftModel(smollm_draft)), tokens, person,
                                         sampling=sampling, seed=7 + i, adaptive=False, draft_max=4)
            assert got == ref, f"prompt {i}, {sampling}: the drafted text parts from the target alone's"
            assert drafted > 0
            grammar_drafted += "grammar" in sources
            if smollm.vocab.is_eog(got[-1]):  # it ended: the answer is whole
                jsonschema.validate(json.loads(_text(smollm.vocab, got)), PERSON)
    assert grammar_drafted, "the schema's forced tokens never drafted"


def test_constrained_requests_in_one_batch_get_their_text_alone(smollm_path):
    """Four requests under three constraints (two schemas and a grammar)
    in shared rounds, with forced tokens, the lookup and the draft model
    drafting: each request's tokens are its own alone's, or part from them
    at a near-tie of its masked rows; each one's constraint is its own."""
    from spec_cli.core.constraint import Spec, compile_spec
    from spec_cli.run.batch import Batch
    from spec_cli.run.bench import NEAR_TIE, Run, divergence
    from spec_cli.run.config import PairConfig
    from spec_cli.run.engine import GenConfig, Generation
    from spec_cli.run.runner import load_pair
    from spec_cli.run.session import Session

    pair = load_pair(PairConfig(target=str(smollm_path), draft=str(smollm_path), proposer="hybrid", ctx=1024,
                                seqs=4, draft_if_it_pays=False))
    try:
        t = pair.target
        tok = t.vocab.grammar_tokenizer()
        specs = [Spec.json_schema(PERSON), Spec("gbnf", YES_NO), Spec.json_schema({"type": "object", "properties": {
            "colour": {"enum": ["red", "green", "blue"]}, "count": {"type": "integer"}}, "required": ["colour", "count"]}),
            Spec.json_schema(PERSON)]
        grammars = [compile_spec(s, tok, t.n_vocab) for s in specs]
        prompts = [_chat_tokens(t, p) for p in ["A person as JSON.", "Is water wet? Answer yes or no.",
                                                  "A colour and a count, as JSON.", "A sailor as JSON."]]
        cfgs = [GenConfig(max_tokens=48, seed=i, adaptive=False, draft_max=4, grammar=g) for i, g in enumerate(grammars)]
        refs = []
        for tokens, cfg in zip(prompts, cfgs):
            pair.use(0)
            pair.reset()
            refs.append(Session(pair, tokens, dataclasses.replace(cfg, draft_max=0, margins=True),
                                pair.new_proposer(name="none")).run())
        for seq in range(t.n_seq):
            pair.use(seq)
            pair.reset()
        batch = Batch(pair)
        out = {batch.add(i, Generation(t, pair.new_proposer(), prompts[i], cfgs[i])): (i, []) for i in range(4)}
        widest = 0
        while len(batch):
            steps = batch.round()
            widest = max(widest, batch.last_rows)
            for stream, st in steps:
                out[stream][1].extend(st.tokens)
                if st.finish_reason is not None:
                    batch.drop(stream)
        assert widest > 4, "the requests did not share a batch with drafts"
        for i, tokens in out.values():
            m = divergence(Run(refs[i].tokens, margins=refs[i].margins), Run(tokens))
            assert m is None or m <= NEAR_TIE, f"request {i} parts from itself alone at a margin of {m}"
        answer = next(tokens for i, tokens in out.values() if i == 1)
        assert _text(t.vocab, answer) in ("yes.", "no.")
    finally:
        pair.close()


# -- the server ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(smollm_path):
    yield from serving(smollm_path, "--parallel", "2", deterministic=False)


def test_the_openai_clients_parse_gets_a_valid_object(server):
    from pydantic import BaseModel, Field

    class City(BaseModel):
        name: str = Field(max_length=30)
        country: str = Field(max_length=30)
        landmarks: list[str] = Field(max_length=2)

    r = client(server).chat.completions.parse(
        model="m", messages=[{"role": "user", "content": "Tell me about Paris."}], response_format=City,
        temperature=0, max_tokens=120)
    city = r.choices[0].message.parsed
    assert isinstance(city, City) and r.choices[0].finish_reason == "stop"
    extra = r.model_extra
    assert extra["constraint"]["kind"] == "json_schema" and extra["constraint"]["strict"] is True
    assert extra["speculation"]["mask_ms"] >= 0


def test_json_object_streams_and_llama_servers_fields_constrain_completions(server):
    c = client(server)
    stream = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "A greeting as JSON."}],
                                       response_format={"type": "json_object"}, temperature=0, max_tokens=60,
                                       stream=True)
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert isinstance(json.loads(text), dict)
    r = c.completions.create(model="m", prompt="Is the sky green? Answer:", max_tokens=8, temperature=0,
                             extra_body={"grammar": 'root ::= " " ("yes" | "no")'})
    assert r.choices[0].text in (" yes", " no")
    r = c.completions.create(model="m", prompt="A number:", max_tokens=12, temperature=0,
                             extra_body={"json_schema": {"type": "integer", "minimum": 1, "maximum": 9}})
    assert 1 <= int(r.choices[0].text) <= 9


HOSTILE = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": json.loads(
        '{"type":"array","items":' * 100 + '{}' + '}' * 100)}}}, "nested more than"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "enum": [f"value-{i}" for i in range(300_000)]}}}}, "bytes"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "string", "minLength": 9, "maxLength": 2}}, "required": ["a"]}}}},
     "nsatisfiable"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "array", "uniqueItems": True}}}}, "uniqueItems"),
    ({"grammar": "root ::= undefined-rule"}, "undefined-rule"),
    ({"grammar": "root ::= " + " | ".join(f'"w{i}"' for i in range(40_000))}, "bytes"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "^(?!x)a+$"}}}}, "look-around"),
]


@pytest.mark.parametrize("fields, says", HOSTILE)
def test_a_constraint_the_engine_cannot_take_is_a_400_naming_why_and_the_server_goes_on(server, fields, says):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}
    t0 = time.monotonic()
    status, reply, _ = server.post("/v1/chat/completions", body)
    assert status == 400 and says in reply["error"]["message"], reply
    assert reply["error"]["param"] and time.monotonic() - t0 < 10
    assert server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0] == 200


def test_a_non_strict_schema_is_enforced_as_far_as_it_can_be_and_says_what_was_not(server):
    status, reply, _ = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Three numbers in a list."}], "max_tokens": 40, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "array", "items": {"type": "integer"}, "maxItems": 3, "uniqueItems": True}}}})
    assert status == 200, reply
    assert any("uniqueItems" in w for w in reply["constraint"]["warnings"])
    assert all(isinstance(v, int) for v in json.loads(reply["choices"][0]["message"]["content"]))


def test_a_template_without_tool_calls_gets_the_generic_form_and_takes_a_tool_history(server):
    """SmolLM2's template writes no tool calls: under "required" the call is
    the generic JSON form, constrained, and read back as a call."""
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]
    c = client(server)
    forced = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Time in Paris?"}],
                                       tools=tools, tool_choice="required", max_tokens=40, temperature=0)
    call = forced.choices[0].message.tool_calls[0]
    assert forced.choices[0].finish_reason == "tool_calls" and call.function.name == "get_time"
    assert isinstance(json.loads(call.function.arguments)["zone"], str)
    r = c.chat.completions.create(model="m", tools=tools, max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}])
    assert r.choices[0].finish_reason in ("stop", "length")


def test_constrained_requests_at_once_are_each_valid(server):
    c = client(server)

    def ask(i):
        r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPTS[i]}], temperature=0,
                                      max_tokens=90, response_format={"type": "json_schema", "json_schema": {
                                          "name": "person", "schema": PERSON, "strict": True}})
        return r.choices[0]

    with ThreadPoolExecutor(4) as ex:
        choices = list(ex.map(ask, range(4)))
    for ch in choices:
        if ch.finish_reason == "stop":
            jsonschema.validate(json.loads(ch.message.content), PERSON)
    assert any(ch.finish_reason == "stop" for ch in choices)


# -- the command line ------------------------------------------------------------------

def test_generate_with_a_schema_prints_valid_json_and_a_broken_schema_is_one_line(smollm_path, spec_env, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    res = spec("generate", "-t", str(smollm_path), "-d", str(smollm_path), "--json-schema", str(schema),
               "-n", "96", "-q", "Describe a person called Ada as JSON.", env=spec_env)
    assert res.returncode == 0, res.stderr
    jsonschema.validate(json.loads(res.stdout), PERSON)
    res = spec("generate", "-t", str(smollm_path), "--grammar", str(tmp_path / "none.gbnf"), "hi", env=spec_env)
    assert_clean_error(res, "not found")
    (tmp_path / "bad.json").write_text('{"type": "object", "properties": {"a": {"type": "strin')
    res = spec("generate", "-t", str(smollm_path), "--json-schema", str(tmp_path / "bad.json"), "hi", env=spec_env)
    assert_clean_error(res, "not valid JSON")
    (tmp_path / "yn.gbnf").write_text(YES_NO)
    res = spec("generate", "-t", str(smollm_path), "--proposer", "ngram", "--grammar", str(tmp_path / "yn.gbnf"), "-q",
               "Is water wet? Answer yes or no.", env=spec_env)
    assert res.returncode == 0 and res.stdout.strip() in ("yes.", "no."), res.stderr


# -- tool calls on the default pair ----------------------------------------------------

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]


@pytest.fixture(scope="module")
def qwen_server(target_path, draft_path):
    srv = Server(target_path, dict(os.environ), "--parallel", "1", "--ctx", "4096", deterministic=False,
                 draft=draft_path)
    yield srv
    srv.stop()


@pytest.mark.pair
def test_a_tool_call_round_trip_with_the_openai_client(qwen_server):
    """Qwen2.5-Coder 1.5B: a required call, constrained in the template's
    <tool_call> syntax, parses; streamed it comes as tool_calls deltas; the
    tool's result goes back and the model answers from it."""
    c = client(qwen_server)
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=WEATHER, tool_choice="required",
                                  temperature=0, max_tokens=80)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and r.model_extra["tool_call_form"] == "template"
    call = ch.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"
    assert r.model_extra["speculation"]["by_source"]["grammar"]["accepted"] >= 10  # the wrapper and name, forced
    stream = c.chat.completions.create(model="m", messages=msgs, tools=WEATHER, temperature=0, max_tokens=80,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       stream=True)
    deltas, finish = {}, None
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            deltas.setdefault(tc.index, "")
            deltas[tc.index] += tc.function.arguments or ""
        finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
    assert finish == "tool_calls" and json.loads(deltas[0])["city"] == "Paris"
    msgs += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
             {"role": "tool", "tool_call_id": call.id, "content": "18 degrees Celsius, cloudy"}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=WEATHER, tool_choice="none", temperature=0,
                                  max_tokens=60)
    assert "18" in r.choices[0].message.content and r.choices[0].finish_reason == "stop"


@pytest.mark.pair
def test_under_auto_the_default_pair_makes_every_call_a_question_needs_and_none_for_a_poem(qwen_server):
    """The 1.5B writes its calls in a ```json fence under auto: each one is
    read (constrained from the fence's opening), as many as the question
    asks, one where parallel calls are off; a question for no tool gets
    text, streamed as it comes."""
    c = client(qwen_server)

    def ask(question, **kw):
        return c.chat.completions.create(model="m", messages=[{"role": "user", "content": question}],
                                         tools=WEATHER, temperature=0, max_tokens=120, **kw)
    two = ask("What is the weather in Paris and in Tokyo?")
    calls = two.choices[0].message.tool_calls
    assert [json.loads(t.function.arguments)["city"] for t in calls] == ["Paris", "Tokyo"]
    assert two.choices[0].finish_reason == "tool_calls"
    one = ask("What is the weather in Paris and in Tokyo?", parallel_tool_calls=False)
    assert len(one.choices[0].message.tool_calls) == 1
    poem = list(ask("Write a haiku about autumn.", stream=True))
    texts = [ch.choices[0].delta.content for ch in poem if ch.choices and ch.choices[0].delta.content]
    assert len(texts) > 3 and not any(ch.choices[0].delta.tool_calls for ch in poem if ch.choices)


@pytest.mark.pair
def test_tools_whose_grammar_is_over_the_limits_are_a_400_naming_tools(qwen_server):
    huge = [{"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"v": {"enum": list(range(300_000))}}}}}]
    status, reply, _ = qwen_server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Pick one."}], "tools": huge, "tool_choice": "required",
        "max_tokens": 4})
    assert status == 400 and reply["error"]["param"] == "tools" and "bytes" in reply["error"]["message"], reply
