"""What batches cost, recalled rather than re-probed: pure logic on a
stand-in model (the clock is replaced; real loads happen in every test that
loads a pair), plus one real first load bounded by its budget."""

import json
import os
import random

import pytest

from spec_cli.core.cost import CostModel, expected_tokens
from spec_cli.llama import probe


class FakeModel:
    """What probe.load and probe.remember touch of a Model, and nothing else."""

    deterministic = False
    tokens: list = []

    def __init__(self):
        self.curve = self.verify_cap = self.costs = None

    def fingerprint(self):
        return "fake.gguf|fast"


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "spec-cli" / "costs.json"


def linear(c1, c4):
    return lambda model, sizes=probe.SIZES, **kw: {n: [c1 + (c4 - c1) * (n - 1) / 3] for n in sizes}


def never(*a, **kw):
    raise AssertionError("a saved curve must not be timed again")


def test_a_first_load_times_once_and_saves(state, monkeypatch):
    monkeypatch.setattr(probe, "time_sizes", linear(0.025, 0.078))
    got = probe.load(FakeModel())
    assert not got.learned and got.curve[1] == pytest.approx(0.025)
    assert json.loads(state.read_text())["fake.gguf|fast"]["curve"]["4"] == pytest.approx(0.078)


def test_a_saved_curve_is_recalled_without_timing_even_if_the_machine_was_noisy(state, monkeypatch):
    state.parent.mkdir(parents=True)
    noisy = {"1": 0.290, "2": 0.2, "4": 0.39}  # a busy spell left this: it is averaged later, never re-probed
    state.write_text(json.dumps({"fake.gguf|fast": {"curve": noisy, "verify_cap": None}}))
    monkeypatch.setattr(probe, "time_sizes", never)
    m = FakeModel()
    assert probe.load(m).learned and m.curve == {1: 0.290, 2: 0.2, 4: 0.39}


def test_a_remembered_size_dearer_than_two_batches_that_make_it_up_is_read_at_their_cost(state, monkeypatch):
    """What an older spec-cli left in costs.json after a day of runs: c(17)
    fifty times c(8).  Read as it is, the policy never drafts that long
    again, so never measures it again."""
    state.parent.mkdir(parents=True)
    curve = {str(n): 0.07 + 0.03 * (n - 1) for n in range(1, 13)} | {"13": 2.3, "16": 4.0, "17": 21.0}
    state.write_text(json.dumps({"fake.gguf|fast": {"curve": curve, "verify_cap": None}}))
    monkeypatch.setattr(probe, "time_sizes", never)
    m = FakeModel()
    probe.load(m)
    assert m.curve[12] == pytest.approx(0.07 + 0.03 * 11)  # within the bound: as saved
    assert m.curve[13] == pytest.approx(m.curve[12] + m.curve[1])
    assert m.curve[17] <= m.curve[8] + m.curve[9] and m.curve[17] < 1.0


def test_what_the_steps_taught_is_kept_for_the_next_run(state, monkeypatch):
    monkeypatch.setattr(probe, "time_sizes", linear(0.025, 0.078))
    m = FakeModel()
    probe.load(m)
    m.costs = CostModel.from_timings(m.curve, 17)
    for _ in range(30):  # the real steps say single tokens take 40 ms here
        m.costs.observe_verify(1, 0.040)
    probe.remember(m)
    monkeypatch.setattr(probe, "time_sizes", never)
    again = FakeModel()
    probe.load(again)
    assert again.curve[1] == pytest.approx(0.040, rel=0.02)
    assert again.curve[4] > again.curve[1] and len(again.curve) == 17


