"""Logit bias, penalties and logprobs (core/adjust.py), the rule over
adjusted rows (run/rows.py) and the request fields that set them
(serve/fields.py), as pure logic: synthetic rows, no llama.cpp.  The real
server's side is test_fields.py."""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from spec_cli.core.adjust import Adjust, logprob_of
from spec_cli.core.config import Decoding, SamplingConfig
from spec_cli.core.sampling import probs
from spec_cli.run.drafting import legal_draft
from spec_cli.run.proposers.base import Proposal
from spec_cli.run.rows import rows_rule
from spec_cli.serve import fields
from spec_cli.serve.api import parse_chat, parse_completion, parse_infill
from helpers import CHAT, api_error as _err

from stat_helpers import chi2_fits, first_two_tokens

V = 12


def _llama_penalties(x, history, a: Adjust):
    """llama.cpp's logit-bias then penalties samplers, one token at a time
    (src/llama-sampler.cpp), as the reference."""
    out = [float(np.float32(v)) for v in x]
    for t, b in a.bias:
        out[t] = float(np.float32(out[t] + b))
    window = history if a.last_n < 0 else history[-a.last_n:] if a.last_n else []
    for t, count in Counter(window).items():
        v = np.float32(out[t])
        v = v * np.float32(a.repeat) if v <= 0 else v / np.float32(a.repeat)
        out[t] = float(v - (np.float32(count) * np.float32(a.frequency) + np.float32(a.presence)))
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("a", [Adjust(repeat=1.3), Adjust(frequency=0.5, presence=0.25, last_n=3),
                               Adjust(bias=((2, 5.0), (7, float("-inf")))),
                               Adjust(repeat=1.1, frequency=-0.4, last_n=-1, bias=((0, -2.5),))])
def test_the_adjustment_is_llama_cpps_bit_for_bit(a):
    rng = np.random.default_rng(3)
    x = rng.normal(scale=3, size=V).astype(np.float32)
    history = [1, 2, 2, 5, 1, 9, 2, 0]
    got = a.row(x, history)
    assert np.array_equal(got, _llama_penalties(x, history, a))
    assert got is not x and np.array_equal(x, x.copy())  # the row itself is left as it came


def test_an_adjustment_that_changes_nothing_is_off():
    assert not Adjust().active and not Adjust(repeat=1.5, last_n=0).active
    assert Adjust(presence=0.1).active and Adjust(bias=((1, 0.5),)).active
    with pytest.raises(ValueError):
        Adjust(repeat=0.0)


def test_logprobs_are_the_raw_rows_log_softmax_with_the_top_first():
    x = np.array([1.0, 3.0, 2.0, 3.0, -1.0], dtype=np.float32)
    lp = logprob_of(x, 2, 3)
    ref = x.astype(np.float64) - np.log(np.exp(x.astype(np.float64)).sum())
    assert lp.token == 2 and lp.logprob == pytest.approx(ref[2], abs=1e-12)
    assert [t for t, _ in lp.top] == [1, 3, 2]          # ties by id
    assert [v for _, v in lp.top] == pytest.approx([ref[1], ref[3], ref[2]], abs=1e-12)
    assert logprob_of(x, 0, 0).top == ()


# -- the rule under a penalty: row i sees the drafted tokens before it ------------

PENALTY = Adjust(repeat=3.0, presence=1.5)
CONTEXT = [4, 5]


def _expected(rows):
    """The target's own two-token distribution under PENALTY: the second
    row's penalty counts the first token."""
    s = SamplingConfig(temperature=1.0)
    q0 = probs(PENALTY.row(rows[0], CONTEXT), s)
    out = {}
    for a in range(V):
        q1 = probs(PENALTY.row(rows[1], CONTEXT + [a]), s)
        for b in range(V):
            out[(a, b)] = q0[a] * q1[b]
    return out


def _runs(rows, p, rule, n):
    """Seeded runs of the rule under PENALTY, each row penalised after the
    context and the tokens before it."""
    s = SamplingConfig(temperature=1.0)
    return first_two_tokens(rows, p, n, 11, lambda i, out: rows_rule(
        Decoding(s, 500 + i, rule, None, PENALTY), out, lambda: CONTEXT + out.emitted))


