"""Sampled output follows the target's distribution, on real llama.cpp logits,
under both rules (the default Gumbel coupling and the residual rule).

Target: SmolLM2-135M at temperature 0.8, top-k 4.  Draft: a second SmolLM2
at temperature 3 -- a real draft distribution p that differs from the
target's q.  The first two generated tokens of many seeded runs are
compared with the target's exact two-token distribution, computed from the
same model's logits.  The same check must fail when the rule is wrong.
"""

from collections import Counter

import numpy as np
import pytest

import spec_cli.run.engine as engine
from spec_cli.run.engine import GenConfig, generate
from spec_cli.run.proposers import DraftModel
from spec_cli.core.sampling import SamplingConfig, probs

from stat_helpers import chi2_fits

TARGET = SamplingConfig(temperature=0.8, top_k=4)
DRAFT = SamplingConfig(temperature=3.0, top_k=4)
PROMPT = "My favourite colour is"


def exact_two_token_distribution(model, prompt):
    model.reset()
    q1 = probs(model.decode(prompt, logits_from=len(prompt) - 1)[0], TARGET)
    out = {}
    for a in np.nonzero(q1)[0]:
        model.truncate(len(prompt))
        q2 = probs(model.decode([int(a)], logits_from=0)[0], TARGET)
        for b in np.nonzero(q2)[0]:
            out[(int(a), int(b))] = q1[a] * q2[b]
    model.reset()
    return out


def first_two(model, draft_model, prompt, n, seed0, rule="residual"):
    counts = Counter()
    for i in range(n):
        seed = seed0 + i
        prop = DraftModel(draft_model, sampling=DRAFT)  # a draft distribution of its own
        cfg = GenConfig(sampling=TARGET, max_tokens=3, draft_max=2, seed=seed, adaptive=False, rule=rule)
        toks = [t for s in generate(model, prop, prompt, cfg) for t in s.tokens]
        counts[tuple(toks[:2])] += 1
    return counts


@pytest.fixture(scope="module")
def setup(smollm, smollm_draft):
    prompt = smollm.vocab.tokenize(PROMPT)
    expected = exact_two_token_distribution(smollm, prompt)
    # the draft really differs from the target at the first position
    smollm.reset()
    row = smollm.decode(prompt, logits_from=len(prompt) - 1)[0]
    tv = 0.5 * np.abs(probs(row, TARGET) - probs(row, DRAFT)).sum()
    assert tv > 0.1, f"draft and target too alike (TV {tv:.3f}) for a meaningful test"
    smollm.reset()
    return prompt, expected


@pytest.mark.parametrize("rule", ["gumbel", "residual"])
def test_sampled_output_follows_target_on_real_logits(smollm, smollm_draft, setup, rule):
    prompt, expected = setup
    n = 1000
    counts = first_two(smollm, smollm_draft, prompt, n, seed0=1000, rule=rule)
    fits, stat, crit = chi2_fits(counts, expected, n)
    assert fits, f"{rule}: chi2 {stat:.1f} > {crit:.1f}"


def accept_everything(draft, p, q, rng):
    return len(draft), int(rng.choice(q.shape[1], p=q[len(draft)]))


def accept_every_choice(draft, choice):
    return len(draft), int(choice(len(draft)))


@pytest.mark.parametrize("rule", ["gumbel", "residual"])
def test_real_logits_check_catches_accept_everything(smollm, smollm_draft, setup, monkeypatch, rule):
    monkeypatch.setattr(engine, "verify", accept_everything)
    monkeypatch.setattr(engine, "verify_choices", accept_every_choice)
    prompt, expected = setup
    n = 300
    counts = first_two(smollm, smollm_draft, prompt, n, seed0=5000, rule=rule)
    fits, stat, crit = chi2_fits(counts, expected, n)
    assert not fits, f"{rule}: chi2 {stat:.1f} <= {crit:.1f}: a wrong rule went unnoticed"


if __name__ == "__main__":  # print the numbers behind the tests
    from spec_cli.llama.model import LoadConfig, Model
    from spec_cli.models.download import resolve
    path = resolve("smollm2-135m")
    m, d = Model(path, LoadConfig(n_ctx=2048)), Model(path, LoadConfig(n_ctx=2048))
    prompt = m.vocab.tokenize(PROMPT)
    expected = exact_two_token_distribution(m, prompt)
    for rule in ("gumbel", "residual"):
        print(rule, "right rule", chi2_fits(first_two(m, d, prompt, 1000, 1000, rule), expected, 1000))
    engine.verify, engine.verify_choices = accept_everything, accept_every_choice
    for rule in ("gumbel", "residual"):
        print(rule, "accept everything", chi2_fits(first_two(m, d, prompt, 300, 5000, rule), expected, 300))
