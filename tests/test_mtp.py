"""Drafting with the target's own multi-token-prediction (NextN) block
(`--proposer mtp`), on a tiny hybrid Qwen3.5 GGUF the tests write
(made_models.make_qwen35_mtp): gated-delta-net and attention layers, and an
MTP block made to agree with the trunk most of the time, so that a block
fed the right token beside the right hidden state is accepted often, and
the rejections between make the recurrent state roll back.  Random weights
say nothing of real acceptance: the figures here test the plumbing."""

import json

import pytest

from spec_cli.core.sampling import SamplingConfig
from spec_cli.run.proposers import Hybrid, NoDraft, mtp_drafter
from spec_cli.run.suffix import Lookup
from test_cli import assert_clean_error, spec
from test_engine import run

pytest.importorskip("gguf", reason="the gguf package writes the made models (pip install gguf)")

PROMPTS = ["one two three one two three one two", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"]


@pytest.fixture(scope="module")
def mtp_path(smollm_path):
    import made_models
    return made_models.make_qwen35_mtp(smollm_path)


@pytest.fixture(scope="module", params=[False, True], ids=["default", "deterministic"])
def mtp_model(request, mtp_path):
    from spec_cli.llama.model import LoadConfig, Model
    with Model(mtp_path, LoadConfig(n_ctx=512, mtp=True, deterministic=request.param)) as m:
        yield m


@pytest.mark.parametrize("sampling,seed", [(SamplingConfig(), None),
                                           (SamplingConfig(temperature=0.9, top_k=40, top_p=0.95), 7)])
def test_mtp_drafts_keep_the_target_alones_text(mtp_model, sampling, seed):
    target = mtp_model
    assert target.recurrent and target.mtp_layers == 1
    rollbacks, drafted, accepted = target.rollbacks + target.replays, 0, 0
    for text in PROMPTS:
        prompt = target.vocab.tokenize(text)
        alone, _, _ = run(target, NoDraft(), prompt, max_tokens=40, sampling=sampling, seed=seed)
        for proposer in (mtp_drafter(target), Hybrid(Lookup(), mtp_drafter(target))):
            target.reset()
            got, _, steps = run(target, proposer, prompt, max_tokens=40, draft_max=4, sampling=sampling,
                                seed=seed)
            assert got == alone, (text, type(proposer).__name__)
            if proposer.name == "mtp":
                drafted += sum(s.drafted for s in steps)
                accepted += sum(s.accepted for s in steps)
    if target.deterministic and target.verify_cap == 1:
        # no batch of this model's is bitwise one-token decodes here (its
        # delta-net layers read a batch in chunks): --deterministic drafts nothing
        assert drafted == 0
        return
    # the block read the right token beside the right state: off by one
    # position it would almost never be accepted; and some drafts were
    # rejected, so the recurrent state was rolled back
    assert drafted and 0.3 < accepted / drafted < 1.0, (accepted, drafted)
    assert target.rollbacks + target.replays > rollbacks


def test_mtp_head_follows_the_context_by_prefix(mtp_model):
    """After a draft the block's cache holds only what read the target's
    states, and a context that parts from it is read again from there."""
    target = mtp_model
    prompt = target.vocab.tokenize(PROMPTS[0])
    target.reset()
    proposer = mtp_drafter(target)
    got, _, _ = run(target, proposer, prompt, max_tokens=12, draft_max=3)
    context = prompt + got
    head = target.mtp_head()
    assert len(head.tokens) <= len(target.tokens) + 1
    assert head.tokens == context[:len(head.tokens)]
    # another continuation of the prompt: the block is cut back to the prompt
    target.reset()
    other = prompt + [got[0] + 1]
    target.catch_up(other[:-1])
    proposer.prepare(prompt)
    cand = proposer.candidates(other)[0]
    proposer.draft(other, cand, 2)
    assert head.tokens == other


def test_mtp_from_the_command_line(mtp_path, smollm_path):
    path = str(mtp_path)
    outs = {}
    for proposer in ("none", "mtp", "hybrid"):  # hybrid: this file has MTP layers and no --draft is given
        res = spec("generate", "--raw", "--temp", "0", "-n", "24", "--json", "--target", path,
                   "--proposer", proposer, "--fixed-draft", "--draft-max", "3", PROMPTS[0])
        assert res.returncode == 0, res.stderr
        outs[proposer] = json.loads(res.stdout.strip().splitlines()[-1])
    assert outs["none"]["tokens"] == outs["mtp"]["tokens"] == outs["hybrid"]["tokens"]
    assert outs["mtp"]["stats"]["by_source"]["mtp"]["accepted"] > 0
    assert "mtp" in outs["hybrid"]["stats"]["by_source"]
    info = json.loads(spec("models", "info", "--json", path).stdout)
    assert info["mtp_layers"] == 1
    # a file without such layers: one clear line
    res = spec("generate", "--raw", "-n", "4", "--target", str(smollm_path), "--proposer", "mtp", "hi")
    assert_clean_error(res, "no multi-token-prediction")