@pytest.fixture(scope="module")
def rows_and_draft():
    rng = np.random.default_rng(5)
    rows = rng.normal(scale=1.0, size=(3, V)).astype(np.float32)
    rows[:, 4] += 2.0   # the context's token is the likeliest: the penalty matters
    rows[1, 1] += 1.5
    p = np.full((2, V), 0.02)
    p[:, 4] += 0.4      # the draft ignores the penalty: it proposes what the target now avoids
    p[0, 1] += 0.3
    p[1, 1] += 0.3
    return rows, p / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rule", ["gumbel", "residual"])
def test_sampled_output_follows_the_penalised_target_whatever_was_drafted(rows_and_draft, rule):
    rows, p = rows_and_draft
    n = 1500
    fits, stat, crit = chi2_fits(_runs(rows, p, rule, n), _expected(rows), n)
    assert fits, f"{rule}: chi2 {stat:.1f} > {crit:.1f}"


def test_the_check_catches_a_penalty_blind_to_the_draft(rows_and_draft):
    """A wrong rule: every row penalised by the context alone, the drafted
    token before it not counted."""
    rows, p = rows_and_draft
    n = 1500
    s = SamplingConfig(temperature=1.0)
    adjusted = np.stack([PENALTY.row(r, CONTEXT) for r in rows])
    counts = first_two_tokens(adjusted, p, n, 11, lambda i, out: rows_rule(Decoding(s, 500 + i, "gumbel"), out))
    fits, stat, crit = chi2_fits(counts, _expected(rows), n)
    assert not fits, f"chi2 {stat:.1f} <= {crit:.1f}: a wrong rule went unnoticed"


def test_the_rule_reads_logprobs_of_the_tokens_it_emits_from_the_raw_rows():
    rows = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 5.0]], dtype=np.float32)
    out = SimpleNamespace(produced=0, cfg=SimpleNamespace(margins=False, logprobs=1))
    pick = rows_rule(Decoding(SamplingConfig(), 1, "gumbel", None, Adjust(bias=((0, -10.0),))), out, lambda: [1])
    n, token = pick(rows, [1, 0], Proposal([1, 0]))
    assert (n, token) == (1, 2)  # row 1's argmax (0) is biased away: the draft's second token is rejected
    assert [lp.token for lp in pick.logprobs] == [1, 2]
    assert pick.logprobs[1].logprob == pytest.approx(logprob_of(rows[1], 2, 0).logprob)
    assert pick.logprobs[1].top[0][0] == 0  # the raw row's own top, before the bias


# -- the request fields -----------------------------------------------------------



def test_logprobs_fields_of_each_endpoint():
    assert parse_chat({**CHAT, "logprobs": True, "top_logprobs": 3}).logprobs == 3
    assert parse_chat({**CHAT, "logprobs": True}).logprobs == 0
    assert parse_chat(CHAT).logprobs is None
    assert parse_completion({"prompt": "x", "logprobs": 2}).logprobs == 2
    assert parse_infill({"input_prefix": "x", "n_probs": 4}).logprobs == 4
    assert _err(parse_chat, {**CHAT, "top_logprobs": 2}).param == "top_logprobs"
    assert _err(parse_chat, {**CHAT, "logprobs": True, "top_logprobs": 21}).param == "top_logprobs"
    assert _err(parse_completion, {"prompt": "x", "n_probs": 1, "post_sampling_probs": True}).param == \
        "post_sampling_probs"


def test_bias_and_penalties_in_openais_and_llama_servers_forms():
    r = parse_chat({**CHAT, "logit_bias": {"5": -100, "3": 2}, "frequency_penalty": 0.5})
    assert r.adjust == Adjust(bias=((3, 2.0), (5, -100.0)), frequency=0.5)
    r = parse_completion({"prompt": "x", "logit_bias": [[7, False]], "repeat_penalty": 1.1, "repeat_last_n": -1})
    assert r.adjust.bias == ((7, float("-inf")),) and r.adjust.repeat == 1.1 and r.adjust.last_n == -1
    assert parse_chat({**CHAT, "presence_penalty": 0, "repeat_penalty": 1.0}).adjust is None
    for bad, param in (({"logit_bias": {"word": 1}}, "logit_bias"), ({"logit_bias": {"1": 101}}, "logit_bias.1"),
                       ({"frequency_penalty": 2.5}, "frequency_penalty"), ({"repeat_penalty": 0}, "repeat_penalty"),
                       ({"logit_bias": [[1, 2, 3]]}, "logit_bias")):
        assert _err(parse_chat, {**CHAT, **bad}).param == param


