"""The real `spec-cli` command, run as a user runs it (subprocess)."""

import json
import re
import signal
import subprocess
import sys

import pytest


ANSI = re.compile(r"\x1b\[")
SMALL = ["--target", "smollm2-135m", "--ctx", "1024"]


def spec(*args, input=None, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "spec_cli", *args], input=input,
                          capture_output=True, text=True, env=env, timeout=timeout)


def assert_clean_error(res, *needles):
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in res.stderr, res.stderr


def test_help_lists_generate_and_imports_nothing_heavy():
    res = spec("--help")
    assert res.returncode == 0 and "generate" in res.stdout
    probe = subprocess.run([sys.executable, "-c", "import sys, spec_cli.cli; "
                            "print(sorted(m for m in ('llama_cpp', 'numpy', 'huggingface_hub') if m in sys.modules))"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "[]", probe.stdout + probe.stderr


def test_piped_output_is_only_text(smollm_path, spec_env):
    res = spec("generate", *SMALL, "--proposer", "ngram", "--raw", "-n", "24", "def add(a, b):", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() and not ANSI.search(res.stdout)
    assert "tok/s" in res.stderr and "tok/s" not in res.stdout
    as_json = spec("generate", *SMALL, "--proposer", "ngram", "--raw", "-n", "24", "--json",
                   "def add(a, b):", env=spec_env)
    assert json.loads(as_json.stdout)["text"].rstrip("\n") == res.stdout.rstrip("\n")


def test_json_object(smollm_path, spec_env):
    res = spec("generate", *SMALL, "--draft", "smollm2-135m", "--json", "-n", "16", "--seed", "3",
               "--temp", "0.7", "--fixed-draft", "Name three colours.", env=spec_env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) >= {"text", "tokens", "finish_reason", "stats"}
    assert out["finish_reason"] in ("stop", "length") and len(out["tokens"]) <= 16
    assert set(out["stats"]) >= {"steps", "drafted", "accepted", "acceptance_rate", "mean_accepted",
                                 "tokens_per_s", "draft_s", "verify_s", "host_s", "host_ms_per_step",
                                 "host_ms_per_drafted"}
    assert 0 < out["stats"]["host_s"] < out["stats"]["draft_s"] + out["stats"]["verify_s"]
    # llama.cpp's defaults where none is given, at a temperature above 0
    assert out["sampling"] == {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
    again = json.loads(spec("generate", *SMALL, "--draft", "smollm2-135m", "--json", "-n", "16",
                            "--seed", "3", "--temp", "0.7", "--fixed-draft", "Name three colours.",
                            env=spec_env).stdout)
    assert again["tokens"] == out["tokens"]  # same seed, same output


def test_prompt_from_stdin(smollm_path, spec_env):
    res = spec("generate", *SMALL, "--proposer", "none", "--raw", "-n", "8", "--json",
               input="The sky is", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["tokens"]


@pytest.mark.llama
def test_missing_model_file(spec_env, tmp_path):
    res = spec("generate", "--target", str(tmp_path / "nope.gguf"), "--proposer", "none", "hi", env=spec_env)
    assert_clean_error(res, "not found")


@pytest.mark.llama
def test_not_a_gguf_file(spec_env, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a model")
    res = spec("generate", "--target", str(bad), "--proposer", "none", "hi", env=spec_env)
    assert_clean_error(res, "not a GGUF file")


def test_truncated_gguf_file(spec_env, tmp_path, smollm_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm_path.read_bytes()[:1_000_000])
    res = spec("generate", "--target", str(cut), "--proposer", "none", "hi", env=spec_env)
    assert_clean_error(res, "could not load")


@pytest.mark.pair
def test_incompatible_pair_is_refused(smollm_path, draft_path, spec_env):
    res = spec("generate", *SMALL, "--draft", "qwen2.5-coder-0.5b", "hi", env=spec_env)
    assert_clean_error(res, "cannot draft for smollm2-135m", "vocabulary")


@pytest.mark.llama
def test_unknown_model_suggests_names(spec_env):
    res = spec("generate", "--target", "qwen2.5-coder-1.5", "--proposer", "none", "hi", env=spec_env)
    assert_clean_error(res, "unknown model", "qwen2.5-coder-1.5b")


def test_over_long_prompt(smollm_path, spec_env):
    res = spec("generate", "--target", "smollm2-135m", "--ctx", "256", "--proposer", "none", "--raw",
               "word " * 600, env=spec_env)
    assert_clean_error(res, "context holds", "--ctx")


def test_empty_stdin(spec_env):
    res = spec("generate", "--proposer", "none", input="", env=spec_env)
    assert_clean_error(res, "empty")


def test_ctrl_c_keeps_text_and_exits_130(smollm_path, spec_env):
    proc = subprocess.Popen([sys.executable, "-m", "spec_cli", "generate", *SMALL, "--proposer", "none",
                             "--raw", "-n", "100000", "--ctx", "4096", "Once upon a time"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=spec_env)
    try:
        first = proc.stdout.read(20)  # the state: text streams (up to 4000 tokens more would follow)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:  # a failure leaves no generation running beside the rest of the suite
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert "finish interrupted" in err
    assert len(first + rest) >= 20


@pytest.mark.pair
def test_qwen_target_with_smollm_draft_is_refused(target_path, smollm_path, spec_env):
    res = spec("generate", "--target", "qwen2.5-coder-1.5b", "--draft", "smollm2-135m", "--ctx", "512",
               "hi", env=spec_env)
    assert_clean_error(res, "smollm2-135m cannot draft for qwen2.5-coder-1.5b", "vocabulary sizes differ",
                       "qwen2.5-coder-0.5b")


@pytest.mark.pair
def test_draft_defaults_to_the_registry_suggestion(target_path, draft_path, spec_env):
    res = spec("generate", "--target", "qwen2.5-coder-1.5b", "--ctx", "512", "-n", "4", "--json",
               "--proposer", "draft", "--fixed-draft", "Say hi.", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["stats"]["drafted"] > 0


def test_models_info_reads_the_gguf(smollm_path, spec_env):
    res = spec("models", "info", "smollm2-135m", "--json", env=spec_env)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["architecture"] == "llama" and info["vocab_size"] == 49152
    # the hub's file is Q8_0, the package-index mirror's Q4_1: whichever was fetched
    assert info["quantization"] in smollm_path.name.upper().replace("-", "_") and info["chat_template"] is True
    assert info["trained_context"] > 0 and 100e6 < info["parameters"] < 200e6
    by_path = json.loads(spec("models", "info", str(smollm_path), "--json", env=spec_env).stdout)
    assert by_path["file"] == str(smollm_path) and by_path["fim_tokens"] == {}


@pytest.mark.pair
def test_models_info_shows_fim_tokens(target_path, spec_env):
    res = spec("models", "info", "qwen2.5-coder-1.5b", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert "qwen2" in res.stdout and "Q4_K - Medium" in res.stdout
    assert "pre=<|fim_prefix|>" in res.stdout and "32768" in res.stdout


@pytest.mark.parametrize("args", [("generate", "--temp", "abc", "hi"),
                                  ("bench", "--prompts", "a.jsonl", "b.jsonl"),
                                  ("generate", "--rule", "telepathy", "hi"),
                                  ("generate", "--no-such-option")])
def test_a_typo_gets_a_usage_line_not_a_traceback(args, spec_env):
    res = spec(*args, env=spec_env)
    assert res.returncode in (1, 2), res.stderr
    assert "Traceback" not in res.stderr and "╭" not in res.stderr, res.stderr
    assert "Error" in res.stderr or "error" in res.stderr
