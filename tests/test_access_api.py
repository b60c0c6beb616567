"""The server's checks before a request reaches a model, as pure logic: the
request parsers of serve/api.py (every refusal a 400 naming its field) and
the access middleware of serve/access.py (Host, Origin, CORS, Content-Type),
driven as ASGI with a recording app.  The same through real HTTP and a real
model: test_serve.py and test_fields.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from spec_cli.serve.access import Access, is_loopback, origin_allowed
from spec_cli.serve.api import parse_chat, parse_completion, parse_infill
from helpers import CHAT, api_error as _err



# -- serve/api.py ------------------------------------------------------------
def test_chat_defaults_are_llama_servers_and_the_request_fields_are_read():
    r = parse_chat({**CHAT, "max_tokens": 7, "temperature": 0.2, "top_k": 5, "seed": -1, "stop": "\n\n",
                    "stream": True, "stream_options": {"include_usage": True}})
    assert (r.kind, r.max_tokens, r.sampling.temperature, r.sampling.top_k) == ("chat", 7, 0.2, 5)
    assert r.seed == (-1) % (1 << 31) and r.stop == ("\n\n",) and r.stream and r.include_usage
    plain = parse_chat(CHAT)
    assert plain.sampling.temperature == 1.0 and plain.max_tokens is None and not plain.stream
    assert parse_chat({**CHAT, "max_completion_tokens": 3, "max_tokens": 9}).max_tokens == 3  # the newer name first


@pytest.mark.parametrize("body, param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "tool", "content": "42", "tool_call_id": "a"}]}, "messages[0]"),
    ({**CHAT, "temperature": -1}, "temperature"),
    ({**CHAT, "temperature": "hot"}, "temperature"),
    ({**CHAT, "top_p": 1.5}, "top_p"),
    ({**CHAT, "top_k": 2.5}, "top_k"),
    ({**CHAT, "max_tokens": 0}, "max_tokens"),
    ({**CHAT, "max_tokens": 10 ** 400}, "max_tokens"),
    ({**CHAT, "seed": 1e400}, "seed"),
    ({**CHAT, "n": 2}, "n"),
    ({**CHAT, "stop": [1, 2]}, "stop"),
    ({**CHAT, "stop": ["x"] * 100}, "stop"),
    ({**CHAT, "stream": "yes"}, "stream"),
    ({**CHAT, "stream_options": []}, "stream_options"),
    ({**CHAT, "ignore_eos": True}, "ignore_eos"),
])
def test_a_chat_request_that_cannot_be_honoured_is_a_400_naming_its_field(body, param):
    assert _err(parse_chat, body).param == param


def test_a_body_that_is_not_an_object_is_refused_whole():
    for body in ([], "text", 3, None):
        e = _err(parse_chat, body)
        assert "object" in e.message


def test_completion_prompts_text_or_token_ids_one_a_request():
    assert parse_completion({"prompt": "def f():"}).prompt == "def f():"
    assert parse_completion({"prompt": ["def f():"]}).prompt == "def f():"
    r = parse_completion({"prompt": [1, 2, 3]})
    assert r.prompt_ids == [1, 2, 3] and r.max_tokens == 16  # OpenAI's default length for completions
    assert parse_completion({"prompt": "x"}, native=True).max_tokens is None  # llama-server's: until the end
    assert parse_completion({"prompt": "x", "n_predict": -1}, native=True).max_tokens is None
    for bad in ({"prompt": ""}, {"prompt": ["a", "b"]}, {"prompt": [1, True]}, {"prompt": {"a": 1}}, {}):
        assert _err(parse_completion, bad).param == "prompt"
    for bad in ({"prompt": "x", "suffix": 5}, {"prompt": [1, 2], "suffix": "y"}):
        assert _err(parse_completion, bad).param == "suffix"
    assert _err(parse_completion, {"prompt": "x", "suffix": "y", "echo": True}).param == "echo"


def test_a_suffix_makes_a_completion_fill_in_the_middle_in_its_own_shape():
    """OpenAI's legacy `suffix` (Tabby's openai/completion, minuet-ai, the
    openai package): the editor's path, answered as the endpoint answers."""
    r = parse_completion({"prompt": "def f(", "suffix": "):\n", "max_tokens": 8, "temperature": 0})
    assert (r.kind, r.input_prefix, r.input_suffix, r.fim_from, r.native) == ("infill", "def f(", "):\n", "suffix",
                                                                              False)
    assert r.editor_stops and not parse_completion({"prompt": "a", "suffix": "", "editor_stops": False}).editor_stops
    assert parse_completion({"prompt": "a", "suffix": "b"}, native=True).native
    assert parse_infill({"input_prefix": "a"}).native  # /infill: llama-server's shape