def _session(m, prior, machine, rng, steps=400):
    """A run of a policy that drafts the length its curve says is best (a
    lookup accepted at 0.5 a token: it never takes a plain step), on
    `machine` (true seconds a batch at a step, slowed by one-sided noise),
    then what `remember` saves."""
    m.curve = prior
    m.costs = CostModel.from_timings(prior, 17)
    for step in range(steps):
        k = max(range(17), key=lambda k: expected_tokens([0.5] * k) / m.costs.c(k + 1))
        m.costs.observe_verify(k + 1, machine(step, k + 1) * (1 + abs(rng.gauss(0, 0.1))))
    probe.remember(m)
    return json.loads(probe.state_file().read_text())["fake.gguf|fast"]["curve"]


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_sizes_a_run_never_measures_do_not_grow_from_run_to_run(state, seed):
    """A size a run never measures (here a single token: the lookup always
    drafts) must not carry each run's pace into the next: saved at the pace
    a run ended with, it grew 11-14 times over 30 runs with these seeds
    (noise only ever slows a batch, and a size that looks dear is never
    tried again)."""
    rng = random.Random(seed)
    machine = lambda n: 0.0735 * (1 + 0.4 * (n - 1) ** 0.8)
    m = FakeModel()
    prior = {n: machine(n) * rng.uniform(0.9, 1.3) for n in range(1, 18)}
    for run in range(30):
        busy = run % 3 == 0  # every third run ends beside another process
        saved = _session(m, prior, (lambda step, n: machine(n) * (1.8 if busy and step >= 300 else 1.0)), rng)
        prior = {int(n): s for n, s in saved.items()}
    assert max(prior[n] / machine(n) for n in range(1, 18)) < 3.0, prior


@pytest.mark.parametrize("text", ["{not json", "[]", '{"fake.gguf|fast": {"curve": {"1": -1}}}'])
def test_a_broken_state_file_is_timed_anew(state, monkeypatch, text):
    state.parent.mkdir(parents=True)
    state.write_text(text)
    monkeypatch.setattr(probe, "time_sizes", linear(0.025, 0.078))
    assert probe.load(FakeModel()).curve[1] == pytest.approx(0.025)


def test_a_real_first_load_stays_within_its_budget(smollm_fast, state):
    """The bounded timing on a real model: every size it reached, within the
    budget (one batch may finish past it), and nothing left in the cache."""
    import time

    t0 = time.perf_counter()
    curve = probe.first_curve(smollm_fast)
    spent = time.perf_counter() - t0
    assert 1 in curve and set(curve) <= set(probe.SIZES)
    assert spent < probe.BUDGET_S + 3 * max(curve.values()) + 0.2
    assert smollm_fast.tokens == []


def test_a_draft_that_could_never_pay_here_is_not_loaded(state, tmp_path):
    """Decided from what earlier runs remembered, before either model loads."""
    from spec_cli.llama.facts import LoadConfig, fingerprint

    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"GGUF" + bytes(1100))
    draft.write_bytes(b"GGUF" + bytes(450))
    cfg = LoadConfig(extra_bufts="all")
    assert probe.draft_cannot_pay(target, cfg, draft, cfg) is None  # nothing known yet: load it
    state.parent.mkdir(parents=True)

    def remember(curve):
        state.write_text(json.dumps({fingerprint(target, cfg): {"curve": curve, "verify_cap": None}}))

    remember({"1": 0.056, "2": 0.11, "4": 0.2, "8": 0.4, "17": 0.85})  # batches cost what their tokens do
    why = probe.draft_cannot_pay(target, cfg, draft, cfg)
    assert why and "0.41 of a target token" in why
    remember({"1": 0.072, "2": 0.105, "4": 0.12, "8": 0.215, "17": 0.33})  # memory-bound: batches are cheap
    assert probe.draft_cannot_pay(target, cfg, draft, cfg) is None
    # a remembered draft cost above its own batch of two is a stall, not a cost: not believed
    cheap = {"1": 0.072, "2": 0.105, "4": 0.12, "8": 0.215, "17": 0.33}
    state.write_text(json.dumps({fingerprint(target, cfg): {"curve": cheap, "verify_cap": None},
                                 fingerprint(draft, cfg): {"curve": {"1": 0.6, "2": 0.04}, "verify_cap": None}}))
    assert probe.draft_cannot_pay(target, cfg, draft, cfg) is None
    state.write_text(json.dumps({fingerprint(target, cfg): {"curve": cheap, "verify_cap": None},
                                 fingerprint(draft, cfg): {"curve": {"1": 0.07, "2": 0.1}, "verify_cap": None}}))
    assert "0.97 of a target token" in probe.draft_cannot_pay(target, cfg, draft, cfg)  # a plausible one is


