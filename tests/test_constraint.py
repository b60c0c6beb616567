"""Constraints (core/constraint.py) and the exact rule under them, as pure
logic: llguidance's matcher over a small byte-level tokenizer of our own,
synthetic logits rows, no llama.cpp.  The real models' structured output
is tested in test_structured.py."""

from types import SimpleNamespace

import numpy as np
import pytest

from spec_cli.core.config import Decoding, SamplingConfig
from spec_cli.core.constraint import (MAX_DEPTH, MAX_TEXT, ConstraintError, Spec, compile_spec)
from spec_cli.core.sampling import probs
from spec_cli.run.drafting import legal_draft
from spec_cli.run.rows import rows_rule as _masked_rule
from spec_cli.run.proposers.base import Proposal

from stat_helpers import chi2_fits, first_two_tokens


class Toy:
    """Every byte a token, a few JSON words, and an end-of-text token;
    tokenized by longest match."""

    WORDS = [b'{"', b'": ', b'", "', b'"}', b'name', b'age', b'true', b'false', b'null']

    def __init__(self, specials=()):
        self.tokens = [bytes([i]) for i in range(256)] + self.WORDS + [b"\xff" + t for t in specials]
        self.tokens.append(b"\xff<eos>")
        self.eos_token_id, self.bos_token_id = len(self.tokens) - 1, None
        self.special_token_ids = list(range(256 + len(self.WORDS), len(self.tokens)))
        self._ids = {t: i for i, t in enumerate(self.tokens[:-1])}

    def __call__(self, s):
        s = s.encode() if isinstance(s, str) else s
        out, i = [], 0
        while i < len(s):
            n = next(n for n in range(min(6, len(s) - i), 0, -1) if s[i:i + n] in self._ids)
            out.append(self._ids[s[i:i + n]])
            i += n
        return out


TOY = Toy()
V = len(TOY.tokens)
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tokenizer():
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(TOY))


def grammar(tokenizer, spec):
    return compile_spec(spec, tokenizer, V)


# -- what is refused, and how --------------------------------------------------

