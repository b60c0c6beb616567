"""Runs on every CPU: the check that decides whether ggml's extra buffer
types (AMX, repacking) may be used here, run for real in a child process on
a real model, and the one line a native crash leaves instead of a bare
exit 132.

The CPUs CI runs on may have working AMX or none, so the crashing build is
stood in for by a child that executes a real illegal instruction (ud2)
where the extra buffer types are on: the decision and its fallback are the
real code."""

import json
import subprocess
import sys

import pytest

from spec_cli.llama import cpucheck


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
    v = cpucheck.verdict(smollm_path)
    assert v.extra_bufts and v.note is None
    assert list(json.loads(state.read_text()).values()) == [True]


def test_a_build_whose_extra_buffer_types_crash_loads_without_them(smollm_path, state, monkeypatch):
    monkeypatch.setenv("SPEC_CLI_TEST_FAULT", "extra-bufts")
    v = cpucheck.verdict(smollm_path)
    assert not v.extra_bufts and "AMX" in v.note and "GGML_NATIVE=OFF" in v.note
    assert list(json.loads(state.read_text()).values()) == [False]
    monkeypatch.delenv("SPEC_CLI_CPU_CHECK")  # the kept answer is used without a child
    monkeypatch.setattr(cpucheck, "needs_check", lambda *a: True)
    monkeypatch.setattr(cpucheck, "_child", lambda *a, **k: pytest.fail("checked again"))
    assert cpucheck.verdict(smollm_path) == v


def test_the_command_says_how_it_loaded_and_generates(smollm_path, spec_env, tmp_path):
    env = dict(spec_env, XDG_STATE_HOME=str(tmp_path), SPEC_CLI_CPU_CHECK="1", SPEC_CLI_TEST_FAULT="extra-bufts")
    out = subprocess.run([sys.executable, "-m", "spec_cli", "generate", "--raw", "--temp", "0", "-n", "8",
                          "--proposer", "none", "--target", str(smollm_path), "The capital of France is"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "models load without ggml's extra buffer types" in out.stderr
    assert "repack=0" in json.dumps(json.loads((tmp_path / "spec-cli" / "costs.json").read_text()))


def test_a_native_crash_leaves_one_line_and_the_usual_status():
    code = ("import sys; sys.argv = ['spec-cli', '--version']; from spec_cli.crash import install; install(); "
            "from spec_cli.llama.cpucheck import illegal_instruction; illegal_instruction()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 132, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "llama.cpp crashed" in lines[0] and "SIGILL" in lines[0]
    assert "Traceback" not in out.stderr
