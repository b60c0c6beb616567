"""The real Qwen2.5-Coder 1.5B target with its 0.5B draft.  With
--deterministic (the `target` fixture), the output of every proposer is
token-for-token the target alone's, greedy and seeded; with the default
numerics (`target_fast`) every divergence is at a near-tie."""

import pytest

from spec_cli.run.engine import GenConfig, generate
from spec_cli.run.proposers import DraftModel, Hybrid, NoDraft
from spec_cli.run.suffix import Lookup
from spec_cli.core.sampling import SamplingConfig

from conftest import bench_prompts

pytestmark = pytest.mark.pair
MAX_TOKENS = 40


def tokens_for(model, item):
    if item["kind"] == "chat":
        return model.vocab.tokenize_chat([{"role": "user", "content": item["prompt"]}])
    return model.vocab.tokenize(item["prompt"])


def check_identical(target, draft, items, sampling=SamplingConfig(), seed=0):
    """Every proposer drafting every step (no cost model), and the default
    hybrid with its cost model, against the target alone."""
    fixed = GenConfig(max_tokens=MAX_TOKENS, draft_max=6, adaptive=False, sampling=sampling, seed=seed)
    adaptive = GenConfig(max_tokens=MAX_TOKENS, sampling=sampling, seed=seed)
    accepted = drafted = 0
    for item in items:
        prompt = tokens_for(target, item)
        base = [t for s in generate(target, NoDraft(), prompt, fixed) for t in s.tokens]
        assert len(base) > 0

        def model():
            return DraftModel(draft)

        runs = [(model(), fixed), (Lookup(), fixed), (Hybrid(Lookup(), model()), adaptive)]
        for prop, cfg in runs:
            steps = list(generate(target, prop, prompt, cfg))
            out = [t for s in steps for t in s.tokens]
            assert out == base, f"{item['id']}: {prop.name} differs from the target alone"
            if prop.name == "draft":
                accepted += sum(s.accepted for s in steps)
                drafted += sum(s.drafted for s in steps)
    return accepted, drafted


def test_identical_on_bench_prompts(target, draft):
    items = (bench_prompts("code-edit.jsonl", 3) + bench_prompts("humaneval-completion.jsonl", 3)
             + bench_prompts("mt-bench.jsonl", 2) + bench_prompts("summarization.jsonl", 2))
    assert len(items) >= 10  # summarization prompts put 600+ tokens in the KV cache
    accepted, drafted = check_identical(target, draft, items)
    assert drafted > 0 and accepted / drafted > 0.3  # a real pair: the draft mostly agrees


def test_identical_on_own_prompts(target, draft, own_prompts):
    check_identical(target, draft, own_prompts)


def test_identical_when_sampling_with_a_seed(target, draft, own_prompts):
    check_identical(target, draft, own_prompts[:3], sampling=SamplingConfig(temperature=0.8, top_p=0.95), seed=7)


def test_default_numerics_part_only_at_near_ties(target_fast, draft, own_prompts):
    from spec_cli.run.bench import DELTA_MAX, NEAR_TIE
    from test_numerics import CODE, batch_vs_single, check_divergences_are_near_ties

    worst, gap = batch_vs_single(target_fast, CODE)
    assert worst <= DELTA_MAX and gap <= NEAR_TIE
    items = bench_prompts("code-edit.jsonl", 2) + bench_prompts("mt-bench.jsonl", 2) + own_prompts[:2]
    check_divergences_are_near_ties(target_fast, draft, [tokens_for(target_fast, i) for i in items])


def test_pair_vocabularies_match(target, draft):
    assert target.vocab.difference(draft.vocab) is None
