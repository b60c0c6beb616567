"""The real Qwen2.5-Coder 1.5B target with its 0.5B draft: greedy output of
every proposer is token-for-token the target alone's."""

import numpy as np
import pytest

from spec_cli.engine import GenConfig, generate
from spec_cli.proposers import DraftModel, Hybrid, NGram, NoDraft
from spec_cli.sampling import SamplingConfig

from conftest import bench_prompts

pytestmark = pytest.mark.pair
MAX_TOKENS = 40


def tokens_for(model, item):
    if item["kind"] == "chat":
        return model.tokenize_chat(model.apply_chat_template([{"role": "user", "content": item["prompt"]}]))
    return model.tokenize(item["prompt"])


def check_identical(target, draft, items):
    """Every proposer drafting every step (no cost model), and the default
    hybrid with its cost model, against the target alone."""
    fixed = GenConfig(max_tokens=MAX_TOKENS, draft_max=6, adaptive=False)
    adaptive = GenConfig(max_tokens=MAX_TOKENS, draft_max=6)
    accepted = drafted = 0
    for item in items:
        prompt = tokens_for(target, item)
        base = [t for s in generate(target, NoDraft(), prompt, fixed) for t in s.tokens]
        assert len(base) > 0
        greedy = SamplingConfig()
        runs = [(DraftModel(draft, greedy, np.random.default_rng(0)), fixed), (NGram(), fixed),
                (Hybrid(NGram(), DraftModel(draft, greedy, np.random.default_rng(0))), adaptive)]
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


def test_pair_vocabularies_match(target, draft):
    assert target.vocab_difference(draft) is None
