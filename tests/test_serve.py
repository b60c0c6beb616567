"""`spec-cli serve`, for real: a server process on 127.0.0.1 with SmolLM2
drafting for itself, spoken to with the real `openai` client and with raw
HTTP shaped like llama.vim's requests.

The server runs with --deterministic, so its text must be bit for bit
what `spec-cli generate --deterministic` writes for the same request,
whatever the cache held and whatever was drafted (a reused KV prefix is
bitwise a fresh one in that mode)."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from test_cli import spec

CHAT_PROMPTS = ["What is the capital of France?", "Name three colours.", "Say hello in Spanish.",
                "What is 2 + 2?", "Write a haiku about the sea.", "List two prime numbers.",
                "What does a cat say?", "Name a planet."]
KEY = "test-secret-key"


class Server:
    def __init__(self, model, env, *extra, deterministic=True, draft=None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = str(model)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spec_cli", "serve", "--target", self.model, "--draft", str(draft or model),
             "--ctx", "2048", *(["--deterministic"] if deterministic else []), "--port", str(self.port),
             "--quiet", *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.proc.stderr.read()}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("the server did not come up")

    def request(self, method, path, body=None, headers=None, raw=None):
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read()), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), e.headers

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def stop(self):
        """SIGINT ends it cleanly."""
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode, err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(model, *extra, **kw):
    """A Server (`Server`'s arguments) with no API key in its environment,
    for a fixture to `yield from`: on leaving, it must stop cleanly."""
    env = dict(os.environ)
    env.pop("SPEC_CLI_API_KEY", None)
    srv = Server(model, env, *extra, **kw)
    yield srv
    code, err = srv.stop()
    assert code == 0 and "Traceback" not in err, err


@pytest.fixture(scope="module")
def server(smollm_path):
    yield from serving(smollm_path, "--parallel", "2")


@pytest.fixture(scope="module")
def guarded(smollm_path):
    """No queue (one request at a time) and an API key."""
    srv = Server(smollm_path, dict(os.environ), "--parallel", "1", "--queue", "0", "--api-key", KEY, "--read-timeout", "1.5",
                 "--allow-host", "llm.example")
    yield srv
    srv.stop()


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "unused"), **kw)


def generate(model, prompt, *args):
    res = spec("generate", "--target", str(model), "--draft", str(model), "--ctx", "2048", "--deterministic",
               "--temp", "0", "--json", *args, prompt)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["text"]


def stream_long(server, headers=None, max_tokens=1900, prompt="Once upon a time"):
    """Start a long streamed completion; return the open connection once
    the first chunk came (the generation is then running)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}),
        {"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    assert resp.status == 200
    conn.first = resp.readline()
    assert conn.first.startswith(b"data: ")
    conn.resp = resp
    return conn


def read_stream(conn) -> str:
    """The text of a streamed completion, to its end."""
    chunks = [conn.first]
    while not chunks[-1].startswith(b"data: [DONE]"):
        line = conn.resp.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data: "):
            chunks.append(line)
    conn.close()
    return "".join(json.loads(c[6:])["choices"][0]["text"] for c in chunks[:-1])


def wait_idle(server, seconds=10.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        health = server.get("/health")[1]
        if not health["busy"] and not health["waiting"]:
            return True
        time.sleep(0.05)
    return False


def test_openai_client_streams_a_chat_completion_equal_to_generate(server):
    prompt = "Name three uses of a hash map."
    stream = client(server).chat.completions.create(
        model="anything", messages=[{"role": "user", "content": prompt}], max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 24 or chunks[-2].choices[0].finish_reason == "stop"
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason][0]
    spec_stats = final.model_extra["speculation"]
    assert spec_stats["proposer"] == "hybrid" and {"drafted", "accepted", "acceptance"} <= spec_stats.keys()
    assert {"draft_n", "draft_n_accepted", "predicted_n"} <= final.model_extra["timings"].keys()
    assert text == generate(server.model, prompt, "-n", "24")


def test_openai_client_streams_a_completion_equal_to_generate(server):
    prompt = "def fibonacci(n):\n"
    stream = client(server).completions.create(model="x", prompt=prompt, max_tokens=32, temperature=0,
                                               stream=True)
    text = "".join(c.choices[0].text for c in stream)
    assert text == generate(server.model, prompt, "--raw", "-n", "32")
    assert text


def test_infill_shaped_like_llama_vim(server):
    body = {"id_slot": 0, "input_prefix": "def add(a, b):\n", "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
            "prompt": "    ", "n_predict": 64, "stop": [], "n_indent": 4, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
            "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                                "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                                "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
                                "tokens_cached"]}
    status, reply, _ = server.post("/infill", body)
    assert status == 200, reply
    assert set(reply) == set(body["response_fields"])  # only what was asked, flat keys as llama-server
    content = reply["content"]
    assert isinstance(content, str) and reply["timings/predicted_n"] >= 1
    # n_indent: no line after the first may start indented less than 4 (the cut keeps its indentation only)
    for line in content.split("\n")[1:-1]:
        assert len(line) - len(line.lstrip(" \t")) >= 4, content
    # the warm-up request llama.vim sends (n_predict 0) reads the context and writes nothing
    status, warm, _ = server.post("/infill", {"input_extra": body["input_extra"], "n_predict": 0,
                                              "response_fields": [""]})
    assert status == 200


def test_eight_clients_at_once_each_get_their_own_text(server):
    c = client(server)

    def ask(prompt):
        r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": prompt}],
                                      max_tokens=16, temperature=0)
        return r.choices[0].message.content

    alone = [ask(p) for p in CHAT_PROMPTS]
    with ThreadPoolExecutor(len(CHAT_PROMPTS)) as pool:
        together = list(pool.map(ask, CHAT_PROMPTS))
    assert together == alone


