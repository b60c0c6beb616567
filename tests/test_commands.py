"""The everyday commands, run for real: chat in a pseudo-terminal, editor
completion, document drafting, and the live view."""

import json
import re
import signal
import subprocess
import sys

import pexpect
import pytest

from test_cli import ANSI, assert_clean_error, spec

SMALL = ["--target", "smollm2-135m", "--draft", "smollm2-135m", "--ctx", "2048"]
EVALUATED = re.compile(r"prompt: (\d+) new tokens evaluated")


_spawned: list = []


def spawn(args, env, **kw):
    child = pexpect.spawn(sys.executable, ["-m", "spec_cli", *args], env=env, encoding="utf-8",
                          timeout=120, dimensions=(40, 120), **kw)
    _spawned.append(child)
    return child


@pytest.fixture(autouse=True)
def _no_orphans():
    """A test that fails mid-conversation leaves no spec-cli running beside
    the rest of the suite (one did: a chat and two `generate -n 100000`
    slowed every later test to a crawl)."""
    yield
    while _spawned:
        child = _spawned.pop()
        if isinstance(child, subprocess.Popen):
            if child.poll() is None:
                child.kill()
                child.communicate()
        elif child.isalive():
            child.terminate(force=True)


def test_chat_two_turns_reuse_the_cache(smollm, spec_env):
    child = spawn(["chat", *SMALL, "-n", "40"], spec_env)
    child.expect("you> ")
    child.sendline("What is the capital of France?")
    child.expect(EVALUATED)
    first = int(child.match.group(1))
    child.expect("you> ")
    child.sendline("And of Italy?")
    child.expect(EVALUATED)
    second = int(child.match.group(1))
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "Traceback" not in child.before

    # only the new turn is evaluated, not the conversation again
    new_turn = len(smollm.vocab.tokenize("And of Italy?", add_special=False))
    assert new_turn <= second <= new_turn + 12, (first, second)
    assert second < first