def test_what_changes_the_answer_is_refused_and_the_rest_named():
    for body, param in (({"n": 2}, "n"), ({"best_of": 3}, "best_of"), ({"mirostat": 2}, "mirostat"),
                        ({"typical_p": 0.5}, "typical_p"), ({"functions": [{"name": "f"}]}, "functions"),
                        ({"ignore_eos": True}, "ignore_eos"), ({"samplers": ["top_k", "magic"]}, "samplers")):
        assert _err(parse_chat, {**CHAT, **body}).param == param
    assert _err(parse_chat, {**CHAT, "echo": True}).param == "echo"
    assert _err(parse_completion, {"prompt": "x", "echo": True, "stream": True}).param == "echo"
    assert parse_completion({"prompt": [[1, 2]], "echo": True, "max_tokens": 0}).prompt_ids == [1, 2]
    assert _err(parse_completion, {"prompt": "x", "max_tokens": 0}).param == "max_tokens"
    r = parse_chat({**CHAT, "user": "u1", "metadata": {}, "mirostat": 0, "typical_p": 1.0, "zz_unknown": 1,
                    "another": None})
    assert r.ignored == ["another", "zz_unknown"]


def test_samplers_left_out_are_off():
    r = parse_infill({"input_prefix": "x", "samplers": ["top_k", "top_p", "infill"], "temperature": 0.5,
                      "min_p": 0.2, "repeat_penalty": 1.3})
    assert r.sampling.min_p == 0.0 and r.sampling.top_k == 40 and r.adjust is None
    assert parse_infill({"input_prefix": "x", "samplers": "kpe", "repeat_penalty": 1.3}).adjust.repeat == 1.3


def test_speculation_fields():
    assert parse_chat(CHAT).speculation is None
    s = parse_chat({**CHAT, "speculation": {"proposer": "none"}}).speculation
    assert s == fields.Speculation(proposer="none")
    s = parse_completion({"prompt": "x", "speculation": {"draft_max": 8}, "speculative.n_max": 4,
                          "speculative.n_min": 2, "speculative.p_min": 0.5}).speculation
    assert (s.draft_max, s.draft_min, s.p_min) == (4, 2, 0.5)
    assert _err(parse_chat, {**CHAT, "speculation": {"proposer": "none", "k": 2}}).param == "speculation.k"
    assert _err(parse_chat, {**CHAT, "speculation": "off"}).param == "speculation"
    # a 400-digit integer is refused naming its field, nested or not (not a float overflow's 500)
    assert _err(parse_chat, {**CHAT, "speculation": {"draft_max": 10 ** 400}}).param == "speculation.draft_max"
    assert _err(parse_chat, {**CHAT, "logprobs": True, "top_logprobs": 10 ** 400}).param == "top_logprobs"
    assert _err(parse_completion, {"prompt": "x", "n_probs": 10 ** 400}).param == "n_probs"


def test_a_prediction_is_text_or_text_parts():
    assert parse_chat({**CHAT, "prediction": {"type": "content", "content": "abc"}}).prediction == "abc"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert parse_chat({**CHAT, "prediction": {"type": "content", "content": parts}}).prediction == "ab"
    assert _err(parse_chat, {**CHAT, "prediction": {"type": "image"}}).param == "prediction"


def test_a_short_draft_is_dropped_under_n_min():
    out = SimpleNamespace(produced=0, cfg=SimpleNamespace(margins=False, logprobs=None))
    pick = rows_rule(Decoding(SamplingConfig(), 1), out)
    pick.draft_min = 3
    assert legal_draft(pick, [1, 2], Proposal([1, 2])) == []
    assert legal_draft(pick, [1, 2, 3], Proposal([1, 2, 3])) == [1, 2, 3]