def test_a_chats_second_turn_evaluates_only_its_new_tokens(server):
    messages = [{"role": "user", "content": "Tell me one fact about the Moon."}]
    _, first, _ = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0})
    messages += [first["choices"][0]["message"],
                 {"role": "user", "content": "And one about Mars?"}]
    _, second, _ = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "temperature": 0})
    new = second["usage"]["prompt_tokens"] - first["usage"]["prompt_tokens"]
    assert second["timings"]["prompt_n"] <= new + 2  # the reply and the new turn, not the conversation
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"]


def test_a_request_asked_again_drafts_from_the_earlier_output(smollm_path):
    """The lookup drafts at every step it has a match (no cost model, whose
    choices follow this machine's timings): asked again, it has the whole
    earlier answer."""
    srv = Server(smollm_path, dict(os.environ), "--proposer", "ngram", "--fixed-draft")
    try:
        body = {"prompt": "The colours of the rainbow are", "max_tokens": 24, "temperature": 0}
        _, first, _ = srv.post("/v1/completions", body)
        _, again, _ = srv.post("/v1/completions", body)
    finally:
        srv.stop()
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    assert again["speculation"]["steps"] < first["speculation"]["steps"]
    assert again["speculation"]["accepted"] > first["speculation"]["accepted"]


def test_a_client_that_disconnects_frees_the_server(server):
    conn = stream_long(server)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert wait_idle(server), "the abandoned generation kept the models busy"
    status, reply, _ = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "temperature": 0})
    assert status == 200 and reply["choices"][0]["text"]


