"""The two numerics modes, on real models.

Default: llama.cpp's fast kernels.  A batch row's logits differ from the
same token decoded alone by at most bench.DELTA_MAX, and the gap between
the top token and its rivals moves by at most bench.NEAR_TIE, so a
divergence from the target alone can only happen where the top two tokens
are within NEAR_TIE of each other.  Both facts are measured here.

--deterministic: output bit-for-bit the target alone's, for every proposer,
greedy and seeded (tests/test_pair.py runs the same on the Qwen pair).
"""

from pathlib import Path

import numpy as np
import pytest

from spec_cli.run.bench import DELTA_MAX, NEAR_TIE, Run, divergence
from spec_cli.run.engine import GenConfig, generate
from spec_cli.run.proposers import DraftModel, Hybrid, NoDraft
from spec_cli.run.suffix import Lookup
from spec_cli.core.sampling import SamplingConfig

HOT = SamplingConfig(temperature=0.8, top_p=0.95)


def batch_vs_single(model, text: str, sizes=(2, 4, 8, 17), prefixes=(2, 300)) -> tuple[float, float]:
    """(the largest |logit in a batch row - the same token decoded alone|,
    the largest change of the gap between the top token and any token within
    2 * DELTA_MAX of it)."""
    stream = model.vocab.tokenize(text, add_special=False)
    worst = gap = 0.0
    for prefix in prefixes:
        model.reset()
        model.decode(stream[:prefix])
        singles = np.stack([model.decode([t], logits_from=0)[0] for t in stream[prefix:prefix + max(sizes)]])
        for n in sizes:
            model.truncate(prefix)
            delta = model.decode(stream[prefix:prefix + n], logits_from=0) - singles[:n]
            worst = max(worst, float(np.abs(delta).max()))
            for row, d in zip(singles, delta):
                top = int(np.argmax(row))
                rivals = row >= row[top] - 2 * DELTA_MAX
                gap = max(gap, float(np.abs(d[rivals] - d[top]).max()))
    model.reset()
    return worst, gap


def run(model, proposer, prompt, **kw):
    return [t for s in generate(model, proposer, prompt, GenConfig(**kw)) for t in s.tokens]


def run_with_margins(model, prompt, **kw):
    steps = list(generate(model, NoDraft(), prompt, GenConfig(margins=True, adaptive=False, **kw)))
    return Run([t for s in steps for t in s.tokens], margins=[m for s in steps for m in s.margins])


CODE = (Path(__file__).resolve().parent / "data" / "numerics.txt").read_text()  # a fixed text, ~3000 tokens


def test_default_batch_rows_stay_within_the_stated_bounds(smollm_fast):
    worst, gap = batch_vs_single(smollm_fast, CODE)
    assert worst <= DELTA_MAX and gap <= NEAR_TIE


def test_deterministic_batch_rows_are_bitwise_single_rows(smollm):
    from spec_cli.llama.probe import ensure
    ensure(smollm)
    assert smollm.verify_cap >= 2
    assert batch_vs_single(smollm, CODE, sizes=tuple(range(2, smollm.verify_cap + 1))) == (0.0, 0.0)


def check_divergences_are_near_ties(target, draft_model, items, sampling=SamplingConfig(), n=40):
    """Every proposer drafting every step against the target alone, default
    numerics: where the text parts, the baseline's margin is a near-tie."""
    parted = []
    for prompt in items:
        base = run_with_margins(target, prompt, max_tokens=n, sampling=sampling, seed=3)
        for prop in (Lookup(), DraftModel(draft_model)):
            out = run(target, prop, prompt, max_tokens=n, draft_max=8, adaptive=False, sampling=sampling, seed=3)
            m = divergence(base, Run(out))
            if m is not None:
                parted.append(m)
                assert m <= NEAR_TIE, f"{prop.name} parted from the target alone at margin {m:.3f}"
    return parted


def test_default_mode_divergences_are_near_ties(smollm_fast, smollm_draft, own_prompts):
    prompts = [smollm_fast.vocab.tokenize(item["prompt"]) for item in own_prompts]
    check_divergences_are_near_ties(smollm_fast, smollm_draft, prompts)
    check_divergences_are_near_ties(smollm_fast, smollm_draft, prompts[:3], sampling=HOT)


@pytest.mark.parametrize("sampling", [SamplingConfig(), HOT], ids=["greedy", "temp0.8"])
def test_deterministic_identity_for_every_proposer(smollm, smollm_draft, own_prompts, sampling):
    for item in own_prompts[:4]:
        prompt = smollm.vocab.tokenize(item["prompt"])
        base = run(smollm, NoDraft(), prompt, max_tokens=40, sampling=sampling, seed=11)

        def draft():
            return DraftModel(smollm_draft)

        for prop, adaptive in ((Lookup(), False), (draft(), False), (Hybrid(Lookup(), draft()), True)):
            out = run(smollm, prop, prompt, max_tokens=40, draft_max=6, adaptive=adaptive,
                      sampling=sampling, seed=11)
            assert out == base, (item["id"], prop.name)


def test_same_seed_same_text_however_the_cost_model_decides(smollm, smollm_draft):
    """Drafting every step, never, or as the cost model likes: one seed, one text."""
    prompt = smollm.vocab.tokenize("Name three uses of a hash map.")
    texts = []
    for prop, kw in ((NoDraft(), {}),
                     (DraftModel(smollm_draft), {"adaptive": False}),
                     (DraftModel(smollm_draft), {"draft_max": 3}),
                     (Lookup(), {"adaptive": False})):
        texts.append(run(smollm, prop, prompt, max_tokens=40, sampling=HOT, seed=7, **kw))
    assert all(t == texts[0] for t in texts)
    assert run(smollm, NoDraft(), prompt, max_tokens=40, sampling=HOT, seed=8) != texts[0]