def test_a_draft_that_pays_for_one_request_but_not_for_a_batch_of_many_is_not_loaded_for_the_batch(state, tmp_path):
    """`batch` keeps many requests running: on a CPU, where a batch of 2n
    rows costs nearly twice one of n, a draft model could not pay there
    even where it pays for a request alone; on a GPU's flat curve it can."""
    from spec_cli.llama.facts import LoadConfig, fingerprint

    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"GGUF" + bytes(1100))
    draft.write_bytes(b"GGUF" + bytes(450))
    cfg = LoadConfig(extra_bufts="all")
    state.parent.mkdir(parents=True)

    def remember(curve):
        state.write_text(json.dumps({fingerprint(target, cfg): {"curve": curve, "verify_cap": None}}))

    remember({"1": 0.075, "2": 0.098, "4": 0.093, "8": 0.165, "17": 0.21})  # this 2-core VM's, remembered
    assert probe.draft_cannot_pay(target, cfg, draft, cfg) is None  # alone it could pay
    assert probe.draft_cannot_pay(target, cfg, draft, cfg, together=2) is None
    why = probe.draft_cannot_pay(target, cfg, draft, cfg, together=16)
    assert why and "with 16 requests at once a target batch of 32 rows costs" in why
    remember({"1": 0.010, "2": 0.0101, "4": 0.0102, "8": 0.0104, "17": 0.0108})  # a GPU's
    assert probe.draft_cannot_pay(target, cfg, draft, cfg, together=16) is None