def test_bad_requests_get_400_naming_the_field(server):
    status, reply, _ = server.post("/v1/chat/completions", raw=b"{not json")
    assert status == 400 and "not valid JSON" in reply["error"]["message"]
    status, reply, _ = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                            "temperature": "hot"})
    assert status == 400 and reply["error"]["param"] == "temperature" and "'temperature'" in reply["error"]["message"]
    status, reply, _ = server.post("/v1/chat/completions", {"messages": "hello"})
    assert status == 400 and reply["error"]["param"] == "messages"
    status, reply, _ = server.post("/v1/completions", {"prompt": "word " * 3000, "max_tokens": 4})
    assert status == 400 and "context holds 2048" in reply["error"]["message"]
    status, reply, _ = server.get("/v1/nothing")
    assert status == 404 and reply["error"]["type"] == "not_found_error"
    # what a float cannot hold, text that is not Unicode, JSON nested past the parser: 400, never 500
    status, reply, _ = server.post("/v1/completions", raw=b'{"prompt": "hi", "max_tokens": ' + b"9" * 400 + b"}")
    assert status == 400 and reply["error"]["param"] == "max_tokens"
    status, reply, _ = server.post("/v1/completions", raw=b'{"prompt": "hi \\ud800", "max_tokens": 4}')
    assert status == 400 and "lone surrogate" in reply["error"]["message"]
    status, reply, _ = server.post("/v1/completions", raw=b"[" * 100_000 + b"]" * 100_000)
    assert status == 400
    status, reply, _ = server.post("/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 1e-310})
    assert status == 400 and "greedy" in reply["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        client(server).chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}], n=2)


def test_keys_are_checked(guarded):
    assert guarded.get("/health")[0] == 200  # liveness needs no key
    assert guarded.get("/v1/models")[0] == 401
    status, reply, headers = guarded.get("/v1/models", headers={"Authorization": "Bearer wrong"})
    assert status == 401 and reply["error"]["type"] == "authentication_error"
    status, reply, _ = guarded.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and reply["data"][0]["id"]
    assert reply["data"][0]["meta"]["sampling_defaults"] == {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
    with pytest.raises(openai.AuthenticationError):
        client(guarded, api_key="wrong").models.list()


def test_a_full_queue_answers_503_with_retry_after(guarded):
    auth = {"Authorization": f"Bearer {KEY}"}
    conn = stream_long(guarded, auth)  # the one running; --queue 0 lets none wait
    try:
        status, reply, headers = guarded.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2}, headers=auth)
        assert status == 503 and reply["error"]["type"] == "unavailable_error"
        assert int(headers["Retry-After"]) >= 1
    finally:
        conn.close()
    assert wait_idle(guarded)
    assert guarded.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2}, headers=auth)[0] == 200


