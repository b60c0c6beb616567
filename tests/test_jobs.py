"""`spec-cli batch`'s input and output files (jobs/inputs.py, jobs/outputs.py):
pure logic over real files, no model.  The runs themselves: test_batch.py."""

import json
import subprocess
import sys

import pytest

from spec_cli.errors import SpecError
from spec_cli.jobs.inputs import Defaults, answer_path, read
from spec_cli.jobs.outputs import AnswerLog, Ordered, answer_line, check_folder_output, write_atomically
from spec_cli.jobs.run import parse


def lines(path, *objs):
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def req(cid, url="/v1/chat/completions", **body):
    return {"custom_id": cid, "method": "POST", "url": url,
            "body": body or {"messages": [{"role": "user", "content": "hi"}]}}


def refused(path, *needles):
    with pytest.raises(SpecError) as e:
        read(path, Defaults())
    for n in needles:
        assert n in str(e.value), str(e.value)
    return str(e.value)


def test_openai_batch_lines_keep_their_own_fields(tmp_path):
    f = lines(tmp_path / "in.jsonl", req("a"), "", req("b", "/v1/completions", prompt="def f(", max_tokens=5))
    inputs = read(f, Defaults(temperature=0.0, max_tokens=99))
    assert inputs.mode == "requests"
    a, b = inputs.items
    assert (a.custom_id, a.kind, a.where) == ("a", "chat", f"{f}:1")
    assert "max_tokens" not in a.body and "temperature" not in a.body  # the API's defaults, as serve answers
    assert (b.kind, b.where, b.body["max_tokens"]) == ("completion", f"{f}:3", 5)
    assert parse(b).max_tokens == 5 and parse(b).stream is False


def test_plain_prompts_are_generates_requests(tmp_path):
    d = Defaults(temperature=0.0, max_tokens=64, seed=7, system="Be brief.", stop=("\n\n",))
    f = lines(tmp_path / "p.jsonl", {"prompt": "one"}, {"prompt": "two", "custom_id": "x", "max_tokens": 8,
                                                        "response_format": {"type": "json_object"}})
    one, two = read(f, d).items
    assert one.custom_id == "line-1" and one.kind == "chat"
    assert one.body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one"}]
    r = parse(one)
    assert (r.sampling.temperature, r.max_tokens, r.seed, r.stop) == (0.0, 64, 7, ("\n\n",))
    assert two.custom_id == "x" and parse(two).max_tokens == 8 and parse(two).constraint.kind == "json_object"
    raw = read(lines(tmp_path / "r.jsonl", {"prompt": "Once"}), Defaults(raw=True)).items[0]
    assert raw.kind == "completion" and raw.body["prompt"] == "Once"