def test_the_command_leaves_out_a_draft_that_cannot_pay_and_says_so(smollm_path, spec_env, tmp_path):
    import subprocess
    import sys

    from spec_cli.llama.facts import LoadConfig, fingerprint

    state = tmp_path / "state"
    (state / "spec-cli").mkdir(parents=True)
    linear = {"1": 0.01, "2": 0.02, "4": 0.04, "8": 0.08, "17": 0.17}  # a batch costs what its tokens do
    threads = os.cpu_count() or 1  # given, so that the command's key is this one whatever else runs
    key = fingerprint(smollm_path, LoadConfig(n_threads=threads))
    (state / "spec-cli" / "costs.json").write_text(json.dumps({key: {"curve": linear, "verify_cap": None}}))
    env = dict(spec_env, XDG_STATE_HOME=str(state))
    args = [sys.executable, "-m", "spec_cli", "generate", "--raw", "-n", "8", "--target", str(smollm_path),
            "--draft", str(smollm_path), "--threads", str(threads), "The capital of France is"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    assert "is not loaded" in out.stderr and "lookup drafts alone" in out.stderr
    out = subprocess.run([*args, "--proposer", "draft"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "is not loaded" not in out.stderr, out.stderr


@pytest.mark.pair
def test_a_first_run_loads_the_draft_only_once_the_targets_first_costs_say_it_could_pay(target_path, draft_path,
                                                                                       state, monkeypatch):
    """Nothing known yet: the draft is not loaded beside the target but
    after its first costs are timed (here given, so both verdicts show),
    and left out where they say it could never pay."""
    from spec_cli.run.config import PairConfig
    from spec_cli.run.runner import load_pair

    cfg = PairConfig(target=str(target_path), draft=str(draft_path), proposer="hybrid", ctx=512)
    timings = {"compute-bound": {n: [0.01 * n] for n in probe.SIZES},  # a batch costs what its tokens do
               "batches nearly free": {n: [0.01 + 0.0002 * n] for n in probe.SIZES}}
    for name, curve in timings.items():
        if state.exists():
            state.unlink()
        monkeypatch.setattr(probe, "time_sizes", lambda model, sizes=probe.SIZES, curve=curve, **kw: curve)
        pair = load_pair(cfg)
        try:
            left_out = [n for n in pair.notes if "is not loaded" in n]
            if name == "compute-bound":
                assert pair.draft is None and not pair.draft_pays and left_out, pair.notes
            else:
                assert pair.draft is not None and pair.draft_pays and not left_out, pair.notes
        finally:
            pair.close()


@pytest.mark.pair
def test_a_draft_this_machine_cannot_pay_for_still_drafts_on_a_simulated_clock(target_path, draft_path,
                                                                              state, monkeypatch):
    """bench loads the draft even where this machine's costs say it could
    never pay; its hybrid is then the lookup alone on the real clock, but a
    simulated GPU prices the draft by its profile, so there it drafts."""
    from spec_cli.run.clock import load_clock
    from spec_cli.run.config import PairConfig
    from spec_cli.run.proposers import DraftModel, Hybrid
    from spec_cli.run.runner import load_pair
    from spec_cli.run.suffix import Lookup

    cfg = PairConfig(target=str(target_path), draft=str(draft_path), proposer="hybrid", ctx=512,
                     draft_if_it_pays=False)
    monkeypatch.setattr(probe, "time_sizes", lambda model, sizes=probe.SIZES, **kw: {n: [0.01 * n] for n in sizes})
    load_pair(cfg).close()  # a first run: both models' costs timed and kept (compute-bound)
    pair = load_pair(cfg)
    try:
        assert pair.draft is not None and not pair.draft_pays
        assert isinstance(pair.new_proposer(name="hybrid"), Lookup)
        on_gpu = pair.new_proposer(name="hybrid", clock=load_clock("gpu-70b"))
        assert isinstance(on_gpu, Hybrid) and isinstance(on_gpu.draft_model, DraftModel)
    finally:
        pair.close()


def test_a_registry_draft_that_cannot_pay_here_is_not_even_downloaded(smollm_path, spec_env, tmp_path):
    """Where the target's remembered costs say no draft model of that size
    could pay, the registry's draft is not fetched: the note says so, its
    size, what would make one pay, and how to fetch it anyway."""
    import subprocess
    import sys

    from spec_cli.llama.facts import LoadConfig, fingerprint

    state, cache = tmp_path / "state", tmp_path / "cache"
    (state / "spec-cli").mkdir(parents=True)
    linear = {"1": 0.01, "2": 0.02, "4": 0.04, "8": 0.08, "17": 0.17}  # a batch costs what its tokens do
    threads = os.cpu_count() or 1
    key = fingerprint(smollm_path, LoadConfig(n_threads=threads))
    (state / "spec-cli" / "costs.json").write_text(json.dumps({key: {"curve": linear, "verify_cap": None}}))
    registry = tmp_path / "models.toml"
    registry.write_text('[models."far-draft"]\nrepo = "nobody/far-draft-GGUF"\nfile = "far-draft.gguf"\n'
                        'family = "smollm2"\nparams = "40M"\n'
                        '[models."far-draft".mirror]\npackage = "far-draft-gguf"\nversion = "1.0"\n'
                        f'member = "far-draft.gguf"\nsha256 = "{"0" * 64}"\nsize = 50000000\n')
    env = dict(spec_env, XDG_STATE_HOME=str(state), SPEC_CLI_CACHE=str(cache), SPEC_CLI_MODELS=str(registry),
               HF_HUB_OFFLINE="1")
    args = [sys.executable, "-m", "spec_cli", "generate", "--raw", "-n", "8", "--target", str(smollm_path),
            "--draft", "far-draft", "--threads", str(threads), "The capital of France is"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    assert "far-draft is not downloaded (50 MB)" in out.stderr, out.stderr
    assert "whatever its size" in out.stderr and "spec-cli models pull far-draft" in out.stderr, out.stderr
    assert not (cache / "models" / "far-draft").exists()


def test_a_run_on_a_busy_machine_does_not_replace_the_quiet_curve(state, monkeypatch):
    """A run beside a build learned a token at 4.6x what the quiet machine
    showed (c(2) 1.5x c(1) then, against 1.9x quiet: a draft model that
    cannot pay here looked as if it could).  That is not kept; a run as
    quiet as the remembered one, or quieter, is."""
    monkeypatch.setattr(probe, "time_sizes", linear(0.032, 0.104))
    m = FakeModel()
    probe.load(m)
    quiet = json.loads(state.read_text())["fake.gguf|fast"]["curve"]
    m.curve = {1: 0.149, 2: 0.222, 4: 0.243}
    probe.remember(m)
    assert json.loads(state.read_text())["fake.gguf|fast"]["curve"] == quiet
    m.curve = {1: 0.030, 2: 0.057, 4: 0.100}
    probe.remember(m)
    assert json.loads(state.read_text())["fake.gguf|fast"]["curve"]["1"] == pytest.approx(0.030)


# this 2-core EPYC's probed curve: past 16 rows a row costs half what it does alone
EPYC = {1: 0.032, 2: 0.061, 4: 0.107, 8: 0.229, 16: 0.278, 17: 0.327, 33: 0.516, 65: 0.868}


def epyc(model, sizes=probe.SIZES, **kw):
    return {n: [EPYC[n]] for n in sizes}


def test_a_run_that_measured_a_single_token_and_one_long_batch_keeps_the_curve_between(state, monkeypatch):
    """A run that took plain steps quiet and one 20-token copy while a build
    ran beside it measured c(1) and c(21) only, c(21) at twice its cost.
    Remembered as it was (the line between them), every batch of 2 to 20
    cost as many single tokens, so the next runs on this machine never
    drafted anything that long or short again (code edits 0.997x the target
    alone, down from 1.66x).  Kept: c(21) raised by RISE at most, the sizes
    between held to the probe's shape."""
    monkeypatch.setattr(probe, "time_sizes", epyc)
    m = FakeModel()
    probe.load(m)
    m.costs = CostModel.from_timings(m.curve, 65)
    for _ in range(20):
        m.costs.observe_verify(1, 0.035)
    m.costs.observe_verify(21, 2 * m.costs.prior[20])
    probe.remember(m)
    saved = {int(n): s for n, s in json.loads(state.read_text())["fake.gguf|fast"]["curve"].items()}
    rise = probe.RISE * saved[1] / EPYC[1]  # c(1) rose: the machine may be slower
    assert saved[1] == pytest.approx(0.035, rel=0.05)
    assert all(saved[n] <= rise * m.costs.prior[n - 1] * 1.001 for n in range(2, 66))
    assert saved[4] < 3.5 * saved[1]  # not 4 singles
    assert all(saved[n] <= saved[n + 1] for n in range(1, 21))


def test_sizes_between_two_measured_ones_keep_the_shape_where_it_is_cheaper_than_the_line():
    """A GPU's batches cost about one token's up to 8 rows: a run that
    measured c(1) and c(65) alone priced 17 rows a quarter dearer on the line
    between them than its probe, so copies of 16 looked dearer than they are
    (a size priced too dear is never drafted, so never measured)."""
    gpu = CostModel.from_timings({1: 0.020, 8: 0.021, 17: 0.024, 33: 0.033, 65: 0.060}, 65)
    gpu.observe_verify(1, 0.020)
    gpu.observe_verify(65, 0.060)
    assert gpu.c(17) == pytest.approx(0.024, rel=0.02) and gpu.c(8) == pytest.approx(0.021, rel=0.02)
    assert gpu.remembered()[17] == pytest.approx(0.024, rel=0.02)


def test_a_busy_spell_in_the_middle_of_a_run_raises_the_curve_a_little_at_most(state, monkeypatch):
    """Its single tokens quiet, its long batches beside a build at twice
    their cost: the guard on c(1) let it through, and batches of 21 to 65
    were remembered at twice what the machine does quiet.  A run raises a
    size by RISE at most; a cheaper one is kept as it is."""
    monkeypatch.setattr(probe, "time_sizes", epyc)
    m = FakeModel()
    probe.load(m)
    m.curve = {**EPYC, 1: 0.031, 2: 0.058, 33: 2 * EPYC[33], 65: 2 * EPYC[65]}
    probe.remember(m)
    saved = {int(n): s for n, s in json.loads(state.read_text())["fake.gguf|fast"]["curve"].items()}
    assert saved[1] == pytest.approx(0.031) and saved[2] == pytest.approx(0.058)
    assert saved[33] == pytest.approx(probe.RISE * EPYC[33]) and saved[65] == pytest.approx(probe.RISE * EPYC[65])
