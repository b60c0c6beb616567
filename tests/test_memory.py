"""Memory near what the files need: once llama.cpp has copied a model's
weights (repacked for the CPU, or sent to a GPU), the process no longer
holds the file's mapped pages as well; what is still read from the mapping
faults back in from the page cache."""

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")


def mapped_rss_kib(path: Path) -> int:
    real, total, inside = str(path.resolve()), 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = line.rstrip().endswith(" " + real)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


def test_a_loaded_model_holds_none_of_its_file_twice(smollm_path):
    from spec_cli.llama.model import LoadConfig, Model

    with Model(smollm_path, LoadConfig(n_ctx=256)) as m:
        assert mapped_rss_kib(smollm_path) < smollm_path.stat().st_size / 1024 / 10
        tokens = m.vocab.tokenize("The capital of France is", add_special=True)
        assert m.decode(tokens, logits_from=len(tokens) - 1).shape == (1, m.n_vocab)  # still decodes


def test_the_kv_cache_a_batch_asks_for_is_read_before_load_and_fits_the_memory_free(smollm_path, monkeypatch):
    """`batch` lets the memory decide how many requests run at once: a
    sequence's KV cache read from the GGUF header is what llama.cpp
    allocates, and where the memory free would not hold the sequences
    asked for, the pair loads with fewer and says so."""
    from spec_cli.llama import memory
    from spec_cli.llama.facts import kv_bytes
    from spec_cli.llama.model import LoadConfig, Model
    from spec_cli.run.config import PairConfig
    from spec_cli.run.runner import plan_pair

    with Model(smollm_path, LoadConfig(n_ctx=512)) as m:
        assert memory.kv_bytes_per_token(smollm_path) * m.n_ctx == kv_bytes(m) > 0
    cfg = PairConfig(target=str(smollm_path), proposer="ngram", ctx=512, seqs=17, fit_memory=True)
    per_seq = 512 * memory.kv_bytes_per_token(smollm_path)
    weights = smollm_path.stat().st_size
    # free memory for the weights and five sequences, at the share a batch takes
    monkeypatch.setattr(memory, "available_bytes", lambda: int((weights + 5.5 * per_seq) / memory.SHARE))
    plan = plan_pair(cfg)
    assert plan.target_cfg.n_seq == 5
    assert any("holds the KV caches of 5 sequences of 512 tokens, not 17" in n for n in plan.notes)
    # a draft whose download waits for the target's costs is counted as if here: its
    # weights, and a KV cache a token as wide as the target's
    later = memory.seqs_that_fit(17, 512, [smollm_path], later_bytes=weights)
    assert later == max(1, int((5.5 * per_seq - weights) // (2 * per_seq))) < 5
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 40)
    assert plan_pair(cfg).target_cfg.n_seq == 17
    assert plan_pair(PairConfig(target=str(smollm_path), proposer="ngram", ctx=512, seqs=17)).target_cfg.n_seq == 17