def test_a_text_file_is_one_prompt_a_line(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("first prompt\n\n  second {not json}\n")
    inputs = read(f, Defaults())
    assert inputs.mode == "text"
    assert [(i.custom_id, i.body["messages"][-1]["content"]) for i in inputs.items] == [
        ("line-1", "first prompt"), ("line-3", "  second {not json}")]


@pytest.mark.parametrize("objs,needles", [
    ([req("a"), req("a")], ["in.jsonl:2", "'a'", "in.jsonl:1"]),
    ([req("a"), "{\"custom_id\": \"b\", "], ["in.jsonl:2", "not a JSON object", "invalid JSON"]),
    ([req("a"), "[1, 2]"], ["in.jsonl:2", "a JSON list"]),
    ([{"url": "/v1/completions", "body": {}}], ["in.jsonl:1", "no 'custom_id'"]),
    ([{**req("a"), "custom_id": 5}], ["in.jsonl:1", "custom_id"]),
    ([{**req("a"), "url": "/v1/embeddings"}], ["in.jsonl:1", "/v1/embeddings", "/v1/chat/completions"]),
    ([{**req("a"), "method": "GET"}], ["in.jsonl:1", "POST"]),
    ([{**req("a"), "body": "hi"}], ["in.jsonl:1", "'body'"]),
    ([req("a"), {"messages": []}], ["in.jsonl:2", "neither 'body' nor 'prompt'"]),
    ([{"prompt": ""}], ["in.jsonl:1", "'prompt'"]),
    ([{"prompt": "a", "custom_id": "line-2"}, {"prompt": "b"}], ["in.jsonl:2", "'line-2'"]),
    (["{\"custom_id\": \"a\", ", req("b")], ["in.jsonl:1", "invalid JSON"]),  # not taken for a prompt text
    (['{"prompt": "x", "custom_id": "a"}', '{"prompt": "\\ud800"}'], ["in.jsonl:2", "surrogate"]),
    (['{"custom_id": "a", "body": ' + "[" * 100000 + "]" * 100000 + "}"], ["in.jsonl:1", "nested too deeply"]),
])
def test_malformed_input_is_refused_with_its_line(tmp_path, objs, needles):
    refused(lines(tmp_path / "in.jsonl", *objs), *needles)


def test_unreadable_inputs_are_refused(tmp_path):
    refused(tmp_path / "absent.jsonl", "not found")
    (tmp_path / "empty.jsonl").write_text("\n \n")
    refused(tmp_path / "empty.jsonl", "no requests")
    (tmp_path / "bin.txt").write_bytes(b"ok\n\xff\xfe\n")
    refused(tmp_path / "bin.txt", "bin.txt:2", "UTF-8")


def test_a_folder_is_one_prompt_a_file(tmp_path):
    (tmp_path / "b.md").write_text("Outline B")
    (tmp_path / "a.txt").write_text("Outline A")
    (tmp_path / "a.out.txt").write_text("an earlier answer, not a prompt")
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / "sub").mkdir()
    inputs = read(tmp_path, Defaults())
    assert inputs.mode == "folder" and [i.custom_id for i in inputs.items] == ["a.txt", "b.md"]
    a = inputs.items[0]
    assert answer_path(a, None) == tmp_path / "a.out.txt"
    assert answer_path(a, tmp_path / "drafts") == tmp_path / "drafts" / "a.txt"
    (tmp_path / "c.md").write_text("  \n")
    refused(tmp_path, "c.md", "empty")


def test_folder_output_checks(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(SpecError, match="own folder"):
        check_folder_output(tmp_path / "in", tmp_path / "in")
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match="is a file"):
        check_folder_output(tmp_path / "file", tmp_path / "in")
    check_folder_output(tmp_path / "out" / "deeper", tmp_path / "in")
    assert (tmp_path / "out" / "deeper").is_dir()


def test_answer_lines_are_openais_batch_output():
    ok = answer_line("a", 200, {"id": "chatcmpl-1", "choices": []})
    assert ok["custom_id"] == "a" and ok["id"].startswith("batch_req_") and ok["error"] is None
    assert ok["response"] == {"status_code": 200, "request_id": "chatcmpl-1", "body": {"id": "chatcmpl-1",
                                                                                       "choices": []}}
    bad = answer_line("b", 400, {"error": {"message": "too long", "type": "invalid_request_error"}})
    assert bad["response"]["status_code"] == 400
    assert bad["error"] == {"code": "invalid_request_error", "message": "too long"}


def test_the_log_appends_and_resumes(tmp_path):
    path = tmp_path / "out.jsonl"
    log = AnswerLog(path)
    assert log.answered == {}
    log.write(answer_line("a", 200, {"id": "1"}))
    log.write(answer_line("b", 400, {"error": {"message": "no"}}))
    log.close()
    again = AnswerLog(path)
    assert again.answered == {"a": True, "b": False} and not again.repaired
    again.write(answer_line("c", 200, {"id": "3"}))
    again.close()
    assert [json.loads(l)["custom_id"] for l in path.read_text().splitlines()] == ["a", "b", "c"]


def test_a_line_cut_short_by_a_kill_is_dropped(tmp_path):
    path = tmp_path / "out.jsonl"
    whole = json.dumps(answer_line("a", 200, {"id": "1"})) + "\n"
    path.write_text(whole + '{"id": "batch_req_x", "custom_id": "b", "resp')
    log = AnswerLog(path)
    assert log.answered == {"a": True} and log.repaired
    log.write(answer_line("b", 200, {"id": "2"}))
    log.close()
    assert [json.loads(l)["custom_id"] for l in path.read_text().splitlines()] == ["a", "b"]


def test_a_whole_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text(json.dumps(answer_line("a", 200, {"id": "1"})))
    log = AnswerLog(path)
    assert log.answered == {"a": True} and not log.repaired
    log.write(answer_line("b", 200, {"id": "2"}))
    log.close()
    assert [json.loads(l)["custom_id"] for l in path.read_text().splitlines()] == ["a", "b"]


