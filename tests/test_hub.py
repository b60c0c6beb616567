"""The real huggingface_hub download path, against a loopback server that
speaks the hub's resolve protocol (HF_ENDPOINT)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import COMMIT, HubServer

DATA = os.urandom(24 * 1024 * 1024 + 123)  # > huggingface_hub's 10 MB read chunk
OVERLAY = """
[models.tiny]
repo = "test-org/tiny-GGUF"
file = "tiny.gguf"
family = "test"
params = "1M"

[models.gated]
repo = "test-org/gated-GGUF"
file = "gated.gguf"
family = "test"
params = "1M"
"""


@pytest.fixture
def hub(tmp_path):
    with HubServer() as server:
        server.add("test-org/tiny-GGUF", "tiny.gguf", DATA)
        server.add("test-org/gated-GGUF", "gated.gguf", DATA[:1000])
        server.token["test-org/gated-GGUF"] = "hf_good"
        yield server


@pytest.fixture
def env(tmp_path, hub):
    overlay = tmp_path / "models.toml"
    overlay.write_text(OVERLAY)
    e = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    e.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), SPEC_CLI_MODELS=str(overlay),
             SPEC_CLI_CACHE=str(tmp_path / "cache"), HF_HUB_DISABLE_TELEMETRY="1")
    return e


def pull(env, *names, **kw):
    return subprocess.run([sys.executable, "-m", "spec_cli", "models", "pull", *names],
                          capture_output=True, text=True, env=env, timeout=120, **kw)


def snapshot(env) -> Path:
    return Path(env["HF_HOME"]) / "hub" / "models--test-org--tiny-GGUF" / "snapshots" / COMMIT / "tiny.gguf"


def test_pull_lands_in_the_hf_cache(env, hub):
    res = pull(env, "tiny")
    assert res.returncode == 0, res.stderr
    path = Path(res.stdout.strip())
    assert path == snapshot(env)
    assert path.read_bytes() == DATA
    listed = json.loads(subprocess.run([sys.executable, "-m", "spec_cli", "models", "list", "--json"],
                                       capture_output=True, text=True, env=env).stdout)
    assert {r["name"]: r["path"] for r in listed}["tiny"] == str(path)
    # a second pull finds it cached and downloads nothing
    gets = sum(1 for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p)
    assert pull(env, "tiny").returncode == 0
    assert sum(1 for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p) == gets


def test_pull_cut_off_part_way_resumes(env, hub):
    hub.cut_after = 15 * 1024 * 1024 + 7
    res = pull(env, "tiny")
    assert res.returncode == 0, res.stderr
    gets = [r for m, p, r in hub.requests if m == "GET" and "/resolve/" in p]
    # the second request goes on from what the first one had written
    assert gets[0] is None and gets[1].startswith("bytes="), hub.requests
    assert 0 < int(gets[1][6:].rstrip("-")) <= hub.cut_after
    assert Path(res.stdout.strip()).read_bytes() == DATA


def test_ctrl_c_during_pull_exits_cleanly(env, hub):
    hub.stall_after = 12 * 1024 * 1024
    proc = subprocess.Popen([sys.executable, "-m", "spec_cli", "models", "pull", "tiny"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert hub.stalled.wait(60), "the download never started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and not out
    assert not snapshot(env).exists()  # nothing half-written in the cache
    hub.stall_after = None
    hub.release.set()
    res = pull(env, "tiny")
    assert res.returncode == 0 and Path(res.stdout.strip()).read_bytes() == DATA


def test_401_says_how_to_get_access(env):
    res = pull(env, "gated")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "HF_TOKEN" in res.stderr and "huggingface.co/settings/tokens" in res.stderr


def test_wrong_token_is_told_to_accept_the_licence(env):
    res = pull({**env, "HF_TOKEN": "hf_wrong"}, "gated")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "gated" in res.stderr and "HF_TOKEN" in res.stderr


def test_token_is_sent(env):
    res = pull({**env, "HF_TOKEN": "hf_good"}, "gated")
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()).read_bytes() == DATA[:1000]


def test_offline_with_nothing_cached(env, hub):
    res = pull({**env, "HF_HUB_OFFLINE": "1"}, "tiny")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "HF_HUB_OFFLINE" in res.stderr
    assert not hub.requests  # offline means no request at all


def test_offline_uses_the_cache(env):
    assert pull(env, "tiny").returncode == 0
    res = pull({**env, "HF_HUB_OFFLINE": "1"}, "tiny")
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()).read_bytes() == DATA


def test_unreachable_hub_without_mirror(env, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = pull({**env, "HF_ENDPOINT": f"http://127.0.0.1:{port}"}, "tiny")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "could not be reached" in res.stderr
