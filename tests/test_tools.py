"""Tool calls as pure logic (core/tools.py): the grammar each family's
syntax gets, compiled by llguidance over a byte-level tokenizer with the
family's marker tokens; reading replies in every form; what a stream may
show before a call is known; the request fields.  The real model's calls
are tested in test_structured.py."""

import json

import pytest

from spec_cli.core.constraint import Spec, compile_spec
from spec_cli.core.calls import StreamFilter, parse
from spec_cli.core.tools import Tool, ToolUse, family_of, grammar
from spec_cli.serve.api import ApiError, parse_chat

from test_constraint import Toy

WEATHER = Tool("get_weather", "Weather in a city", {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"], "additionalProperties": False})
TIME = Tool("get_time", "", None)
TOY = Toy(specials=(b"<tool_call>", b"</tool_call>"))
CALL, END = 265, 266  # the two special tokens' ids in TOY


@pytest.fixture(scope="module")
def tokenizer():
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(TOY))


def matcher(tokenizer, use, family="hermes", answer=None):
    text = grammar(use, family, {"<tool_call>": CALL, "</tool_call>": END}, answer)
    return compile_spec(Spec("lark", text, "tools"), tokenizer, len(TOY.tokens)).start()


def test_families_are_told_by_their_templates():
    assert family_of("... <tool_call>\\n{{ tool_call | tojson }} ...") == "hermes"
    assert family_of("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert family_of("Environment: ipython <|python_tag|>") == "llama3"
    assert family_of("{{ messages }}") is None and family_of(None) is None


def test_required_forces_the_call_s_wrapper_and_name_and_its_arguments_follow_the_schema(tokenizer):
    c = matcher(tokenizer, ToolUse((WEATHER,), "required"))
    forced = c.forced()
    assert forced[0] == CALL and b"".join(TOY.tokens[t] for t in forced[1:]).startswith(
        b'\n{"name": "get_weather", "arguments": {"city": ')
    c.advance(forced)
    rest = TOY('"Paris"}}\n') + [END]
    assert c.legal(rest) == len(rest)
    assert c.legal(TOY('42}}')) == 0  # a number where the schema wants a string


def test_auto_lets_any_text_come_and_constrains_a_call_once_it_starts(tokenizer):
    c = matcher(tokenizer, ToolUse((WEATHER, TIME)))
    text = TOY("Any text at all {\n")
    assert c.forced() == [] and c.legal(text) == len(text)
    c.advance(TOY("Let me look. "))
    call = [CALL] + TOY('\n{"name": "get_time", "arguments": {}}\n') + [END, TOY.eos_token_id]
    assert c.legal(call) == len(call)
    assert c.legal([CALL] + TOY('\n{"name": "get_date"')) < 15   # not a tool of the request


def test_a_typed_answer_or_a_call_and_nothing_else(tokenizer):
    answer = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
    c = matcher(tokenizer, ToolUse((WEATHER,)), answer=answer)
    assert c.legal(TOY('{"summary": "cloudy"}')) == len(TOY('{"summary": "cloudy"}'))
    assert c.legal(TOY("Free text")) == 0
    assert c.legal([CALL]) == 1


def test_a_strict_tool_refuses_what_the_engine_cannot_enforce_and_a_lenient_one_reports_it(tokenizer):
    from spec_cli.core.constraint import ConstraintError

    params = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    loose = ToolUse((Tool("tag", "", params),), "required")
    text = grammar(loose, "hermes", {"<tool_call>": CALL, "</tool_call>": END})
    assert any("uniqueItems" in w for w in compile_spec(Spec("lark", text, "tools"), tokenizer, len(TOY.tokens)).warnings)
    strict = ToolUse((Tool("tag", "", params, strict=True),), "required")
    text = grammar(strict, "hermes", {"<tool_call>": CALL, "</tool_call>": END})
    with pytest.raises(ConstraintError, match="uniqueItems"):
        compile_spec(Spec("lark", text, "tools"), tokenizer, len(TOY.tokens))


def test_a_strict_tool_s_oneof_is_rewritten_and_enforced_as_exactly_one(tokenizer):
    """A tool's arguments go through core/schema.py's rewrites too: a strict
    `oneOf` of key groups compiles, and a call with both groups is refused."""
    params = {"type": "object", "properties": {"r": {"type": "integer"}, "w": {"type": "integer"}},
              "oneOf": [{"required": ["r"]}, {"required": ["w"]}]}
    use = ToolUse((Tool("area", "", params, strict=True),), "required")
    c = matcher(tokenizer, use)
    one, both = ([CALL] + TOY('\n{"name": "area", "arguments": ' + args + '}\n') + [END]
                 for args in ('{"w": 3}', '{"r": 2, "w": 3}'))
    assert c.legal(one) == len(one) and c.legal(both) < len(both)


@pytest.mark.parametrize("family", ["llama3", "mistral"])
def test_the_other_families_grammars_compile_and_constrain(tokenizer, family):
    c = matcher(tokenizer, ToolUse((WEATHER,), "required"), family)
    text = b"".join(TOY.tokens[t] for t in c.forced())
    assert (b'{"name": "get_weather", "parameters": {"city": ' if family == "llama3"
            else b'[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": ') == text


@pytest.mark.parametrize("reply, content, names, form", [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', None,
     ["get_weather"], "template"),
    ('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>\n<tool_call>\n'
     '{"name": "get_time", "arguments": {}}\n</tool_call>', "Sure.", ["get_weather", "get_time"], "template"),
    ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', None, ["get_weather"], "fenced"),
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', None, ["get_weather"], "bare"),
    ('{{"name": "get_weather", "arguments": {"city": "./"}}}', None, ["get_weather"], "bare"),  # Qwen2.5-Coder's
    ('{{"name": "nope", "arguments": {}}}', '{{"name": "nope", "arguments": {}}}', [], None),
    ('[TOOL_CALLS][{"name": "get_time", "arguments": "{}"}]', None, ["get_time"], "template"),
    ('{"name": "get_date", "arguments": {}}', '{"name": "get_date", "arguments": {}}', [], None),
    ("The weather is fine.", "The weather is fine.", [], None),
    ('```python\nprint(1)\n```', '```python\nprint(1)\n```', [], None),
])
def test_replies_are_read_in_every_form(reply, content, names, form):
    p = parse(reply, ToolUse((WEATHER, TIME)))
    assert p.content == content and [c["function"]["name"] for c in p.calls] == names and p.form == form
    for c in p.calls:
        assert c["id"].startswith("call_") and isinstance(json.loads(c["function"]["arguments"]), dict)


def test_tool_choice_none_reads_no_call():
    reply = '{"name": "get_time", "arguments": {}}'
    assert parse(reply, ToolUse((TIME,), "none")).calls == ()


def _stream(pieces, use=ToolUse((WEATHER,))):
    f = StreamFilter(use)
    shown = "".join(f.feed(p) for p in pieces)
    rest, parsed = f.finish()
    return shown, rest, parsed


def test_a_stream_shows_text_until_a_call_starts_and_holds_a_reply_that_may_be_one():
    shown, rest, parsed = _stream(["Let me check", " the weather. <tool", "_call>\n{\"name\": \"get_weather\", ",
                                   "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"])
    assert shown == "Let me check the weather. " and rest == "" and parsed.calls
    shown, rest, parsed = _stream(["{\"name\": \"get_weather\",", " \"arguments\": {\"city\": \"Oslo\"}}"])
    assert shown == "" and rest == "" and parsed.form == "bare"
    shown, rest, parsed = _stream(["{\"answer\"", ": 42}"])
    assert shown + rest == "{\"answer\": 42}" and not parsed.calls  # once whole, known not to be a call
    shown, rest, parsed = _stream(["Plain ", "text <", "b>"])
    assert shown + rest == "Plain text <b>" and not parsed.calls


def _chat(**fields):
    return parse_chat({"messages": [{"role": "user", "content": "hi"}], **fields})


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_the_tool_fields_are_read_and_checked():
    use = _chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                parallel_tool_calls=False).tools
    assert (use.choice, use.name, use.parallel, use.tools[0].name) == ("function", "get_weather", False,
                                                                        "get_weather")
    assert _chat(tools=TOOLS).tools.choice == "auto" and _chat().tools is None
    history = parse_chat({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "A"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": TOOLS})
    assert history.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "A"}
    assert history.messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}