def test_a_file_that_is_not_answers_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes\nmore notes\n")
    with pytest.raises(SpecError, match=r"notes.txt:1 is not an answer line"):
        AnswerLog(path)
    assert path.read_text() == "my notes\nmore notes\n"  # nothing lost
    with pytest.raises(SpecError, match="directory"):
        AnswerLog(tmp_path)


def test_ordered_holds_answers_until_those_before_are_written():
    out = []
    o = Ordered(["a", "b", "c", "d"], out.append)
    o.put("c", "C")
    o.put("b", "B")
    assert out == [] and o.held == 2
    o.put("a", "A")
    assert out == ["A", "B", "C"]
    o.skip("d")
    o2 = Ordered(["a", "b", "c"], out.append)
    o2.put("c", "C2")
    o2.skip("a")        # abandoned: what follows it goes on without it
    assert out[-1:] == ["C"] and o2.held == 1
    o2.skip("b")
    assert out[-1] == "C2" and o2.held == 0


def test_atomic_write_leaves_no_temporary(tmp_path):
    p = tmp_path / "a.md"
    write_atomically(p, "text")
    assert p.read_text() == "text" and [x.name for x in tmp_path.iterdir()] == ["a.md"]


def test_refusals_come_before_any_model_loads(tmp_path):
    """The command's own checks: one line, exit 1, no traceback, and no model
    (the unit tier has llama.cpp blocked: loading one would fail otherwise)."""
    f = lines(tmp_path / "in.jsonl", req("a"), req("a"))
    out = tmp_path / "out.jsonl"
    for args, needle in [([str(f)], "was already used"),
                         ([str(lines(tmp_path / "ok.jsonl", req("a"))), "--json"], "--json"),
                         ([str(f), "-o", str(f)], "was already used"),
                         ([str(lines(tmp_path / "ok.jsonl", req("a"))), "-o", str(tmp_path / "no" / "x")],
                          "cannot write")]:
        res = subprocess.run([sys.executable, "-m", "spec_cli", "batch", *args], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 1 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not out.exists()


def test_bench_batch_refuses_what_it_cannot_compare(tmp_path):
    f = lines(tmp_path / "in.jsonl", req("a"))
    for extra, needle in [(["--concurrency", "1,2"], "on its own"), (["--proposer", "oracle"], "oracle"),
                          (["--proposer", "ngram", "--rule", "residual"], "gumbel")]:
        res = subprocess.run([sys.executable, "-m", "spec_cli", "bench", "--batch", str(f), *extra],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 1 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_an_engine_failure_is_not_written_so_a_resume_retries_it(tmp_path):
    """A 5xx is the engine's failure, not the request's: no line (a resume runs
    it again); a 4xx is the request's own: its error line, skipped on resume."""
    from spec_cli.cli.batch import _Plan, _Sink
    from spec_cli.jobs.run import Answer, Stop
    from spec_cli.term.progress import BatchProgress

    f = lines(tmp_path / "in.jsonl", req("a"), req("b"))
    out = tmp_path / "out.jsonl"
    inputs = read(f, Defaults())
    plan = _Plan.make(f, inputs, out, ordered=False, as_json=False)
    sink = _Sink(plan, BatchProgress(2, quiet=True), Stop())
    a, b = inputs.items
    sink.answer(Answer(a, 500, {"error": {"message": "llama_decode failed", "type": "server_error"}}))
    sink.answer(Answer(b, 400, {"error": {"message": "bad field", "type": "invalid_request_error"}}))
    plan.close()
    assert (plan.tally["not_run"], plan.tally["failed"]) == (1, 1)
    assert AnswerLog(out).answered == {"b": False}


def test_the_sequences_a_batch_asks_for_are_lowered_to_what_memory_holds():
    from spec_cli.llama.memory import fit

    mib = 1 << 20
    assert fit(17, 160 * mib, 1500 * mib, None) == 17          # nothing known: as asked
    assert fit(17, 160 * mib, 1500 * mib, 24 << 30) == 17      # 24 GiB free: all of them
    assert fit(17, 160 * mib, 1500 * mib, 4 << 30) == 3        # 2 GiB for weights and caches: three
    assert fit(17, 160 * mib, 1500 * mib, 2 << 30) == 1        # not even one: one, as a single request would
    assert fit(17, 0, 1500 * mib, 2 << 30) == 17               # no attention layers read: as asked