def raw_http(port, data: bytes, *, read=True, timeout=10.0) -> bytes:
    """Send `data` as it is on a fresh connection; what came back until the
    server closed it (or `timeout`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while read:
            try:
                piece = sock.recv(65536)
            except socket.timeout:
                break
            if not piece:
                break
            out += piece
        return out


def post_raw(server, path, body: bytes, headers: dict) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", path, body, headers)
    r = conn.getresponse()
    out = r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return out


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
HI = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
HUGE = "9" * 401


def hostile_requests():
    """(what, path, body bytes, headers, expected status): each answered in
    OpenAI's error shape, none with a 5xx."""
    j = {"Content-Type": "application/json"}
    cases = []
    for name in ("max_tokens", "seed", "temperature", "top_p", "top_k", "min_p", "n", "n_predict"):
        for path, body in (("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "%s": %s}'),
                           ("/v1/completions", '{"prompt": "hi", "%s": %s}'),
                           ("/infill", '{"input_prefix": "x", "%s": %s}')):
            for value in (HUGE, "-" + HUGE, "1e400", "NaN", '"7"', "true", "[1]", "{}"):
                cases.append((f"{name}={value[:8]}", path, (body % (name, value)).encode(), j, 400))
    for field, path in (("prompt", "/v1/completions"), ("input_prefix", "/infill"), ("input_suffix", "/infill"),
                        ("prompt", "/infill")):
        body = {"input_prefix": "x", "max_tokens": 2, field: "a\ud800b"}  # json.dumps writes it as \\ud800
        cases.append((f"surrogate in {field}", path, json.dumps(body).encode(), j, 400))
    cases += [
        ("surrogate in a message", "/v1/chat/completions",
         b'{"messages": [{"role": "user", "content": "\\udfff"}]}', j, 400),
        ("surrogate in a key", "/v1/completions", b'{"prompt": "hi", "\\ud800": 1}', j, 400),
        ("nested arrays", "/v1/completions", b"[" * 50_000 + b"]" * 50_000, j, 400),
        ("nested objects", "/v1/completions", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, j, 400),
        ("not JSON", "/v1/completions", b"{nope", j, 400),
        ("not UTF-8", "/v1/completions", b'{"prompt": "\xff\xfe"}', j, 400),
        ("empty body", "/v1/completions", b"", j, 400),
        ("a list body", "/v1/completions", b"[1, 2]", j, 400),
        ("a string body", "/v1/chat/completions", b'"hello"', j, 400),
        ("top_p 0", "/v1/completions", b'{"prompt": "hi", "top_p": 0}', j, 400),
        ("min_p 1", "/v1/completions", b'{"prompt": "hi", "min_p": 1.0}', j, 400),
        ("a denormal temperature", "/v1/completions", b'{"prompt": "hi", "temperature": 1e-310}', j, 400),
        ("a negative temperature", "/v1/completions", b'{"prompt": "hi", "temperature": -1}', j, 400),
        ("n 2", "/v1/chat/completions", json.dumps({**CHAT, "n": 2}).encode(), j, 400),
        ("max_tokens 0", "/v1/chat/completions", json.dumps({**CHAT, "max_tokens": 0}).encode(), j, 400),
        ("no messages", "/v1/chat/completions", b'{"messages": []}', j, 400),
        ("a bad role", "/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', j, 400),
        ("a tool result with no call", "/v1/chat/completions", b'{"messages": [{"role": "tool", "content": "x"}]}',
         j, 400),
        ("an image part", "/v1/chat/completions",
         b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}', j, 400),
        ("a message that is a string", "/v1/chat/completions", b'{"messages": ["hi"]}', j, 400),
        ("a token id outside the vocabulary", "/v1/completions", b'{"prompt": [1, 2, 99999999]}', j, 400),
        ("token ids and text mixed", "/v1/completions", b'{"prompt": [1, "a"]}', j, 400),
        ("no token ids", "/v1/completions", b'{"prompt": []}', j, 400),
        ("two prompts", "/v1/completions", b'{"prompt": ["a", "b"]}', j, 400),
        ("a suffix", "/v1/completions", b'{"prompt": "a", "suffix": "b"}', j, 400),
        ("17 stops", "/v1/completions", json.dumps({"prompt": "a", "stop": ["x"] * 17}).encode(), j, 400),
        ("stop of numbers", "/v1/completions", b'{"prompt": "a", "stop": [1]}', j, 400),
        ("stream a string", "/v1/completions", b'{"prompt": "a", "stream": "yes"}', j, 400),
        ("stream_options a list", "/v1/completions", b'{"prompt": "a", "stream_options": []}', j, 400),
        ("nothing to fill", "/infill", b'{}', j, 400),
        ("input_extra a dict", "/infill", b'{"input_prefix": "x", "input_extra": {"a": 1}}', j, 400),
        ("input_extra of numbers", "/infill", b'{"input_prefix": "x", "input_extra": [1]}', j, 400),
        ("negative n_indent", "/infill", b'{"input_prefix": "x", "n_indent": -1}', j, 400),
        ("response_fields a string", "/infill", b'{"input_prefix": "x", "response_fields": "content"}', j, 400),
        ("a prompt past the context", "/v1/completions", json.dumps({"prompt": "word " * 3000}).encode(), j, 400),
        ("text/plain", "/v1/completions", json.dumps({"prompt": "hi"}).encode(), {"Content-Type": "text/plain"}, 415),
        ("a form", "/v1/chat/completions", b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ("no content type", "/infill", b'{"input_prefix": "x"}', {}, 415),
        ("a web page", "/v1/completions", HI, {**j, "Origin": "https://evil.example"}, 403),
        ("a null origin", "/v1/completions", HI, {**j, "Origin": "null"}, 403),
        ("a look-alike origin", "/v1/completions", HI, {**j, "Origin": "http://localhost.evil.example"}, 403),
        ("DNS rebinding", "/v1/completions", HI, {**j, "Host": "evil.example:8012"}, 403),
        ("rebinding to a loopback-looking name", "/v1/completions", HI, {**j, "Host": "127.0.0.1.evil.example"}, 403),
        ("over 8 MiB", "/v1/completions", b'{"prompt": "' + b"a" * (8 << 20) + b'"}', j, 413),
        ("an unknown path", "/v1/nothing", b"{}", j, 404),
    ]
    return cases


def test_a_battery_of_hostile_requests_gets_4xx_in_openais_shape(server):
    """Every request here is answered with the status it should get, in
    OpenAI's error shape ({"error": {message, type, param, code}}), the
    field named where there is one; none gets a 5xx, and the server stays up."""
    wrong = []
    cases = hostile_requests()
    for what, path, body, headers, expected in cases:
        status, data, _ = post_raw(server, path, body, headers)
        try:
            error = json.loads(data)["error"]
            shaped = {"message", "type", "param", "code"} <= error.keys() and len(data) < 2000
        except (ValueError, KeyError, TypeError):
            shaped = False
        if status != expected or not shaped:
            wrong.append((what, status, data[:200]))
        name = what.split("=")[0]
        if status == 400 and "=" in what:
            assert error["param"] == name, (what, error)
    assert not wrong, wrong
    assert len(cases) > 200
    # a body cut short by a client that leaves, and a broken request line: no traceback (checked at shutdown)
    raw_http(server.port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 1000\r\n\r\n{\"prompt\": \"a", read=False)
    assert raw_http(server.port, b"BROKEN\x00 / HTTP/9\r\n\r\n").startswith(b"HTTP/1.1 400")
    status, reply, _ = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "temperature": 0})
    assert status == 200 and reply["choices"][0]["text"]


def test_cross_site_pages_are_refused_and_local_ones_get_cors(server):
    body, j = HI, {"Content-Type": "application/json"}
    status, _, headers = post_raw(server, "/v1/completions", body, {**j, "Origin": "http://localhost:3000"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://127.0.0.1:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    r = conn.getresponse()
    r.read()
    assert r.status == 204 and "Authorization" in r.getheader("access-control-allow-headers")
    conn.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    r = conn.getresponse()
    r.read()
    assert r.status == 403 and r.getheader("access-control-allow-origin") is None
    conn.close()
    # addressed by a loopback name, with or without a port, the server answers
    for host in ("localhost", f"localhost:{server.port}", f"[::1]:{server.port}", "127.0.0.1"):
        assert post_raw(server, "/v1/completions", body, {**j, "Host": host})[0] == 200, host
    # an HTTP/1.0 client that sends no Host at all is no browser: served
    head = b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert raw_http(server.port, head + body, timeout=60).startswith(b"HTTP/1.1 200")


def test_a_half_sent_request_is_dropped_after_the_read_timeout(guarded):
    """--read-timeout 1.5: a request head never finished is closed; a body
    that stalls is answered 408, in OpenAI's shape."""
    t0 = time.time()
    assert raw_http(guarded.port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n") == b""
    assert time.time() - t0 < 8
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    reply = raw_http(guarded.port, head)
    assert reply.startswith(b"HTTP/1.1 408") and b'"timeout_error"' in reply


def test_allow_host_adds_a_name(guarded):
    auth = {"Authorization": f"Bearer {KEY}"}
    assert guarded.get("/v1/models", headers={**auth, "Host": "llm.example:8012"})[0] == 200
    status, reply, _ = guarded.get("/v1/models", headers={**auth, "Host": "other.example"})
    assert status == 403 and "--allow-host" in reply["error"]["message"]


def test_a_non_streamed_client_that_leaves_frees_the_worker_at_once(server):
    """Not streamed, so no write fails when it leaves: the disconnect
    itself ends the generation, within a step."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 1900,
                                                        "temperature": 0}), {"Content-Type": "application/json"})
    deadline = time.time() + 30
    while not server.get("/health")[1]["busy"] and time.time() < deadline:
        time.sleep(0.02)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert wait_idle(server, 2.0), "the generation went on after its client left"


def test_a_queued_client_that_leaves_gives_up_its_place(server):
    running = stream_long(server)
    second = stream_long(server, prompt="It was a dark and stormy night")  # both slots (--parallel 2) busy
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 4}),
                     {"Content-Type": "application/json"})
        deadline = time.time() + 10
        while server.get("/health")[1]["waiting"] != 1 and time.time() < deadline:
            time.sleep(0.02)
        assert server.get("/health")[1]["waiting"] == 1
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        deadline = time.time() + 2
        while server.get("/health")[1]["waiting"] and time.time() < deadline:
            time.sleep(0.02)
        health = server.get("/health")[1]
        assert health["waiting"] == 0 and health["running"] == 2
    finally:
        running.close()
        second.close()
    assert wait_idle(server)


INFILL = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n", "n_predict": 16,
          "temperature": 0, "response_fields": ["content", "stop_type", "tokens_cached", "tokens_evaluated",
                                                 "tokens_predicted", "timings/predicted_n"]}


def test_an_editor_is_served_between_a_streaming_completions_steps(server):
    """An /infill sent while a completion streams is answered while the
    stream still runs, with the text it gets alone; the stream, paused for
    it, goes on to the text it gets alone too (each in its own KV sequence)."""
    alone = server.post("/infill", INFILL)[1]
    prompt, n = "The history of the city of Rome", 400
    expected = generate(server.model, prompt, "--raw", "-n", str(n))
    conn = stream_long(server, max_tokens=n, prompt=prompt)
    status, during, _ = server.post("/infill", INFILL)
    still_running = server.get("/health")[1]["busy"]
    assert status == 200 and during == alone
    assert still_running, "the infill waited for the whole stream"
    assert read_stream(conn) == expected


def test_llama_server_fields_stop_type_tokens_cached_predicted_n(server):
    status, reply, _ = server.post("/infill", INFILL)
    assert status == 200
    assert reply["tokens_cached"] == reply["tokens_evaluated"] + reply["tokens_predicted"]
    assert reply["timings/predicted_n"] == reply["tokens_predicted"]
    assert reply["stop_type"] in ("eos", "limit")
    status, worded, _ = server.post("/infill", {**INFILL, "stop": ["b"]})
    assert worded["stop_type"] == "word" and "b" not in worded["content"]
    status, limited, _ = server.post("/infill", {**INFILL, "n_predict": 1})
    assert limited["stop_type"] == "limit" and limited["tokens_predicted"] == 1
    # llama.vim's warm-up on the chat endpoint: n_predict 0 reads the prompt and writes nothing
    status, warm, _ = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                                           "n_predict": 0})
    assert status == 200 and warm["choices"][0]["message"]["content"] == ""
    assert warm["usage"]["completion_tokens"] == 0


@pytest.fixture
def fixed_lookup(smollm_path):
    """The lookup drafting at a fixed length: whether the cost model drafts
    for a 135M model at all is this machine's timing."""
    yield from serving(smollm_path, "--proposer", "ngram", "--fixed-draft")


def test_the_page_and_the_drafted_spans_of_a_stream(fixed_lookup):
    """`/` is the chat page (one static file, its own script only), and each
    streamed chunk says which of its text was drafted (`spec_segments`): the
    pieces make the chunk's text, drafted ones among them, and the last
    chunk's `speculation` counts them."""
    server = fixed_lookup
    req = urllib.request.Request(server.url + "/")
    with urllib.request.urlopen(req, timeout=60) as r:
        page, csp = r.read().decode(), r.headers["Content-Security-Policy"]
    assert r.status == 200 and "<title>spec-cli</title>" in page and "connect-src 'self'" in csp
    assert ".innerHTML" not in page  # text goes in with textContent
    counting = " ".join(str(i) for i in range(1, 21))  # the lookup drafts the next round from the first
    stream = client(server).completions.create(model="x", prompt=f"{counting}\n{counting}\n1 2 3", max_tokens=48,
                                               temperature=0, stream=True)
    drafted, final = 0, None
    for chunk in stream:
        extra = chunk.model_extra or {}
        if "spec_segments" in extra:
            assert "".join(s["text"] for s in extra["spec_segments"]) == chunk.choices[0].text
            drafted += sum(len(s["text"]) for s in extra["spec_segments"] if s["drafted"])
        if "speculation" in extra:
            final = extra["speculation"]
    assert drafted > 0 and final["accepted"] > 0
    assert set(final) >= {"per_position", "by_source", "draft_ms", "verify_ms", "tokens_per_s"}
