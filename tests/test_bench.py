"""`spec-cli bench` computes and reports correctly (speed itself is not
asserted: it is measured by bench, not by tests)."""

import json

import pytest

from spec_cli.run.bench import (DEFAULT_PROMPTS, NEAR_TIE, Run, Variant, add_ceiling_shares, load_prompts, problems,
                             summarise, variants_from)
from spec_cli.core.stats import Stats
from spec_cli.errors import SpecError

from conftest import PROMPTS
from test_cli import spec


def run(tokens, gen_s, *, draft_s=0.0, verify_s=None, drafted=0, accepted=0, per_position=(), wall_s=None,
        ttft_s=0.0, margins=()):
    """A made-up run: `gen_s` generating after `wall_s - gen_s` reading the prompt."""
    wall_s = gen_s if wall_s is None else wall_s
    stats = Stats(tokens=len(list(tokens)), drafted=drafted, accepted=accepted, draft_s=draft_s,
                  verify_s=gen_s - draft_s if verify_s is None else verify_s, wall_s=wall_s,
                  prefill_s=wall_s - gen_s, ttft_s=ttft_s, per_position=[list(p) for p in per_position],
                  drafting_steps=per_position[0][0] if per_position else 0)
    return Run(list(tokens), stats, list(margins))


def test_summarise_speedups_shares_and_identity():
    base = [run(range(10), 1.0), run(range(10), 2.0), run(range(10), 1.0)]
    prop = [run(range(10), 0.5, draft_s=0.1, verify_s=0.35, drafted=8, accepted=6, per_position=[[2, 2], [2, 1]]),
            run(range(10), 2.0, draft_s=0.0, verify_s=1.9, drafted=0, accepted=0),
            run(range(10), 0.8, draft_s=0.1, verify_s=0.6, drafted=4, accepted=2, per_position=[[1, 1]])]
    s = summarise("f.jsonl", "hybrid", list(zip(base, prop)), coupled=True)
    assert s["speedup_median"] == pytest.approx(1.25)
    assert s["speedup_min"] == pytest.approx(1.0) and s["speedup_max"] == pytest.approx(2.0)
    assert s["acceptance_rate"] == pytest.approx(8 / 12)
    assert s["mean_accepted"] == pytest.approx(8 / 3)  # over the 3 steps that drafted
    assert s["per_position"] == [pytest.approx(1.0), pytest.approx(0.5)]
    assert s["tokens_per_s"] == pytest.approx(30 / 3.3)
    assert s["overhead_share"] == pytest.approx((3.3 - 0.2 - 2.85) / 3.3)
    assert s["identical"] is True and s["agreement"] == 1.0 and s["max_divergence_margin"] == 0.0


def test_end_to_end_speedup_counts_the_prompt_and_the_draft_catch_up():
    # the target alone: 1 s reading the prompt, 2 s generating; the proposer
    # generates faster (1.5 s) but its draft read the prompt too (+1 s)
    base = run(range(30), 2.0, wall_s=3.0, ttft_s=1.1)
    prop = run(range(30), 1.5, wall_s=3.5, ttft_s=2.0)
    s = summarise("f", "hybrid", [(base, prop)], coupled=True)
    assert s["speedup_median"] == pytest.approx(2.0 / 1.5)       # generation only: faster
    assert s["speedup_e2e_median"] == pytest.approx(3.0 / 3.5)   # what the user waits: slower
    assert s["ttft_s"] == pytest.approx(2.0) and s["baseline_ttft_s"] == pytest.approx(1.1)


def test_summarise_flags_a_different_output_and_its_margin():
    base = run([1, 2, 3], 1.0, margins=[5.0, 0.3, 4.0])
    s = summarise("f", "ngram", [(base, run([1, 5, 3], 1.0)), (base, run([1, 9, 4], 1.0))], coupled=True)
    assert s["identical"] is False and s["agreement"] == 0.0
    assert s["max_divergence_margin"] == pytest.approx(0.3)  # both parted at the second token
    assert problems([s], deterministic=False) == []           # a near-tie: rounding
    assert problems([s], deterministic=True)                  # but never with --deterministic
    wide = summarise("f", "ngram", [(run([1, 2], 1.0, margins=[9.0, 1.0]), run([7, 2], 1.0))], coupled=True)
    assert wide["max_divergence_margin"] == 9.0 > NEAR_TIE and problems([wide], deterministic=False)
    residual = summarise("f", "ngram", [(run([1], 1.0), run([2], 1.0))], coupled=False)
    assert residual["identical"] is None and residual["agreement"] is None