@pytest.mark.parametrize("fields, param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0]"),
    ({"tools": TOOLS * 2}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools[0].function.strict"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools[0].function.parameters"),
    ({"tools": TOOLS, "grammar": 'root ::= "a"'}, "grammar"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}},
     "response_format.json_schema.strict"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"json_schema": {"type": "object"}, "grammar": 'root ::= "a"'}, "json_schema"),
    ({"json_schema": "{}"}, "json_schema"),
])
def test_bad_tool_and_format_fields_are_400s_naming_the_field(fields, param):
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(ApiError) as e:
        parse_chat(body)
    assert e.value.status == 400 and e.value.param == param


# -- every family, from the real templates (tests/templates) ------------------------------------------

WEATHER2 = Tool("get_weather", "The weather", {"type": "object", "properties": {"city": {"type": "string"},
                                                                      "days": {"type": "integer"}}})
ZONE = Tool("get_time", "The time", {"type": "object", "properties": {"zone": {"type": "string"}}})
SAMPLE = [{"id": "call1abcd", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": {"city": "Oslo", "days": 2}}},
          {"id": "call2abcd", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "CET"}}}]
FAMILIES = {"Qwen-Qwen3-0.6B.jinja": "hermes", "Qwen3-Coder.jinja": "qwen3coder", "Qwen3.5-4B.jinja": "qwen3coder",
            "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral2",
            "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek", "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek",
            "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "commandr", "openai-gpt-oss-120b.jinja": "gptoss",
            "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3"}


