"""models.toml: the built-in registry, the user overlay, and clear errors."""

import json
import subprocess
import sys

import pytest

from spec_cli.errors import SpecError
from spec_cli.models.registry import BUILTIN_REGISTRY, load_registry, user_registry_path


def write(tmp_path, text, name="models.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """
[models.mine]
repo = "me/mine-GGUF"
file = "mine-Q4_K_M.gguf"
family = "llama3"
params = "3B"
draft = "llama-3.2-1b"
aliases = ["m3"]
"""


def test_builtin_registry_names_real_pairs():
    reg = load_registry([BUILTIN_REGISTRY])
    assert reg.lookup("llama-70b").name == "llama-3.3-70b"
    assert reg.lookup("llama-3.3-70b").draft == "llama-3.2-1b"
    assert reg.lookup("llama-1b").name == "llama-3.2-1b"
    assert reg.lookup("qwen2.5-coder-1.5b").draft == "qwen2.5-coder-0.5b"
    assert reg.lookup("qwen2.5-coder-32b").draft == "qwen2.5-coder-0.5b"
    families = {e.family for e in reg.entries.values()}
    assert {"llama3", "qwen2.5", "gemma3", "smollm2"} <= families
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m", "gemma-3-270m"):
        assert reg.lookup(name).mirror is not None


def test_every_suggested_draft_shares_the_family():
    reg = load_registry([BUILTIN_REGISTRY])
    for e in reg.entries.values():
        if e.draft:
            assert reg.lookup(e.draft).family == e.family, e.name
    # a model that drafts with its own MTP layers needs no draft model
    mtp = [e for e in reg.entries.values() if e.mtp]
    assert mtp and all(e.draft is None for e in mtp)
    assert reg.lookup("qwen3.6-27b").mtp and not reg.lookup("qwen3-8b").mtp


def test_overlay_adds_and_overrides(tmp_path):
    overlay = write(tmp_path, GOOD + """
[models."llama-3.2-1b"]
repo = "me/other-1b"
file = "x.gguf"
family = "llama3"
params = "1B"
""")
    reg = load_registry([BUILTIN_REGISTRY, overlay])
    assert reg.lookup("m3").repo == "me/mine-GGUF"
    assert reg.lookup("llama-3.2-1b").repo == "me/other-1b"  # the whole entry is replaced


def test_overlay_location_follows_xdg_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SPEC_CLI_MODELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_registry_path() == tmp_path / "spec-cli" / "models.toml"
    monkeypatch.setenv("SPEC_CLI_MODELS", str(tmp_path / "elsewhere.toml"))
    assert user_registry_path() == tmp_path / "elsewhere.toml"


@pytest.mark.parametrize("text, needle, line", [
    ('[models.x]\nrepo = "a"\nfile = \n', "invalid TOML", 3),
    ('[models.x]\nrepo = "a"\nfile = "b"\nfamily = "f"\nparams = "1B"\ncolour = "red"\n', "unknown key 'colour'", 1),
    ('\n[models.x]\nrepo = "a"\nfile = "b"\nparams = "1B"\n', "missing 'family'", 2),
    ('[models.x]\nrepo = "a"\nfile = "b"\nfamily = "f"\nparams = "1B"\ndraft = "nope"\n', "not in the registry", None),
    ('[modles.x]\nrepo = "a"\n', "unknown top-level key", 1),
    ('[models.x]\nrepo = "a"\nfile = "b"\nfamily = "f"\nparams = "1B"\nmtp = "yes"\n', "mtp must be true or false",
     None),
])
def test_broken_file_names_file_and_line(tmp_path, text, needle, line):
    p = write(tmp_path, text)
    with pytest.raises(SpecError) as e:
        load_registry([p])
    msg = str(e.value)
    assert str(p) in msg and needle in msg
    if line is not None:
        assert f"{p}:{line}" in msg or f"line {line}" in msg, msg


def test_unknown_name_suggests_close_names():
    reg = load_registry([BUILTIN_REGISTRY])
    with pytest.raises(SpecError) as e:
        reg.lookup("lama-3.3-70b")
    assert "llama-3.3-70b" in str(e.value)


def test_broken_user_file_is_a_clean_cli_error(tmp_path):
    p = write(tmp_path, "[models.x\n")
    env = {"SPEC_CLI_MODELS": str(p), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-m", "spec_cli", "models", "list"], capture_output=True,
                         text=True, env=env)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert str(p) in res.stderr and "line 1" in res.stderr


def test_models_list_shows_the_pairs(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "spec_cli", "models", "list"], capture_output=True,
                         text=True, env=env)
    assert res.returncode == 0, res.stderr
    for name in ("llama-3.3-70b", "llama-3.2-1b", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        assert name in res.stdout
    rows = json.loads(subprocess.run([sys.executable, "-m", "spec_cli", "models", "list", "--json"],
                                     capture_output=True, text=True, env=env).stdout)
    by = {r["name"]: r for r in rows}
    assert by["llama-3.3-70b"]["draft"] == "llama-3.2-1b"
    assert by["qwen2.5-coder-1.5b"]["draft"] == "qwen2.5-coder-0.5b"