def test_ceiling_share_is_the_share_of_the_oracle_gain():
    base = run(range(10), 1.0)
    sets = [summarise("f", "oracle", [(base, run(range(10), 0.5))], coupled=True),
            summarise("f", "hybrid", [(base, run(range(10), 0.8))], coupled=True),
            summarise("g", "hybrid", [(base, run(range(10), 0.8))], coupled=True)]
    add_ceiling_shares(sets)
    assert sets[0]["ceiling_share"] == pytest.approx(1.0)
    assert sets[1]["ceiling_share"] == pytest.approx(0.25 / 1.0)
    assert sets[2]["ceiling_share"] is None  # no oracle for that file


def test_variants():
    assert Variant.parse("draft@4") == Variant("draft", 4) and Variant("draft", 4).label == "draft@4"
    vs = variants_from(["hybrid", "none", "ngram"], "2,4")
    assert [v.label for v in vs] == ["hybrid", "ngram", "hybrid@2", "hybrid@4", "ngram@2", "ngram@4"]
    both = variants_from(["draft", "oracle"], None, ["gumbel", "residual"])
    assert [v.label for v in both] == ["draft/gumbel", "draft/residual", "oracle/gumbel", "oracle/residual"]
    with pytest.raises(SpecError):
        variants_from(["telepathy"], None)
    with pytest.raises(SpecError):
        variants_from(["hybrid"], "2,x")
    with pytest.raises(SpecError):
        Variant.parse("draft@x")


def test_prompt_files(tmp_path):
    assert len(load_prompts(DEFAULT_PROMPTS, None)) >= 6
    assert len(load_prompts(PROMPTS, 2)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "kind": "chat", "prompt": "x"}\n{"id": "b", "kind": "chat"}\n')
    with pytest.raises(SpecError, match=r"bad.jsonl:2"):
        load_prompts(bad, None)