@pytest.mark.parametrize("make, says", [
    (lambda: Spec.json_schema("{" * 10), "not valid JSON"),
    (lambda: Spec.json_schema("[1, 2]"), "must be an object"),
    (lambda: Spec.json_schema('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)), "nested more than"),
    (lambda: Spec.json_schema({"enum": list(range(200_000))}), "bytes"),
    (lambda: Spec("json_schema", '{"enum": [' + ",".join(["1"] * 120_000) + "]}"), "values"),
    (lambda: Spec("gbnf", "  "), "empty"),
    (lambda: Spec("yaml", "x"), "unknown constraint kind"),
    (lambda: Spec("regex", "a" * (MAX_TEXT + 1)), "bytes"),
])
def test_a_spec_is_checked_before_anything_compiles(make, says):
    with pytest.raises(ConstraintError, match=says) as e:
        make()
    assert e.value.where  # the field or flag it came from is named


@pytest.mark.parametrize("spec, says", [
    (Spec.json_schema({"type": "string", "minLength": 5, "maxLength": 2}, "response_format"), "minLength"),
    (Spec.json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "response_format"),
     "uniqueItems"),
    (Spec.json_schema({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "response_format"), "oneOf"),
    (Spec("gbnf", "root ::= foo", "grammar"), "foo"),
])
def test_what_the_engine_cannot_do_is_refused_naming_the_feature(tokenizer, spec, says):
    with pytest.raises(ConstraintError, match=says) as e:
        grammar(tokenizer, spec)
    assert e.value.where == spec.where


# -- the constraint's state ------------------------------------------------------

def test_forced_tokens_legal_prefixes_and_masks_follow_the_schema(tokenizer):
    c = grammar(tokenizer, Spec.json_schema(PERSON)).start()
    assert TOY.tokens[c.forced()[0]] == b'{"' and b"".join(TOY.tokens[t] for t in c.forced()) == b'{"name": '
    good, bad = TOY('{"name": "Ada", "age": 36}'), TOY('{"nope": 1}')  # "{\"n" may start "name"
    assert c.legal(good) == len(good) and c.legal(bad) == 2 and c.legal([]) == 0
    c.advance(TOY('{"name": "A'))
    assert c.forced() == []                      # a string's next character is a choice
    mask = c.mask()
    assert c.allows(mask, TOY('d')[0]) and c.allows(mask, TOY('"')[0]) and not c.allows(mask, TOY.eos_token_id)
    c.advance(TOY('da"'))
    assert b"".join(TOY.tokens[t] for t in c.forced()) == b', "age": '
    c.rollback(1)
    assert c.forced() == []
    c.advance(TOY('", "age": 7}'))
    assert c.done and c.allows(c.mask(), TOY.eos_token_id)


def test_a_masked_row_refuses_exactly_what_the_mask_refuses_and_greedy_skips_the_copy(tokenizer):
    c = grammar(tokenizer, Spec("regex", "[ab]c")).start()
    rng = np.random.default_rng(0)
    for _ in range(20):
        row = rng.normal(size=V).astype(np.float32)
        masked = c.masked(row)
        assert set(np.flatnonzero(np.isfinite(masked))) == {97, 98}
        assert c.choose(row, lambda r: int(np.argmax(r)), greedy=True) == int(np.argmax(masked))
    row = np.full(V, -5.0, dtype=np.float32)
    row[98] = 1.0  # the row's own argmax is legal: no copy needed, the same answer
    assert c.choose(row, lambda r: pytest.fail("masked a row it did not need to"), greedy=True) == 98


# -- the rule under a constraint ---------------------------------------------------

def _rule(tokenizer, spec, sampling, seed, rule="gumbel"):
    c = grammar(tokenizer, spec).start()
    out = SimpleNamespace(produced=0, cfg=SimpleNamespace(margins=False))
    return c, out, _masked_rule(Decoding(sampling, seed, rule, c), out)


def test_a_greedy_draft_is_cut_before_a_refused_token_and_the_state_ends_at_the_output(tokenizer):
    c, out, pick = _rule(tokenizer, Spec("regex", "abc[xy]"), SamplingConfig(), seed=1)
    rows = np.zeros((4, V), dtype=np.float32)
    for i, t in enumerate(b"abz"):
        rows[i, t] = 5.0      # the target would write "abz" unconstrained ...
    rows[2, ord("c")] = 4.0   # ... and "c" is its best legal choice at the third
    draft = TOY("abz")
    kept = legal_draft(pick, draft, Proposal(draft))
    assert kept == TOY("ab")  # "z" would have been a verify row for nothing
    n, token = pick(rows[:len(kept) + 1], kept, Proposal(kept))
    assert (n, token) == (2, ord("c"))
    assert b"".join(TOY.tokens[t] for t in c.forced()) == b""  # "x" or "y": a choice
    assert c.legal(TOY("x")) == 1 and c.legal(TOY("c")) == 0   # it holds "abc"


def _first_two(tokenizer, rows, p, rule, n, seed0, pick_rule=_masked_rule):
    """The first two tokens of n seeded runs under the constraint "[abc][abcd]"
    (stat_helpers.first_two_tokens), each run's constraint afresh."""
    sampling = SamplingConfig(temperature=1.0)
    g = grammar(tokenizer, Spec("regex", "[abc][abcd]"))
    return first_two_tokens(rows, p, n, seed0, lambda i, out: pick_rule(Decoding(sampling, seed0 + i, rule, g.start()),
                                                                        out))


@pytest.fixture(scope="module")
def two_rows():
    """Target rows, a draft distribution that puts half its mass on refused
    tokens and most of the rest on the target's likeliest legal token (so
    that the residual there is far from the masked row), and the target's
    exact masked two-token distribution."""
    rng = np.random.default_rng(7)
    rows = rng.normal(scale=1.5, size=(3, V)).astype(np.float32)
    sets, q = ([97, 98, 99], [97, 98, 99, 100]), []
    p = np.full((2, V), 1e-9)
    for j, legal in enumerate(sets):
        masked = np.full(V, -np.inf, dtype=np.float32)
        masked[legal] = rows[j, legal]
        q.append(probs(masked, SamplingConfig(temperature=1.0)))
        p[j, legal] = 0.1 / len(legal)
        p[j, int(np.argmax(q[j]))] += 0.4
        p[j, [120, 121]] = 0.25
    p /= p.sum(axis=1, keepdims=True)
    expected = {(a, b): q[0][a] * q[1][b] for a in sets[0] for b in sets[1]}
    return rows, p, expected


@pytest.mark.parametrize("rule", ["gumbel", "residual"])
def test_sampled_output_follows_the_masked_target_whatever_was_drafted(tokenizer, two_rows, rule):
    rows, p, expected = two_rows
    n = 1500
    fits, stat, crit = chi2_fits(_first_two(tokenizer, rows, p, rule, n, seed0=100), expected, n)
    assert fits, f"{rule}: chi2 {stat:.1f} > {crit:.1f}"


def _no_residual_at_the_cut(decoding, out):
    """A wrong rule: a sampled draft cut before its refused token, the
    correction drawn from the masked row (not the residual)."""
    pick = _masked_rule(decoding, out)
    pick.legal = lambda draft, prop: decoding.constraint.legal(draft)
    return pick


def test_the_check_catches_a_correction_that_skips_the_residual(tokenizer, two_rows):
    rows, p, expected = two_rows
    n = 1500
    fits, stat, crit = chi2_fits(_first_two(tokenizer, rows, p, "residual", n, seed0=100,
                                            pick_rule=_no_residual_at_the_cut), expected, n)
    assert not fits, f"chi2 {stat:.1f} <= {crit:.1f}: a wrong rule went unnoticed"


def test_forced_tokens_come_first_and_sure_and_a_draft_model_that_would_read_the_prompt_does_not(tokenizer):
    from spec_cli.core.cost import CostModel
    from spec_cli.core.policy import Policy
    from spec_cli.run.proposers.base import Candidate
    from spec_cli.run.proposers.grammar import GRAMMAR, GrammarDrafts

    class Inner:
        name, cost_prior = "hybrid", {"draft": 0.01}

        def candidates(self, context):
            return [Candidate("prompt4", 4), Candidate("draft", 90, setup_s=0.4, pooled=True),
                    Candidate("draft", 90, pooled=True)]

        def acceptance_prior(self, source, n):
            return [0.5] * n

    c = grammar(tokenizer, Spec.json_schema(PERSON)).start()
    g = GrammarDrafts(Inner(), c)
    cands = g.candidates([1, 2, 3])
    assert cands[0].source == GRAMMAR and cands[0].sure and cands[0].limit == len(c.forced())
    assert [(x.source, x.setup_s, x.pooled) for x in cands[1:]] == [("prompt4", 0.0, False), ("draft", 0.0, False)]
    assert g.batched(cands[2]) is None and g.follower is None and g.cost_prior[GRAMMAR] == 0.0
    assert g.draft([1, 2, 3], cands[0], 2).tokens == c.forced()[:2]
    # the policy drafts a sure candidate whole, where a plain step would look better on its costs
    policy = Policy(CostModel.from_timings({1: 0.05, 2: 0.2, 4: 0.4, 8: 0.8, 17: 1.7}, 17), k_max=16)
    assert policy.choose(cands, 16) == (cands[0], len(c.forced()))


def test_a_schema_nested_past_what_json_parses_says_so():
    with pytest.raises(ConstraintError, match="nested more than"):
        Spec.json_schema('{"type":"array","items":' * 5000 + "{}" + "}" * 5000)
