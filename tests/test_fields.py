"""What a client sends is honoured or refused, for real: logprobs,
penalties, logit bias, per-request speculation, Predicted Outputs and
llama-server's utility endpoints, on a `spec-cli serve` process (SmolLM2
drafting for itself, --deterministic: a drafted answer is bit for bit the
target alone's, so its logprobs are too), spoken to with raw HTTP and the
real `openai` client.  The pure logic is test_adjust.py."""

import json
import urllib.request

import openai
import pytest

from test_serve import serving

CHAT = [{"role": "user", "content": "Write the word apple five times, then the word pear five times."}]


@pytest.fixture(scope="module")
def server(smollm_path):
    yield from serving(smollm_path, "--parallel", "2", "--fixed-draft")


def _chat(server, **fields):
    status, body, headers = server.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 40,
                                                                 "temperature": 0, **fields})
    assert status == 200, body
    return body


def _text(body):
    return body["choices"][0]["message"]["content"]


ALONE = {"speculation": {"proposer": "none"}}


@pytest.mark.parametrize("penalty", [{"frequency_penalty": 0.5}, {"repeat_penalty": 1.1},
                                     {"presence_penalty": 0.8, "logit_bias": {"17": -5, "30": 3}}])
def test_a_penalty_changes_the_answer_and_keeps_every_promise(server, penalty):
    plain = _chat(server)
    drafted = _chat(server, **penalty)
    alone = _chat(server, **penalty, **ALONE)
    assert alone["speculation"]["proposer"] == "none" and alone["speculation"]["drafted"] == 0
    assert _text(drafted) == _text(alone)                          # greedy: the target's, whatever drafted
    assert _text(drafted) != _text(plain), "the penalty changed nothing: is it applied?"
    seeded = dict(temperature=0.9, seed=7, **penalty)
    assert _text(_chat(server, **seeded)) == _text(_chat(server, **seeded, **ALONE))  # one seed, one text


def test_logprobs_are_the_targets_whether_drafted_or_alone(server):
    alone = _chat(server, logprobs=True, top_logprobs=3, **ALONE)
    # the answer predicted: drafts the cost model takes on any machine, busy or quiet
    drafted = _chat(server, logprobs=True, top_logprobs=3, speculation={"proposer": "ngram"},
                    prediction={"type": "content", "content": _text(alone)})
    assert drafted["speculation"]["accepted"] > 0, "nothing was drafted: the test shows nothing"
    a, b = drafted["choices"][0]["logprobs"]["content"], alone["choices"][0]["logprobs"]["content"]
    ended = drafted["choices"][0]["finish_reason"] == "stop"  # on an end token: counted in usage, not text
    assert [x["token"] for x in a] == [x["token"] for x in b] and len(a) + ended == drafted["usage"]["completion_tokens"]
    assert max(abs(x["logprob"] - y["logprob"]) for x, y in zip(a, b)) == 0.0
    assert all(len(x["top_logprobs"]) == 3 and x["top_logprobs"][0]["logprob"] >= x["logprob"] for x in a)
    assert "".join(bytes(x["bytes"]).decode() for x in a) == _text(drafted)


def test_streamed_logprobs_are_the_answers(server):
    whole = _chat(server, logprobs=True)["choices"][0]["logprobs"]["content"]
    req = urllib.request.Request(server.url + "/v1/chat/completions", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps({"messages": CHAT, "max_tokens": 40, "temperature": 0,
                                                               "stream": True, "logprobs": True}).encode())
    streamed = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: {"):
                lp = json.loads(line[6:])["choices"][0].get("logprobs")
                streamed += lp["content"] if lp else []
    assert streamed == whole


def test_the_openai_client_gets_logprobs_and_prediction_usage(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    first = client.chat.completions.create(model="m", messages=CHAT, max_tokens=40, temperature=0)
    expected = first.choices[0].message.content
    r = client.chat.completions.create(model="m", messages=CHAT, max_tokens=40, temperature=0, logprobs=True,
                                       top_logprobs=2, prediction={"type": "content", "content": expected},
                                       extra_body={"speculation": {"proposer": "ngram"}})
    assert r.choices[0].message.content == expected
    assert r.choices[0].logprobs.content[0].top_logprobs[0].logprob <= 0
    details = r.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0, r.model_extra["speculation"]
    assert r.model_extra["speculation"]["by_source"]["prediction"]["accepted"] == details.accepted_prediction_tokens


def test_what_would_change_the_answer_is_refused_naming_it(server):
    for fields, param in (({"n": 2}, "n"), ({"mirostat": 2}, "mirostat"), ({"logit_bias": {"99999999": 1}},
                          "logit_bias"), ({"speculation": {"proposer": "mtp"}}, "speculation.proposer"),
                          ({"speculation": {"proposer": "magic"}}, "speculation.proposer")):
        status, body, _ = server.post("/v1/chat/completions", {"messages": CHAT, **fields})
        assert status == 400 and body["error"]["param"] == param, body
    status, body, headers = server.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2,
                                                                 "user": "u", "made_up": 1, "other_thing": {}})
    assert status == 200 and headers["spec-cli-ignored-fields"] == "made_up, other_thing"