def test_infill_reads_llama_vims_fields_and_refuses_nothing_to_complete():
    r = parse_infill({"input_prefix": "def f(", "input_suffix": "):", "n_indent": 4, "t_max_predict_ms": 250,
                      "input_extra": [{"filename": "a.py", "text": "x = 1"}, {"text": "y"}], "n_predict": 32})
    assert (r.input_prefix, r.input_suffix, r.n_indent, r.t_max_predict_ms) == ("def f(", "):", 4, 250)
    assert r.input_extra == [("a.py", "x = 1"), ("tmp", "y")] and r.max_tokens == 32
    assert r.sampling.temperature == 0.0  # an editor's completion: the most likely one
    e = _err(parse_infill, {"input_prefix": "", "input_suffix": ""})
    assert "nothing to complete" in e.message
    assert _err(parse_infill, {"input_prefix": "x", "input_extra": "y"}).param == "input_extra"
    assert _err(parse_infill, {"input_prefix": "x", "input_extra": [{"text": 3}]}).param == "input_extra[0]"
    assert _err(parse_infill, {"input_prefix": "x", "n_indent": -1}).param == "n_indent"


def test_structured_output_is_read_and_a_broken_one_refused():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = parse_chat({**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.constraint.kind == "json_schema"
    assert parse_chat({**CHAT, "response_format": {"type": "json_object"}}).constraint.kind == "json_object"
    assert parse_chat({**CHAT, "response_format": {"type": "text"}}).constraint is None
    assert _err(parse_chat, {**CHAT, "response_format": {"type": "yaml"}}).param.startswith("response_format")
    assert _err(parse_chat, {**CHAT, "response_format": "json"}).param.startswith("response_format")


# -- serve/access.py ---------------------------------------------------------
def test_loopback_names_and_allowed_origins():
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.8.9.1", "::1", "[::1]", "app.localhost"))
    assert not any(is_loopback(h) for h in ("example.com", "10.0.0.1", "0.0.0.0", "", "localhost.evil.com"))
    assert origin_allowed("http://localhost:3000", frozenset())
    assert origin_allowed("https://chat.example.com", frozenset({"https://chat.example.com"}))
    assert not origin_allowed("https://chat.example.com", frozenset())
    assert not origin_allowed("null", frozenset()) and not origin_allowed("file://", frozenset())


def _call(access: Access, method: str = "GET", headers: dict | None = None):
    """One request through the middleware: (status, headers, body) and
    whether the app behind it was reached."""
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    access.app = app
    scope = {"type": "http", "method": method, "path": "/v1/models",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
    asyncio.run(access(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, bool(reached)


def test_a_foreign_host_is_refused_against_dns_rebinding_unless_allowed():
    access = Access(None, check_host=True, hosts=("proxy.lan",))
    assert _call(access, headers={"Host": "127.0.0.1:8012"})[3]
    assert _call(access, headers={"Host": "[::1]:8012"})[3]
    assert _call(access, headers={"Host": "proxy.lan"})[3]
    status, _, body, reached = _call(access, headers={"Host": "evil.example:8012"})
    assert status == 403 and not reached and "--allow-host" in json.loads(body)["error"]["message"]
    assert _call(Access(None, check_host=False), headers={"Host": "evil.example"})[3]  # --host 0.0.0.0


def test_a_web_page_not_allowed_is_refused_and_an_allowed_one_gets_cors_headers():
    access = Access(None, check_host=True, cors=("https://chat.example.com",))
    status, _, body, reached = _call(access, headers={"Host": "localhost", "Origin": "https://evil.example"})
    assert status == 403 and not reached and "--cors" in json.loads(body)["error"]["message"]
    status, headers, _, reached = _call(access, headers={"Host": "localhost", "Origin": "https://chat.example.com"})
    assert status == 200 and reached and headers["access-control-allow-origin"] == "https://chat.example.com"
    status, headers, _, reached = _call(access, "OPTIONS", {"Host": "localhost", "Origin": "http://localhost:5173",
                                                            "Access-Control-Request-Method": "POST"})
    assert status == 204 and not reached and "POST" in headers["access-control-allow-methods"]


def test_a_post_that_is_not_json_is_a_415_before_the_app():
    access = Access(None, check_host=True)
    status, _, body, reached = _call(access, "POST", {"Host": "localhost", "Content-Type": "text/plain"})
    assert status == 415 and not reached and "application/json" in json.loads(body)["error"]["message"]
    assert _call(access, "POST", {"Host": "localhost", "Content-Type": "application/json; charset=utf-8"})[3]
    assert _call(access, "POST", {"Host": "localhost"})[0] == 415
