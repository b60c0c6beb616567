"""Runs on every CPU: the check that decides which of ggml's extra buffer
types (AMX, repacking) may be used here, run for real in child processes on
a real model; the repack-without-AMX load; and the one line a native crash
leaves instead of a bare exit 132.

The CPUs CI runs on may have working AMX or none, so the crashing build is
stood in for by a child that executes a real illegal instruction (ud2) in
the modes that fault: the decision and its fallbacks are the real code."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import FAULT_DIR
from spec_cli.llama import bufts, cpucheck


def test_which_builds_need_a_check():
    avx2 = {"SSE3", "AVX", "AVX2", "FMA", "F16C"}
    zen = {"pni", "avx", "avx2", "fma", "f16c"}
    assert not cpucheck.needs_check(avx2, zen)
    assert cpucheck.needs_check(avx2 | {"AVX512"}, zen)          # a wheel built on another CPU
    assert cpucheck.needs_check(avx2 | {"AMX_INT8"}, zen | {"amx_int8", "avx512f"})  # AMX may fault
    assert not cpucheck.needs_check({"NEON", "ARM_FMA"}, None)    # no /proc/cpuinfo: nothing to compare


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("SPEC_CLI_CPU_CHECK", "1")
    monkeypatch.delenv("SPEC_CLI_EXTRA_BUFTS", raising=False)
    monkeypatch.delenv("SPEC_CLI_TEST_FAULT", raising=False)
    return tmp_path / "spec-cli" / "cpu.json"


def test_a_working_build_keeps_its_extra_buffer_types(smollm_path, state):
    """Where this build's AMX kernels really fault (a default build on some
    Xeons), the real crash is what the check meets: repacking stays."""
    really_faults = cpucheck._child(smollm_path, "all") < 0
    v = cpucheck.verdict(smollm_path)
    if really_faults:
        assert v.bufts == "repack" and "AMX" in v.note
    else:
        assert v.bufts == "all" and v.note is None
    assert list(json.loads(state.read_text()).values()) == [v.bufts]


def test_a_build_whose_amx_kernels_crash_keeps_repacking(smollm_path, state, monkeypatch):
    monkeypatch.setenv("SPEC_CLI_TEST_FAULT", "extra-bufts")
    v = cpucheck.verdict(smollm_path)
    assert v.bufts == "repack" and "AMX" in v.note and "repacked" in v.note
    assert list(json.loads(state.read_text()).values()) == ["repack"]
    monkeypatch.delenv("SPEC_CLI_CPU_CHECK")  # the kept answer is used without a child
    monkeypatch.setattr(cpucheck, "needs_check", lambda *a: True)
    monkeypatch.setattr(cpucheck, "_child", lambda *a, **k: pytest.fail("checked again"))
    assert cpucheck.verdict(smollm_path) == v


def test_a_build_whose_repacking_crashes_too_loads_without_either(smollm_path, state, monkeypatch):
    monkeypatch.setenv("SPEC_CLI_TEST_FAULT", "repack")
    v = cpucheck.verdict(smollm_path)
    assert v.bufts == "none" and "GGML_NATIVE=OFF" in v.note
    assert list(json.loads(state.read_text()).values()) == ["none"]


def test_the_repack_mode_names_only_the_weights_repacking_takes():
    q4k, q6k, q4_0, q2k, f32 = 12, 14, 2, 10, 0
    shapes = [("token_embd.weight", q4k, (1536, 151936)), ("output.weight", q4k, (1536, 151936)),
              ("blk.0.attn_q.weight", q4k, (1536, 1536)), ("blk.1.attn_q.weight", q4k, (1536, 1536)),
              ("blk.0.ffn_down.weight", q4k, (8960, 1536)), ("blk.1.ffn_down.weight", q6k, (8960, 1536)),
              ("blk.0.attn_norm.weight", f32, (1536,)), ("blk.0.attn_k.weight", q4_0, (1536, 100)),
              ("blk.0.ffn_up.weight", q2k, (1536, 8960)), ("blk.0.attn_k_b.weight", q4k, (128, 512, 16)),
              ("blk.0.ffn_up_exps.weight", q4_0, (2048, 768, 64)), ("blk.0.ssm_x.weight", q4k, (64, 64))]
    pats = bufts.patterns(shapes, avx512=False)
    names = [n for n, _, _ in shapes]
    taken = {n for n in names if any(re.search(p, n) for p in pats)}
    assert taken == {"output.weight", "blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.0.ffn_down.weight",
                     "blk.0.ffn_up_exps.weight"}
    assert "blk.0.ffn_up.weight" in {n for n in names if any(re.search(p, n) for p in
                                                              bufts.patterns(shapes, avx512=True))}


def test_the_command_says_how_it_loaded_and_generates(smollm_path, spec_env, tmp_path):
    env = dict(spec_env, XDG_STATE_HOME=str(tmp_path), SPEC_CLI_CPU_CHECK="1", SPEC_CLI_TEST_FAULT="repack")
    out = subprocess.run([sys.executable, "-m", "spec_cli", "generate", "--raw", "--temp", "0", "-n", "8",
                          "--proposer", "none", "--target", str(smollm_path), "The capital of France is"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "models load without them" in out.stderr
    assert "repack=0" in json.dumps(json.loads((tmp_path / "spec-cli" / "costs.json").read_text()))


@pytest.mark.pair
def test_repacking_without_amx_takes_the_q4_k_weights_and_gives_the_same_text(target_path):
    """The override path for real: the 1.5B's Q4_K weights land in
    llama.cpp's CPU_REPACK buffer (its own log says how much), it decodes,
    and greedy text matches the plain load's (repacking only rounds)."""
    code = ("import sys; from spec_cli.llama.model import Model, LoadConfig\n"
            "with Model(sys.argv[1], LoadConfig(n_ctx=256, extra_bufts=sys.argv[2])) as m:\n"
            "    t = m.vocab.tokenize('def fibonacci(n):', add_special=False)\n"
            "    out = []\n"
            "    for _ in range(8):\n"
            "        t = [int(m.decode(t, logits_from=len(t) - 1)[0].argmax())]; out.append(t[0])\n"
            "    print(out)\n")
    runs = {}
    for mode in ("repack", "none"):
        env = dict(os.environ, SPEC_CLI_DEBUG="1")
        out = subprocess.run([sys.executable, "-c", code, str(target_path), mode], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        runs[mode] = out
    repacked = re.search(r"CPU_REPACK model buffer size = +([0-9.]+) MiB", runs["repack"].stderr)
    assert repacked and float(repacked.group(1)) > 400, runs["repack"].stderr[-3000:]
    assert "CPU_REPACK" not in runs["none"].stderr
    assert runs["repack"].stdout == runs["none"].stdout and runs["none"].stdout.count(",") == 7


def test_a_native_crash_leaves_one_line_and_the_usual_status():
    code = ("import sys; sys.argv = ['spec-cli', '--version']; from spec_cli.crash import install; install(); "
            f"sys.path.insert(0, {str(FAULT_DIR)!r}); from faults import illegal_instruction; illegal_instruction()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 132, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "llama.cpp crashed" in lines[0] and "SIGILL" in lines[0]
    assert "Traceback" not in out.stderr
