"""Drafting on recurrent and hybrid targets (tiny random-weight Mamba,
Jamba and LFM2 models the tests write, made_models.py): a rewind cannot
cut a recurrent state, so llama.cpp rolls it back to a snapshot (LFM2),
or the model goes back to its checkpoint and reads the accepted tokens
again (Mamba, Jamba); a hybrid's attention KV is cut as usual.  The text
must be the target alone's, greedy and seeded, whatever drafted: a second
model of the kind (other weights: rejected at every step, so every step
rewinds), the model itself, the lookup."""

import json

import pytest

from spec_cli.core.sampling import SamplingConfig
from spec_cli.run.proposers import DraftModel, NoDraft
from spec_cli.run.suffix import Lookup
from test_engine import run
from test_cli import spec

pytest.importorskip("gguf", reason="the gguf package writes the made models (pip install gguf)")

PROMPTS = ["one two three one two three one two", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
           "The quick brown fox jumps over the lazy dog. The quick brown"]


@pytest.fixture(scope="module", params=["mamba", "jamba", "lfm2"])
def made_paths(request, smollm_path):
    import made_models
    make = getattr(made_models, f"make_{request.param}")
    return make(smollm_path, seed=0), make(smollm_path, seed=1)


@pytest.fixture(scope="module")
def models(made_paths):
    from spec_cli.llama.model import LoadConfig, Model
    models = [Model(p, LoadConfig(n_ctx=512)) for p in (made_paths[0], made_paths[0], made_paths[1])]
    yield models  # target, the same file as a draft, another one as a draft
    for m in models:
        m.close()


@pytest.mark.parametrize("sampling,seed", [(SamplingConfig(), None),
                                           (SamplingConfig(temperature=0.9, top_k=40, top_p=0.95), 7)])
def test_drafting_on_a_recurrent_target_keeps_its_text(models, sampling, seed):
    target, same, other = models
    assert target.recurrent
    replays, rollbacks = target.replays, target.rollbacks
    for text in PROMPTS:
        prompt = target.vocab.tokenize(text)
        alone, _, _ = run(target, NoDraft(), prompt, max_tokens=40, sampling=sampling, seed=seed)
        for proposer in (DraftModel(other), DraftModel(same), Lookup()):
            target.reset()
            got, _, steps = run(target, proposer, prompt, max_tokens=40, draft_max=6, sampling=sampling, seed=seed)
            assert got == alone, (text, type(proposer).__name__)
    # rewinds on the recurrent state happened, many times: through llama.cpp's
    # snapshots where the architecture has them (LFM2), else through checkpoints
    rewinds = (target.rollbacks if target.n_rs else target.replays) - (rollbacks if target.n_rs else replays)
    assert rewinds > 10, (target.n_rs, target.rollbacks, target.replays)
    assert other.replays + other.rollbacks > 0  # and on the recurrent draft's


def test_a_rewind_reads_back_to_the_same_state(models):
    """Rewound through the checkpoint, the next logits are those of a
    state that never went past the rewind point."""
    target = models[0]
    toks = target.vocab.tokenize(PROMPTS[1])
    target.reset()
    first = target.catch_up(toks, logits_last=True).copy()
    target.truncate(3)  # before the checkpoint (the prefill's start): read again from nothing
    target.catch_up(toks[:-2])
    target.decode(toks[-2:])  # a batch of two: the checkpoint is at len - 2
    target.truncate(len(toks) - 1)  # back one, through the checkpoint
    assert target.tokens == toks[:-1]
    again = target.decode(toks[-1:], logits_from=0)[0]
    assert abs(again - first).max() < 1e-4


def test_generate_runs_a_recurrent_target_end_to_end(made_paths):
    path = str(made_paths[0])
    outs = []
    for proposer in (["--proposer", "none"], ["--proposer", "draft", "--draft", str(made_paths[1])]):
        res = spec("generate", "--raw", "--temp", "0", "-n", "24", "--target", path, *proposer, PROMPTS[0])
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
    assert outs[0] == outs[1] and outs[0].strip()
    res = spec("models", "info", "--json", path)
    info = json.loads(res.stdout)
    assert info["memory"] in ("recurrent", "hybrid (attention and recurrent layers)") and info["mtp_layers"] == 0
    assert info["recurrent_rollback"] in ("snapshots", "checkpoint and read again")
