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
    def __init__(self, model, env, *extra):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = str(model)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spec_cli", "serve", "--target", self.model, "--draft", self.model,
             "--ctx", "2048", "--deterministic", "--port", str(self.port), "--quiet", *extra],
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


@pytest.fixture(scope="module")
def server(smollm_path):
    env = dict(os.environ)
    env.pop("SPEC_CLI_API_KEY", None)
    srv = Server(smollm_path, env)
    yield srv
    code, err = srv.stop()
    assert code == 0 and "Traceback" not in err, err


@pytest.fixture(scope="module")
def guarded(smollm_path):
    """No queue (one request at a time) and an API key."""
    srv = Server(smollm_path, dict(os.environ), "--queue", "0", "--api-key", KEY)
    yield srv
    srv.stop()


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "unused"), **kw)


def generate(model, prompt, *args):
    res = spec("generate", "--target", str(model), "--draft", str(model), "--ctx", "2048", "--deterministic",
               "--temp", "0", "--json", *args, prompt)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["text"]


def stream_long(server, headers=None):
    """Start a long streamed completion; return the open connection once
    the first chunk came (the generation is then running)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({
        "prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0, "stream": True}),
        {"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")
    return conn


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


def test_a_request_asked_again_drafts_from_the_earlier_output(server):
    body = {"prompt": "The colours of the rainbow are", "max_tokens": 24, "temperature": 0}
    _, first, _ = server.post("/v1/completions", body)
    _, again, _ = server.post("/v1/completions", body)
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
