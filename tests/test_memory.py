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