def _rendered_calls(name: str) -> str:
    """What the template writes for an assistant turn that called both tools (Llama 3.1's: one)."""
    from test_reasoning import render

    calls = SAMPLE[:1] if "Llama" in name else SAMPLE
    tools = [t.as_openai() for t in (WEATHER2, ZONE)]
    text = render(name, [{"role": "user", "content": "QQQ"}, {"role": "assistant", "content": "", "tool_calls": calls},
                         {"role": "tool", "tool_call_id": "call1abcd", "content": "RRR"}], tools=tools)
    text = text[text.index("QQQ") + 3:text.index("RRR")]
    if "<|eot_id|>" in text:  # Llama 3.1: the call is the assistant turn's whole text
        text = text[:text.rindex("<|eot_id|>")]
        text = text[text.rindex("\n\n") + 2:]
    return text


@pytest.mark.parametrize("name, family", FAMILIES.items())
def test_each_family_is_told_by_what_its_template_writes_and_its_calls_read_back(name, family):
    written = _rendered_calls(name)
    from test_reasoning import TEMPLATES

    assert family_of((TEMPLATES / name).read_text(), written) == family
    p = parse(written, ToolUse((WEATHER2, ZONE)))
    want = SAMPLE[:1] if family in ("llama3", "gptoss") else SAMPLE  # one call a turn in those templates
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in p.calls] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in want]
    assert p.form == ("bare" if family == "llama3" else "template")  # Llama 3's own form is a bare object
    assert len(parse(written, ToolUse((WEATHER2, ZONE), parallel=False)).calls) == 1


@pytest.mark.parametrize("name", ["Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
                                  "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"])
def test_each_family_s_grammar_admits_its_template_s_own_calls(tokenizer, name):
    family = FAMILIES[name]
    written = _rendered_calls(name)
    begin = min(i for i in (written.find(m) for m in ("<tool_call>", "<｜tool▁calls▁begin｜>", "<|START_ACTION|>"))
                if i >= 0)
    end = max(written.rfind(m) + len(m) for m in ("</tool_call>", "<｜tool▁calls▁end｜>", "<|END_ACTION|>"))
    calls = written[begin:end]
    text = grammar(ToolUse((WEATHER2, ZONE), "required"), family, {})
    c = compile_spec(Spec("lark", text, "tools"), tokenizer, len(TOY.tokens)).start()
    assert c.legal(TOY(calls)) == len(TOY(calls)), (family, calls)
    wrong = calls.replace("Oslo", "Oslo\"}, \"x\": {\"") if family != "qwen3coder" else calls.replace("city", "town")
    assert c.legal(TOY(wrong)) < len(TOY(wrong))


