"""A target spread over llama.cpp RPC servers, for real: two `spec-cli
rpc-server` processes on 127.0.0.1 split SmolLM2 between them; the draft
model stays in the client.

Identity: the RPC servers run ggml's CPU backend without the weight
repacking the local load uses, so a batch's sums may round differently
from the local run's: greedy text over RPC is compared with the local
run's and, where they part, the drafted RPC run must still equal the RPC
target alone (greedy, seeded and --deterministic), which is what the
promise is about.  Faults (a dead endpoint, a port that speaks something
else, a server killed mid-run) are one line and a non-zero exit, never
an abort."""

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from test_cli import spec

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import llama_cpp, sys; sys.exit(not llama_cpp.llama_supports_rpc())"],
                   capture_output=True).returncode != 0,
    reason="this llama-cpp-python was built without RPC (CMAKE_ARGS=-DGGML_RPC=ON, as .ci/run does)")

PROMPT = "The three primary colours are"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rpc_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "spec_cli", "rpc-server", "--port", str(port), "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rpc-server exited: {proc.stderr.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("rpc-server did not come up")


@pytest.fixture(scope="module")
def servers():
    ports = [_free_port(), _free_port()]
    procs = [_rpc_server(p) for p in ports]
    yield ",".join(f"127.0.0.1:{p}" for p in ports)
    for p in procs:
        p.terminate()
        p.wait(10)


def _generate(model, *args, rpc=None, prompt=PROMPT):
    res = spec("generate", "--target", str(model), "--draft", str(model), "--ctx", "512", "--raw", "--json",
               "-n", "32", *(["--rpc", rpc] if rpc else []), *args, prompt)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("args", [("--temp", "0"), ("--temp", "0.8", "--seed", "7"),
                                  ("--temp", "0", "--deterministic")], ids=["greedy", "seeded", "deterministic"])
def test_drafting_over_rpc_writes_the_rpc_target_alones_text(smollm_path, servers, args):
    alone = _generate(smollm_path, "--proposer", "none", *args, rpc=servers)
    drafted = _generate(smollm_path, "--proposer", "draft", "--fixed-draft", *args, rpc=servers)
    assert drafted["text"] == alone["text"]
    assert drafted["stats"]["drafted"] > 0


def test_greedy_over_rpc_is_the_local_text_or_parts_at_a_near_tie(smollm_path, servers, smollm_fast):
    """The servers' CPU backend does not repack weights as the local load
    does: the same sums in another order.  So the greedy texts may part,
    but only where the local target's top two tokens were within rounding's
    reach (bench's NEAR_TIE); a parting at a wider margin fails."""
    from spec_cli.run.bench import NEAR_TIE
    from spec_cli.run.runner import prompt_tokens

    local = _generate(smollm_path, "--proposer", "none", "--temp", "0")
    remote = _generate(smollm_path, "--proposer", "none", "--temp", "0", rpc=servers)
    a, b = local["tokens"], remote["tokens"]
    j = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if j is None:
        assert len(a) == len(b)
        return
    m = smollm_fast
    m.reset()
    row = m.catch_up(prompt_tokens(m, PROMPT, raw=True) + a[:j], logits_last=True)
    top2 = np.sort(np.asarray(row, dtype=np.float64))[-2:]
    assert top2[1] - top2[0] <= NEAR_TIE, f"RPC parts from local at token {j}, a margin of {top2[1] - top2[0]:.3f}"


def test_a_dead_endpoint_is_one_line(smollm_path):
    port = _free_port()
    res = spec("generate", "--target", str(smollm_path), "--proposer", "none", "--rpc", f"127.0.0.1:{port}", "-n", "4",
               "hi")
    assert res.returncode == 1
    assert f"cannot reach RPC server 127.0.0.1:{port}" in res.stderr
    assert "Traceback" not in res.stderr and "GGML_ABORT" not in res.stderr and "llama_model_load" not in res.stderr


def test_a_port_that_speaks_something_else_is_one_line(smollm_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def answer():  # an HTTP server's reply to whatever comes
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(100)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        res = spec("generate", "--target", str(smollm_path), "--proposer", "none", "--rpc", f"127.0.0.1:{port}", "-n", "4",
               "hi")
    finally:
        listener.close()
    assert res.returncode == 1
    assert f"127.0.0.1:{port} does not speak llama.cpp's RPC protocol" in res.stderr
    assert "Traceback" not in res.stderr and "GGML_ABORT" not in res.stderr


def test_bad_rpc_and_split_options_are_refused_before_loading():
    res = spec("generate", "--rpc", "nohostport", "hi")
    assert res.returncode != 0 and "bad RPC endpoint" in res.stderr
    res = spec("generate", "--rpc", "127.0.0.1:1,127.0.0.1:2", "--tensor-split", "1", "hi")
    assert res.returncode != 0 and "bad --tensor-split" in res.stderr


def test_a_server_killed_mid_generation_is_one_line_and_exit_3(smollm_path):
    port = _free_port()
    server = _rpc_server(port)
    proc = subprocess.Popen([sys.executable, "-m", "spec_cli", "generate", "--target", str(smollm_path),
                             "--proposer", "none", "--ctx", "2048", "--raw", "-n", "1900", "--rpc",
                             f"127.0.0.1:{port}", "Once upon a time"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdout.read(20)  # generating
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        server.kill()
    assert proc.returncode == 3, err
    assert f"an RPC server stopped answering (127.0.0.1:{port})" in err
    assert "Traceback" not in err and "core dumped" not in err