def test_chat_ctrl_c_stops_the_reply_and_keeps_the_conversation(spec_env, tmp_path):
    # a reply may run to 3000 tokens: it is still being written when Ctrl-C
    # comes, on however fast a machine
    child = spawn(["chat", *SMALL[:-1], "4096", "-n", "3000"], spec_env)
    child.expect("you> ")
    child.sendline("Write a very long story about a dragon, with many chapters.")
    child.expect("/ verify")  # the state: the live footer is up, a reply is streaming
    child.sendintr()
    child.expect(r"reply interrupted; the conversation is kept")
    child.expect("you> ")
    saved = tmp_path / "chat.json"
    child.sendline(f"/save {saved}")
    child.expect("saved 2 messages")
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "Traceback" not in child.before
    msgs = json.loads(saved.read_text())["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert msgs[1]["content"]  # the partial reply is kept


def test_chat_reset_and_unknown_command(smollm_path, spec_env):
    child = spawn(["chat", *SMALL, "-n", "8"], spec_env)
    child.expect("you> ")
    child.sendline("/frobnicate")
    child.expect("unknown command /frobnicate")
    child.sendline("Hi")
    child.expect(EVALUATED)
    child.expect("you> ")
    child.sendline("/reset")
    child.expect("conversation cleared")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_from_a_pipe(smollm_path, spec_env):
    res = spec("chat", *SMALL, "-n", "8", input="Hi\n/stats\n", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() and not ANSI.search(res.stdout)
    assert "new tokens evaluated" in res.stderr


def test_live_view_colours_tokens_and_shows_the_footer(smollm_path, spec_env):
    child = spawn(["generate", *SMALL, "--raw", "-n", "60", "--fixed-draft", "Count: 1, 2, 3, 4, 5, 6,"],
                  spec_env)
    child.expect(pexpect.EOF)
    out = child.before
    assert "\x1b[32m" in out  # tokens the draft wrote, in green
    assert "tok/s" in out and "per position" in out  # footer, then the summary table


@pytest.mark.pair
def test_complete_fills_the_middle(target_path, draft_path, spec_env, tmp_path):
    rest = tmp_path / "rest.py"
    rest.write_text("\n\n\nprint(add(2, 3))\n")
    res = spec("complete", "--suffix-file", str(rest), "--json", "--max-tokens", "48",
               input='def add(a: int, b: int) -> int:\n    """Return the sum of a and b."""\n', env=spec_env)
    assert res.returncode == 0, res.stderr
    completion = json.loads(res.stdout)["completion"]
    assert "return" in completion and "a + b" in completion
    assert "def add" not in completion and "print(add" not in completion


def test_complete_prints_only_the_completion(smollm_path, spec_env):
    res = spec("complete", *SMALL, "--max-lines", "1", input="def greet(name):\n", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n") == 0 and not ANSI.search(res.stdout)
    assert "no fill-in-the-middle tokens" in res.stderr  # SmolLM2 has none: plain continuation


def test_generate_to_a_file_redirect_has_only_text(smollm_path, spec_env, tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        res = subprocess.run([sys.executable, "-m", "spec_cli", "generate", *SMALL, "--raw", "-n", "20",
                              "--seed", "1", "The three primary colours are"],
                             stdout=f, stderr=subprocess.PIPE, text=True, env=spec_env)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert text.strip() and not ANSI.search(text)
    ref = json.loads(spec("generate", *SMALL, "--raw", "-n", "20", "--json",
                          "The three primary colours are", env=spec_env).stdout)
    assert text.rstrip("\n") == ref["text"].rstrip("\n")


def test_document_drafting_writes_atomically_and_never_overwrites(smollm_path, spec_env, tmp_path):
    brief = tmp_path / "brief.md"
    brief.write_text("Write a short note about why tests matter.")
    draft = tmp_path / "draft.md"
    res = spec("generate", *SMALL, "--file", str(brief), "--output", str(draft), "-n", "30", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert draft.read_text().strip() and res.stdout == ""
    assert not list(tmp_path.glob(".draft.md.*"))  # no temp file left behind

    before = draft.read_text()
    res = spec("generate", *SMALL, "--file", str(brief), "--output", str(draft), "-n", "5", env=spec_env)
    assert_clean_error(res, "exists", "--force")
    assert draft.read_text() == before
    res = spec("generate", *SMALL, "--file", str(brief), "--output", str(draft), "-n", "5", "--force",
               "--seed", "4", "--temp", "1.0", env=spec_env)
    assert res.returncode == 0, res.stderr

    assert_clean_error(spec("generate", *SMALL, "--file", str(tmp_path / "missing.md"), env=spec_env),
                       "not found")


def test_document_ctrl_c_keeps_what_was_written(smollm_path, spec_env, tmp_path):
    draft = tmp_path / "long.md"
    proc = subprocess.Popen([sys.executable, "-m", "spec_cli", "generate", *SMALL, "--raw", "-n", "100000",
                             "--ctx", "8192", "--output", str(draft), "Once upon a time"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=spec_env)
    _spawned.append(proc)
    tmp = None
    for _ in range(600):
        parts = list(tmp_path.glob(".long.md.*.part"))
        if parts and parts[0].stat().st_size > 50:
            tmp = parts[0]
            break
        proc.wait(timeout=0.1) if proc.poll() is not None else __import__("time").sleep(0.1)
    assert tmp is not None, "nothing was written"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    assert "incomplete" in err
    assert len(draft.read_text()) > 50
    assert not list(tmp_path.glob(".long.md.*"))


def test_a_target_without_a_draft_model_drafts_with_the_lookup_and_its_thinking_goes_apart(smollm_path, spec_env,
                                                                                           tmp_path):
    """A GGUF the registry does not know, no --draft: served with the lookup
    (said in one line), not refused.  Its template (Qwen3.5's) opens a
    thinking block SmolLM2 never closes: the reply is all thinking, on
    stderr, and stdout gets no answer; --hide-thinking leaves it out."""
    from test_thinking_serve import thinker_gguf

    path = thinker_gguf(smollm_path, tmp_path)
    args = ["generate", "--target", str(path), "--ctx", "2048", "-n", "12", "What is the capital of France?"]
    res = spec(*args, env=spec_env)
    assert res.returncode == 0, res.stderr
    assert "no draft model for" in res.stderr and "lookup" in res.stderr
    assert "capital" in res.stderr and "thinking: " in res.stderr and res.stdout.strip() == ""
    hidden = spec(*args, "--hide-thinking", env=spec_env)
    assert hidden.returncode == 0 and "France is" not in hidden.stderr
    as_json = json.loads(spec(*args, "--json", env=spec_env).stdout)
    assert as_json["reasoning"] and as_json["answer"] == "" and as_json["text"].startswith(as_json["reasoning"][:5])
