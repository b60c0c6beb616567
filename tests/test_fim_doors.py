"""Fill-in-the-middle as editor plugins ask for it, for real: the request
shapes of Tabby (both kinds), minuet-ai and the `openai` package (`suffix`),
twinny and Continue (the model's FIM template as a raw prompt), Continue's
and twinny's Ollama providers (`suffix`, `raw`), against `spec-cli serve` on
the default pair (Qwen2.5-Coder, which has FIM tokens).  Each must give a
middle an editor can insert whole: it completes the code and stops where
the suffix begins.  llama.vim's `/infill`: test_serve.py."""

from __future__ import annotations

import http.client
import json

import ollama
import pytest

from test_serve import client, post_raw
from test_structured import qwen_server as qwen  # noqa: F401 (a fixture)

pytestmark = pytest.mark.pair

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\n\nprint(add(1, 2))\n"
RAW = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
# a middle of several lines, the cursor at a line's start
LOOP_PREFIX = "def total(xs):\n    s = 0\n"
LOOP_SUFFIX = "    return s\n\n\nprint(total([1, 2, 3]))\n"


def _clean(middle: str, prefix=PREFIX, suffix=SUFFIX) -> bool:
    """The insertion runs and does not repeat the suffix."""
    code = prefix + middle + suffix
    nxt = next(line.strip() for line in suffix.split("\n") if line.strip())
    scope: dict = {}
    exec(compile(code.replace("print(", "_ = ("), "<fim>", "exec"), scope)  # noqa: S102 (our own test code)
    return middle.strip() and not middle.rstrip().endswith(nxt)


def _sse(srv, path: str, body: dict) -> list[dict]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    events = [json.loads(line[6:]) for line in resp.read().decode().splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    conn.close()
    return events


def test_tabbys_llama_cpp_completion_kind_streams_a_middle_from_its_template(qwen):
    """Tabby's `llama.cpp/completion`: its template in the prompt, a u64
    seed, `penalty_last_n`, streamed; it reads `content` until `stop`."""
    events = _sse(qwen, "/completion", {"seed": 18446744073709551615, "prompt": RAW, "n_predict": 64,
                                        "temperature": 0.0, "stream": True, "penalty_last_n": 0,
                                        "presence_penalty": 0.0})
    assert events[-1]["stop"] is True and all(not e["stop"] for e in events[:-1])
    middle = "".join(e["content"] for e in events)
    assert middle.strip() == "a + b" and _clean(middle)
    assert events[-1]["tokens_evaluated"] < 40  # the markers read as the model's tokens, not as text


def test_tabbys_openai_completion_kind_and_the_openai_package_send_a_suffix(qwen):
    events = _sse(qwen, "/v1/completions", {"model": "m", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64,
                                            "temperature": 0.0, "stream": True, "presence_penalty": 0.0})
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    middle = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert middle.strip() == "a + b" and _clean(middle)
    r = client(qwen).completions.create(model="m", prompt=LOOP_PREFIX, suffix=LOOP_SUFFIX, max_tokens=64,
                                        temperature=0)
    assert _clean(r.choices[0].text, LOOP_PREFIX, LOOP_SUFFIX), r.choices[0].text
    assert r.choices[0].text.endswith("\n")  # the suffix starts a line of its own


def test_a_raw_fim_template_on_v1_completions_and_ollamas_routes(qwen):
    r = client(qwen).completions.create(model="m", prompt=RAW, max_tokens=64, temperature=0)
    assert r.choices[0].text.strip() == "a + b"
    o = ollama.Client(host=qwen.url)
    g = o.generate(model="m", prompt=PREFIX, suffix=SUFFIX, options={"num_predict": 64})
    assert g.response.strip() == "a + b" and g.done
    raw = o.generate(model="m", prompt=RAW, raw=True, options={"temperature": 0, "num_predict": 64})
    assert raw.response.strip() == "a + b"


def test_hostile_values_in_the_fim_fields(qwen):
    status, reply, _ = post_raw(qwen, "/v1/completions", json.dumps({"prompt": "x", "suffix": ["y"]}).encode(),
                                {"Content-Type": "application/json"})
    assert status == 400 and json.loads(reply)["error"]["param"] == "suffix"
    c = client(qwen)
    marked = c.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": RAW}])
    plain = c.chat.completions.create(model="m", max_tokens=2, messages=[
        {"role": "user", "content": f"{PREFIX}{SUFFIX}"}])
    # typed into a chat message, the markers stay text (many tokens each), not three special tokens
    assert marked.usage.prompt_tokens - plain.usage.prompt_tokens > 6
