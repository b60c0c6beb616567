"""bench's HTML report: every number drawn is the JSON's, the JSON rides
along, and `spec-cli report` refuses what is no bench result."""

import json
import re
from html.parser import HTMLParser

from test_cli import assert_clean_error, spec


def _result() -> dict:
    def one(file, proposer, e2e, per_position, hist, speeds):
        return {"file": file, "proposer": proposer, "prompts": len(speeds), "speedup_e2e_median": e2e,
                "speedup_e2e_min": e2e - 0.1, "speedup_e2e_max": e2e + 0.2, "speedup_median": e2e + 0.05,
                "tokens_per_s": 20.0 * e2e, "baseline_tokens_per_s": 20.0, "acceptance_rate": 0.7,
                "mean_accepted": 2.5, "per_position": per_position, "accepted_hist": hist,
                "per_prompt_tokens_per_s": speeds, "per_prompt_baseline_tokens_per_s": [20.0] * len(speeds),
                "ceiling_share": 0.5, "agreement": 1.0}
    return {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "mode": "default", "clock": "real",
            "rules": ["gumbel"], "temperature": 0.0, "max_tokens": 64, "seed": 0,
            "machine": {"cpu": "a CPU </script><b>", "cores": 2, "llama_cpp_python": "0.3.36"},
            "sets": [one("a/code-edit.jsonl", "hybrid", 1.43, [0.9, 0.8, 0.5], [1, 2, 3, 4], [30.5, 27.1]),
                     one("a/code-edit.jsonl", "oracle", 2.2, [1.0, 1.0], [0, 0, 5], [44.0, 43.0]),
                     one("a/mt-bench.jsonl", "hybrid", 1.05, [0.6], [3, 1], [21.0])]}


class _Marks(HTMLParser):
    def __init__(self):
        super().__init__()
        self.chart, self.marks, self.script, self.data = None, [], False, ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.chart = a.get("data-chart")
        elif tag in ("rect", "line") and "data-value" in a:
            self.marks.append((self.chart, tag, a.get("class"), a))
        elif tag == "script" and a.get("id") == "bench-data":
            self.script = True

    def handle_data(self, data):
        if self.script:
            self.data += data

    def handle_endtag(self, tag):
        self.script = self.script and tag != "script"


def test_the_report_draws_the_jsons_numbers():
    from spec_cli.term.report import render

    result = _result()
    page = render(result)
    p = _Marks()
    p.feed(page)
    assert json.loads(p.data) == result  # the JSON rides along, whole
    assert "<b>" not in page.split('id="bench-data"')[0]  # text is escaped
    by = lambda chart, cls="bar": [a for c, _, k, a in p.marks if c == chart and k == cls]  # noqa: E731
    speed = by("speedup")
    assert [(a["data-set"], a["data-proposer"], float(a["data-value"])) for a in speed] == [
        ("code-edit", "hybrid", 1.43), ("mt-bench", "hybrid", 1.05)]  # the oracle is the tick, not a bar
    assert [float(a["data-value"]) for a in by("speedup", "ceiling")] == [2.2]
    assert [float(a["data-value"]) for a in by("speedup", "baseline")] == [1.0]
    assert [float(a["data-value"]) for a in by("per-position")] == [0.9, 0.8, 0.5, 0.6]
    hist = by("accepted-length")
    assert [int(a["data-steps"]) for a in hist] == [1, 2, 3, 4, 3, 1]
    assert [float(a["data-value"]) for a in hist] == [0.1, 0.2, 0.3, 0.4, 0.75, 0.25]
    prompts = by("per-prompt")
    assert [float(a["data-value"]) for a in prompts] == [20.0, 20.0, 30.5, 27.1, 44.0, 43.0, 20.0, 21.0]
    assert re.search(r"1\.43× \(1\.33–1\.63\)", page)  # the table


def test_report_command(tmp_path):
    good = tmp_path / "bench.json"
    good.write_text(json.dumps(_result()))
    res = spec("report", str(good), "-o", str(tmp_path / "out.html"))
    assert res.returncode == 0, res.stderr
    assert 'id="bench-data"' in (tmp_path / "out.html").read_text()
    assert_clean_error(spec("report", str(tmp_path / "nothing.json")), "not found")
    bad = tmp_path / "bad.json"
    bad.write_text('{"sets": 3}')
    assert_clean_error(spec("report", str(bad)), "not a bench result", "bench --json")
