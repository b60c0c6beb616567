"""The load-time probe's self-checks, on made-up timings (pure logic: the
clock is replaced; the real probe runs in every test that loads a pair)."""

import json

import pytest

from spec_cli.llama import probe


class FakeModel:
    """What probe.load touches of a Model, and nothing else."""

    deterministic = False
    tokens: list = []

    def __init__(self):
        self.curve = self.verify_cap = self.costs = None

    def fingerprint(self):
        return "fake.gguf|fast"


def timings(c1, c4, *, spread=0.0):
    """Three rounds of c(n) for the probe's sizes: linear between c(1) and
    c(4), then on at the same slope; `spread` makes the rounds disagree."""
    def curve(n):
        return c1 + (c4 - c1) * (n - 1) / 3
    return lambda model, sizes=probe.SIZES, **kw: {
        n: [curve(n) * (1 + spread * r) for r in (0, 1, 2)] for n in sizes}


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "spec-cli" / "probe.json"


def test_a_busy_probe_is_used_but_never_saved(state, monkeypatch):
    monkeypatch.setattr(probe, "time_sizes", timings(0.29, 0.53, spread=0.5))
    m = FakeModel()
    got = probe.load(m)
    assert not got.clean and m.curve[1] == pytest.approx(0.29 * 1.5)  # used for this run (the median)
    assert not state.exists()


def test_a_clean_probe_is_saved_and_recalled(state, monkeypatch):
    monkeypatch.setattr(probe, "time_sizes", timings(0.025, 0.078))
    probe.load(FakeModel())
    assert json.loads(state.read_text())["fake.gguf|fast"]["curve"]["1"] == pytest.approx(0.025)
    monkeypatch.setattr(probe, "time_sizes", timings(0.026, 0.080))  # the same machine, a little noise
    m = FakeModel()
    assert probe.load(m).curve[1] == pytest.approx(0.025)  # the saved one


@pytest.mark.parametrize("now, why", [((0.025, 0.078), "the machine is quicker now: that probe saw it busy"),
                                      ((0.290, 0.900), "the curve's shape changed")])
def test_a_saved_probe_that_no_longer_fits_is_measured_again(state, monkeypatch, now, why):
    state.parent.mkdir(parents=True)
    poisoned = {"1": 0.290, "2": 0.397, "3": 0.47, "4": 0.53, "6": 0.66, "8": 0.78, "12": 1.0, "17": 1.25}
    state.write_text(json.dumps({"fake.gguf|fast": {"curve": poisoned, "verify_cap": None}}))
    monkeypatch.setattr(probe, "time_sizes", timings(*now))
    m = FakeModel()
    probe.load(m)
    assert m.curve[1] == pytest.approx(now[0]), why
    assert json.loads(state.read_text())["fake.gguf|fast"]["curve"]["1"] == pytest.approx(now[0])


def test_a_noisy_look_keeps_the_saved_probe(state, monkeypatch):
    state.parent.mkdir(parents=True)
    saved = {"1": 0.025, "4": 0.078}
    state.write_text(json.dumps({"fake.gguf|fast": {"curve": saved, "verify_cap": None}}))
    monkeypatch.setattr(probe, "time_sizes", timings(0.05, 0.3, spread=0.6))  # busy right now
    m = FakeModel()
    probe.load(m)
    assert m.curve == {1: 0.025, 4: 0.078}
