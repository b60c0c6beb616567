"""`spec-cli batch`, run as a user runs it (subprocess), on SmolLM2-135M:
every request answered once, failures as error lines, the texts
`generate`'s, and a run stopped (Ctrl-C, SIGKILL) resumed with nothing lost
or repeated.  The file formats themselves: test_jobs.py."""

import json
import signal
import subprocess
import sys
import time

SMALL = ["--target", "smollm2-135m", "--ctx", "1024", "--proposer", "ngram"]


def spec(*args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "spec_cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def write_lines(path, objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def answers(path) -> dict[str, dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    ids = [a["custom_id"] for a in lines]
    assert len(ids) == len(set(ids)), ids  # never one answered twice
    return {a["custom_id"]: a for a in lines}


def chat(cid, content, **body):
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": content}], "temperature": 0, **body}}


def test_every_request_is_answered_once_and_failures_are_lines(smollm_path, spec_env, tmp_path):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    src = write_lines(tmp_path / "in.jsonl", [
        chat("chat", "Name three colours.", max_tokens=16),
        {"custom_id": "text", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "def add(a, b):", "max_tokens": 12, "temperature": 0}},
        chat("bad-field", "hi", temperature="hot"),
        chat("too-long", "word " * 1500, max_tokens=4),
        chat("schema", "A person called Ada, aged 36, as JSON.", max_tokens=40,
             response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}),
    ])
    out = tmp_path / "out.jsonl"
    res = spec("batch", str(src), "-o", str(out), *SMALL, "--parallel", "3", env=spec_env)
    assert res.returncode == 1, res.stderr  # two requests failed: said, and written as such
    assert "Traceback" not in res.stderr and "2 requests failed" in res.stderr
    got = answers(out)
    assert set(got) == {"chat", "text", "bad-field", "too-long", "schema"}
    for cid in ("chat", "text", "schema"):
        r = got[cid]["response"]
        assert r["status_code"] == 200 and got[cid]["error"] is None and r["request_id"] == r["body"]["id"]
        assert r["body"]["usage"]["completion_tokens"] > 0 and "speculation" in r["body"]
    assert got["chat"]["response"]["body"]["object"] == "chat.completion"
    assert got["text"]["response"]["body"]["choices"][0]["text"]
    person = json.loads(got["schema"]["response"]["body"]["choices"][0]["message"]["content"])
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)
    for cid, needle in (("bad-field", "temperature"), ("too-long", "context")):
        a = got[cid]
        assert a["response"]["status_code"] == 400 and needle in a["error"]["message"], a
    again = spec("batch", str(src), "-o", str(out), *SMALL, env=spec_env)  # all answered: nothing loads
    assert again.returncode == 0 and "nothing to run" in again.stderr and len(answers(out)) == 5


def test_plain_prompts_are_generates_texts_bit_for_bit(smollm_path, spec_env, tmp_path):
    prompts = ["Write a haiku about the sea.", "What is 12 times 7?", "Name a prime number above 100."]
    src = tmp_path / "prompts.txt"
    src.write_text("\n".join(prompts) + "\n")
    out = tmp_path / "out.jsonl"
    res = spec("batch", str(src), "-o", str(out), *SMALL, "-n", "24", "--deterministic", "--json", env=spec_env)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)  # stdout holds the summary alone
    assert (summary["answered"], summary["failed"], summary["not_run"]) == (3, 0, 0)
    got = answers(out)
    for i, prompt in enumerate(prompts, 1):
        alone = spec("generate", *SMALL, "--proposer", "none", "-n", "24", "--deterministic", "--json", prompt,
                     env=spec_env)
        assert alone.returncode == 0, alone.stderr
        text = got[f"line-{i}"]["response"]["body"]["choices"][0]["message"]["content"]
        assert text == json.loads(alone.stdout)["text"]


def _started(out, n_lines: int, proc, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.exists() and out.read_text().count("\n") >= n_lines:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no answer came")


def test_a_stopped_batch_resumes_with_nothing_lost_or_repeated(smollm_path, spec_env, tmp_path):
    src = tmp_path / "prompts.txt"
    src.write_text("".join(f"Write a long story about a robot called R{i}.\n" for i in range(8)))
    out = tmp_path / "out.jsonl"
    args = [sys.executable, "-m", "spec_cli", "batch", str(src), "-o", str(out), *SMALL, "-n", "96",
            "--parallel", "2"]
    ids = {f"line-{i}" for i in range(1, 9)}

    proc = subprocess.Popen(args, env=spec_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _started(out, 1, proc)
    before = out.read_text().count("\n")
    proc.send_signal(signal.SIGINT)  # the running ones finish and are written; the rest wait for the next run
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "run the same command again" in err and "Traceback" not in err, err
    first = answers(out)
    # at most the two running (and one that finished as the signal went) came after it
    assert before <= len(first) <= before + 3 and len(first) < 8 and set(first) <= ids
    assert all(a["response"]["body"]["choices"][0]["finish_reason"] == "length" for a in first.values())

    proc = subprocess.Popen(args, env=spec_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _started(out, len(first) + 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)

    res = subprocess.run(args, env=spec_env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    final = answers(out)  # each once, none half-written
    assert set(final) == ids
    assert all(final[cid] == a for cid, a in first.items())  # what was written stays as it was


def test_a_folder_of_prompts_gets_a_file_of_answers_each(smollm_path, spec_env, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Outline: a note about tea.")
    (docs / "b.txt").write_text("Outline: a note about coffee.")
    res = spec("batch", str(docs), *SMALL, "-n", "12", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in docs.iterdir()) == ["a.md", "a.out.md", "b.out.txt", "b.txt"]
    assert (docs / "a.out.md").read_text().strip()
    again = spec("batch", str(docs), *SMALL, env=spec_env)
    assert again.returncode == 0 and "nothing to run" in again.stderr


def test_bench_times_a_batch_file_beside_the_target_alone(smollm_path, spec_env, tmp_path):
    src = tmp_path / "prompts.txt"
    src.write_text("Count from one to twenty.\nList the days of the week.\nSpell 'banana' letter by letter.\n")
    # the cost model's choice on a 135M model is the machine's; ngram@4 drafts whatever the lookup finds
    res = spec("bench", "--batch", str(src), "--target", "smollm2-135m", "--ctx", "1024", "--proposer", "ngram",
               "--proposer", "ngram@4", "-n", "32", "--parallel", "2", "--deterministic", "--json", env=spec_env)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    assert [r["proposer"] for r in result["rows"]] == ["none", "ngram", "ngram@4"]
    for r in result["rows"]:
        assert (r["requests"], r["failed"], r["same_text"]) == (3, 0, 3) and r["tokens"] > 0 and r["seconds"] > 0
    assert result["rows"][1]["vs_none"] > 0 and result["rows"][2]["drafted"] > 0