def test_bench_runs_and_reports(smollm_path, spec_env, tmp_path):
    res = spec("bench", "--target", "smollm2-135m", "--draft", "smollm2-135m", "--ctx", "1024",
               "--prompts", str(PROMPTS), "--n-prompts", "2", "-n", "16",
               "--proposer", "ngram", "--proposer", "draft@2", "--proposer", "oracle", "--proposer", "ngram-oracle",
               "--deterministic", "--peer", "llama-cpp-python", "--json", "--html", str(tmp_path / "r.html"),
               env=spec_env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    page = (tmp_path / "r.html").read_text()  # the same result, drawn (test_report.py checks the drawing)
    assert json.loads(page.split('id="bench-data">')[1].split("</script>")[0].replace("<\\/", "</")) == out
    [peer] = out["peer"]  # llama-cpp-python's own loop on the same prompts
    assert peer["prompts"] == 2 and peer["peer_tokens_per_s"] > 0 and peer["vs_peer_median"] > 0
    assert out["machine"]["cores"] >= 1 and out["draft"] == "smollm2-135m"
    assert out["machine"]["sampling"].startswith("compiled")  # what makes the choices, in the header too
    assert out["mode"] == "deterministic" and out["rules"] == ["gumbel"] and out["simulated"] is False
    sets = {s["proposer"]: s for s in out["sets"]}
    assert all(s["agreement"] == 1.0 for s in sets.values())  # --deterministic: bit for bit
    assert sets["oracle"]["acceptance_rate"] == 1.0
    assert set(sets) == {"ngram", "draft@2", "oracle", "ngram-oracle"}
    assert sets["ngram-oracle"]["acceptance_rate"] in (0.0, 1.0)  # the lookup's drafts, cut to what will be kept
    for s in sets.values():
        assert s["file"] == str(PROMPTS) and s["prompts"] == 2
        assert s["identical"] is True
        assert 0 < s["speedup_min"] <= s["speedup_median"] <= s["speedup_max"]
        assert 0 <= s["overhead_share"] < 1 and s["tokens_per_s"] > 0
        assert s["vs_peer_median"] > 0 and s["host_ms_per_step"] > 0
    assert sets["draft@2"]["acceptance_rate"] == 1.0  # a model drafting for itself
    assert sets["draft@2"]["per_position"] == [1.0, 1.0]
    assert sum(sets["draft@2"]["accepted_hist"]) > 0 and len(sets["ngram"]["per_prompt_tokens_per_s"]) == 2


def test_bench_table_on_stderr(smollm_path, spec_env):
    res = spec("bench", "--target", "smollm2-135m", "--ctx", "1024", "--n-prompts", "1", "-n", "8",
               "--proposer", "ngram", env=spec_env)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "" and "speedup" in res.stderr and "bench.jsonl" in res.stderr


def test_bench_on_a_simulated_clock_says_so(smollm_path, spec_env):
    res = spec("bench", "--target", "smollm2-135m", "--ctx", "1024", "--prompts", str(PROMPTS), "--n-prompts", "1",
               "-n", "24", "--proposer", "ngram", "--proposer", "oracle", "--clock", "gpu-70b", "--json",
               env=spec_env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["simulated"] is True and out["clock"] == "gpu-70b"
    assert out["batch_curve_ms"]["1"] == 40.0 and out["draft_ms_per_token"] == 1.2
    sets = {s["proposer"]: s for s in out["sets"]}
    assert sets["oracle"]["by_source"]["oracle"]["acceptance"] == 1.0
    # the target alone at 40 ms a token on the profile's clock, plus the host's time measured
    # here: 25 tok/s less what the host costs, whatever else this machine does
    host_ms = sets["oracle"]["baseline_host_ms_per_step"]
    assert 0 < host_ms < 40
    assert sets["oracle"]["baseline_tokens_per_s"] == pytest.approx(1000 / (40.0 + host_ms), rel=0.01)
    bad = spec("bench", "--target", "smollm2-135m", "--proposer", "ngram", "--clock", "tpu", env=spec_env)
    assert bad.returncode == 1 and "no clock profile 'tpu'" in bad.stderr and "Traceback" not in bad.stderr
    mixed = spec("bench", "--target", "smollm2-135m", "--proposer", "ngram", "--clock", "gpu-70b",
                 "--peer", "llama-cpp-python", env=spec_env)
    assert mixed.returncode == 1 and "cannot be compared" in mixed.stderr and "Traceback" not in mixed.stderr


def test_bench_concurrency_on_a_simulated_clock(smollm_path, spec_env):
    """bench --concurrency: each proposer beside the target alone at each C,
    every request checked against the target alone's tokens."""
    res = spec("bench", "--target", "smollm2-135m", "--draft", "smollm2-135m", "--ctx", "1024",
               "--prompts", str(PROMPTS), "--n-prompts", "4", "-n", "24", "--concurrency", "1,3",
               "--clock", "gpu-70b", "--json", env=spec_env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["kind"] == "concurrency" and out["simulated"] is True
    rows = {(r["concurrency"], r["proposer"]): r for r in out["rows"]}
    assert set(rows) == {(1, "none"), (1, "hybrid"), (3, "none"), (3, "hybrid")}
    for r in rows.values():
        assert r["requests"] == 4 and 0 < r["tokens"] <= 96 and r["tok_s"] > 0
        assert r["max_divergence_margin"] is None or r["max_divergence_margin"] <= NEAR_TIE
    assert rows[(3, "none")]["rows_per_round"] > rows[(1, "none")]["rows_per_round"]  # they shared rounds
    assert rows[(1, "none")]["vs_none"] == 1.0 and rows[(3, "hybrid")]["drafted"] > 0


SCHEMAS = [{"id": "point", "schema": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                                      "required": ["x", "y"], "additionalProperties": False}},
           {"id": "yes-no", "prompt": "Is water wet?", "grammar": 'root ::= "yes" | "no"'},
           {"id": "unique", "schema": {"type": "array", "uniqueItems": True}}]  # strict: refused


def test_prompt_files_with_schemas_and_grammars(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in SCHEMAS))
    point, yes_no, _ = load_prompts(path, None)
    assert point["kind"] == "chat" and '"x"' in point["prompt"] and point["schema"]["required"] == ["x", "y"]
    assert yes_no["prompt"] == "Is water wet?" and yes_no["grammar"] and yes_no["schema"] is None
    path.write_text('{"id": "g", "prompt": "x", "grammar": 5}\n')
    with pytest.raises(SpecError, match="'grammar' must be"):
        load_prompts(path, None)


def test_bench_under_schemas_reports_validity_and_what_it_refused(smollm_path, spec_env, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in SCHEMAS))
    res = spec("bench", "--target", "smollm2-135m", "--draft", "smollm2-135m", "--ctx", "1024", "--prompts",
               str(path), "-n", "40", "--proposer", "hybrid", "--proposer", "oracle", "--json", env=spec_env)
    assert res.returncode == 0, res.stderr
    sets = {s["proposer"]: s for s in json.loads(res.stdout)["sets"]}
    for s in sets.values():
        assert s["compiled"] == 2 and [r["id"] for r in s["refused"]] == ["unique"]
        assert "uniqueItems" in s["refused"][0]["why"]
        assert s["parses"] == s["validates"] == s["constrained"] and s["prompts"] == 2
        assert s["mask_ms_per_token"] > 0
    assert "grammar" in sets["hybrid"]["by_source"]  # the schema's forced tokens drafted
    assert sets["hybrid"]["agreement"] == 1.0 or sets["hybrid"]["max_divergence_margin"] <= NEAR_TIE