def test_auto_constrains_the_forms_small_models_write_once_they_start(tokenizer):
    c = matcher(tokenizer, ToolUse((WEATHER, TIME)))
    fence = TOY('I will look.\n```json\n{"name": "get_time", "arguments": {}}\n'
                '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```')
    assert c.legal(fence) == len(fence)
    bad = TOY('I will look.\n```json\n{"name": "get_weather", "arguments": {"city": 7}}')
    assert c.legal(bad) < len(bad)  # the arguments follow the schema once the fence opens
    bare = TOY('{"name": "get_time", "arguments": {}}\n{"name": "get_weather", "arguments": {"city": 7}}')
    assert c.legal(bare) < len(bare)
    # an object naming a tool the request did not give is let be, as text: it is not made a call to one it did
    stray = '{"name": "get_time", "arguments": {}}\n{"name": "get_date", "arguments": {"day": 1}}'
    assert c.legal(TOY(stray)) == len(TOY(stray))
    code = TOY("Here:\n```python\nprint({'name': 1})\n```\nDone.")
    assert c.legal(code) == len(code)  # other text, code fences included, is free
    one = matcher(tokenizer, ToolUse((WEATHER, TIME), parallel=False))
    two = TOY('```json\n{"name": "get_time", "arguments": {}}\n{"name"')
    assert one.legal(two) < len(two)  # parallel_tool_calls false: one call


@pytest.mark.parametrize("reply, names", [
    ('```json\n{"name": "get_time", "arguments": {}}\n{"name": "get_weather", "arguments": {"city": "A"}}\n```',
     ["get_time", "get_weather"]),
    ('```json\n[{"name": "get_time", "arguments": {}}, {"name": "get_time", "arguments": {}}]\n```',
     ["get_time", "get_time"]),
    ('First:\n```json\n{"name": "get_time", "arguments": {}}\n```\nThen:\n```json\n'
     '{"name": "get_weather", "arguments": {"city": "B"}}\n```', ["get_time", "get_weather"]),
    ('I will call both.\n{"name": "get_time", "arguments": {}}\n{"name": "get_weather", "arguments": {"city": "C"}}',
     ["get_time", "get_weather"]),
    ('[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"city": "D"}', ["get_time", "get_weather"]),
    ('<|tool_call|>[{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "E"}}]',
     ["get_time", "get_weather"]),
])
def test_several_calls_are_read_in_every_form(reply, names):
    p = parse(reply, ToolUse((WEATHER, TIME)))
    assert [c["function"]["name"] for c in p.calls] == names


def test_a_stream_lets_a_code_fence_through_and_holds_a_call_fence():
    shown, rest, parsed = _stream(["Here:\n```py", "thon\nx = 1\n```\nand ", "now\n```json\n{\"name\": \"get_time\", ",
                                   "\"arguments\": {}}\n```"], ToolUse((WEATHER, TIME)))
    assert shown == "Here:\n```python\nx = 1\n```\nand now\n" and [c["function"]["name"] for c in parsed.calls] == [
        "get_time"]


def test_a_lazy_tool_grammar_masks_nothing_until_a_call_opens(tokenizer):
    from spec_cli.core.lazy import LazyGrammar
    from spec_cli.core.tools import triggers

    use = ToolUse((WEATHER, TIME))
    compiled = compile_spec(Spec("lark", grammar(use, "hermes", {"<tool_call>": CALL, "</tool_call>": END}), "tools"),
                            tokenizer, len(TOY.tokens))
    c = LazyGrammar(compiled, tuple(t.encode() for t in triggers("hermes")), lambda t: TOY.tokens[t]).start()
    free = TOY("Some text, with {braces} and ```code```.\n")
    assert c.legal(free) == len(free) and not c.active  # legal leaves the state as it found it
    c.advance(free)
    assert not c.active and c.masks == 0 and c.forced() == []
    call = TOY('{"name": "get_weather", "arguments": {"city": 7}}')
    assert c.legal(call) < len(call)  # once the call opens, its arguments follow the schema
    c.advance(TOY('{"name": "get_weather", "arguments": {"city": '))
    assert c.active and c.masks == 0
    mask = c.mask()
    assert c.allows(mask, TOY('"')[0]) and not c.allows(mask, TOY("7")[0])
    c.rollback(len(TOY('{"name": "get_weather", "arguments": {"city": ')))
    assert not c.active and c.count == len(free)  # back before the opening: free again