def test_llama_servers_utility_endpoints(server):
    status, body, _ = server.post("/tokenize", {"content": "apple pie", "with_pieces": True})
    assert status == 200 and "".join(p["piece"] for p in body["tokens"]) == "apple pie"
    ids = [p["id"] for p in body["tokens"]]
    assert server.post("/tokenize", {"content": "apple pie"})[1] == {"tokens": ids, "count": len(ids)}
    assert server.post("/detokenize", {"tokens": ids})[1] == {"content": "apple pie", "prompt": "apple pie"}
    # vLLM's names, as lm-evaluation-harness's remote tokenizer sends them
    assert server.post("/tokenize", {"prompt": "apple pie", "add_special_tokens": False})[1]["tokens"] == ids
    assert server.get("/tokenizer_info")[1]["eos_token"]
    status, body, _ = server.post("/detokenize", {"tokens": [1, -4]})
    assert status == 400 and body["error"]["param"] == "tokens[1]"
    status, body, _ = server.post("/apply-template", {"messages": CHAT})
    n = len(server.post("/tokenize", {"content": body["prompt"], "add_special": True})[1]["tokens"])
    assert n == _chat(server, max_tokens=1)["usage"]["prompt_tokens"]
    status, props, _ = server.get("/props")
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 2048
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert "llamacpp:tokens_predicted_total " in text and "spec_cli_tokens_generated_total " in text


def test_an_echoed_prompt_is_scored_as_lm_evaluation_harness_asks(server):
    """Its loglikelihood request: the prompt as token ids, echo, logprobs 1,
    one token; each prompt token's logprob is the one a generation would
    give it there."""
    ids = server.post("/tokenize", {"prompt": "The capital of France is Paris"})[1]["tokens"]
    status, body, _ = server.post("/v1/completions", {"prompt": [ids], "max_tokens": 1, "echo": True,
                                                      "logprobs": 1, "temperature": 0, "seed": 1234})
    lp = body["choices"][0]["logprobs"]
    assert status == 200 and len(lp["token_logprobs"]) == len(ids) + 1 and lp["token_logprobs"][0] is None
    assert body["choices"][0]["text"].startswith("The capital of France is Paris")
    head = server.post("/v1/completions", {"prompt": [ids[:-1]], "max_tokens": 1, "logprobs": 1,
                                           "temperature": 0})[1]["choices"][0]["logprobs"]
    if head["tokens"][0] == " Paris":  # the model's own next token there: the same logprob
        assert head["token_logprobs"][0] == lp["token_logprobs"][len(ids) - 1]
    assert all(p is None or p <= 0 for p in lp["token_logprobs"])
    status, body, _ = server.post("/v1/completions", {"prompt": "x", "max_tokens": 0, "echo": True, "logprobs": 0})
    assert status == 200 and body["choices"][0]["text"] == "x" and body["usage"]["completion_tokens"] == 0
    assert server.post("/v1/completions", {"prompt": [[10**9]]})[0] == 400


def test_the_native_completion_endpoint(server):
    body = {"prompt": "The capital of France is", "n_predict": 6, "temperature": 0, "n_probs": 2}
    status, full, _ = server.post("/completion", body)
    assert status == 200 and full["stop"] is True and full["tokens_predicted"] == 6
    probs = full["completion_probabilities"]
    assert len(probs) == 6 and "".join(p["token"] for p in probs) == full["content"]
    assert all(len(p["top_logprobs"]) == 2 and "id" in p for p in probs)
    req = urllib.request.Request(server.url + "/completion", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps({**body, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=120) as r:
        chunks = [json.loads(line[6:]) for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert "".join(c["content"] for c in chunks) == full["content"] and chunks[-1]["stop"] is True
    assert [p for c in chunks for p in c.get("completion_probabilities", [])] == probs


def test_usage_counts_the_end_token_a_reply_ended_on_and_never_more_than_max_tokens(server):
    """As llama-server counts: the end-of-generation token the target chose
    is generated (a step's work), not text; where max_tokens comes first,
    the reply ends there ("length") and no end token is counted."""
    short = [{"role": "user", "content": "Say just the word yes."}]
    status, body, _ = server.post("/v1/chat/completions", {"messages": short, "max_tokens": 40, "temperature": 0,
                                                           "logprobs": True})
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop", body
    n_text = len(body["choices"][0]["logprobs"]["content"])
    assert body["usage"]["completion_tokens"] == n_text + 1 == body["timings"]["predicted_n"]
    spec, timings = body["speculation"], body["timings"]  # one speed, whichever field a client reads
    assert spec["tokens_per_s"] == pytest.approx(timings["predicted_per_second"], rel=0.01)
    status, cut, _ = server.post("/v1/chat/completions", {"messages": short, "max_tokens": n_text, "temperature": 0})
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == n_text, cut
    assert cut["choices"][0]["message"]["content"] == body["choices"][0]["message"]["content"]
