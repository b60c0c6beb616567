"""The simulated clock: its arithmetic, its profiles, what the policy does
on a GPU's clock, and a real generation charged by it."""

import pytest

from spec_cli.core.cost import CostModel
from helpers import Policy, plan
from spec_cli.errors import SpecError
from spec_cli.run.clock import Clock, load_clock, shipped

CPU = {1: 0.026, 2: 0.044, 4: 0.070, 8: 0.118, 17: 0.173}  # Qwen2.5-Coder 1.5B on this project's 2-core CPU


def test_the_gpu_profile_is_flat_to_16_rows_then_steeper():
    gpu = load_clock("gpu-70b")
    assert gpu.name == "gpu-70b" and {"gpu-70b", "measured"} <= set(shipped())
    assert gpu.verify_s(1) == pytest.approx(0.040)
    assert gpu.verify_s(16) == pytest.approx(0.040 * (1 + 0.03 * 15))
    assert gpu.verify_s(17) == pytest.approx(0.040 * (1 + 0.03 * 15 + 0.06))
    assert gpu.prefill_s(500) == pytest.approx(gpu.verify_s(17) + 483 * 0.0006)
    assert gpu.draft_per_token_s == pytest.approx(0.03 * 0.040)


def test_a_draft_model_step_is_its_catch_up_batch_then_one_row_a_token():
    gpu = load_clock("gpu-70b")
    d1 = 0.03 * 0.040
    assert gpu.draft_s(4, 1) == pytest.approx(4 * d1)
    assert gpu.draft_s(4, 10) == pytest.approx(0.03 * gpu.verify_s(10) + 3 * d1)
    assert gpu.draft_s(0, 0) == 0.0  # a lookup is free
    assert gpu.catch_up_s(2) == 0.0 and gpu.catch_up_s(100) == pytest.approx(0.03 * gpu.prefill_s(100))


def test_a_measured_clock_follows_the_probed_curve():
    clock = Clock.from_curves("measured", CPU, {1: 0.015, 17: 0.060})
    assert clock.verify_s(1) == pytest.approx(0.026) and clock.verify_s(3) == pytest.approx(0.057)
    assert clock.verify_s(34) == pytest.approx(0.173 * 2)  # past the curve: its widest batch's cost per row
    assert clock.draft_per_token_s == pytest.approx(0.015)
    wide = Clock.from_curves("measured", {1: 0.032, 17: 0.315, 33: 0.487, 65: 0.955}, None)
    assert wide.verify_s(33) == pytest.approx(0.487) and wide.verify_s(49) == pytest.approx(0.721)  # as far as probed
    assert wide.timings()[65] == pytest.approx(0.955)  # what the cost model starts from


def test_bad_profiles_say_what_is_wrong(tmp_path):
    with pytest.raises(SpecError, match="no clock profile 'tpu'"):
        load_clock("tpu")
    broken = tmp_path / "b.toml"
    broken.write_text("c1_ms = [")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_clock(str(broken))
    partial = tmp_path / "p.toml"
    partial.write_text("c1_ms = 10\n")
    with pytest.raises(SpecError, match="lacks slope"):
        load_clock(str(partial))
    with pytest.raises(SpecError, match="needs the loaded models"):
        load_clock("measured")


def _policy(timings, draft_s):
    return Policy(CostModel.from_timings(timings, 17), k_max=16, draft_s=draft_s)


def test_on_the_gpu_clock_the_policy_drafts_long_when_acceptance_is_high():
    gpu = load_clock("gpu-70b")
    on_gpu, on_cpu = _policy(gpu.timings(), {}), _policy(CPU, {})
    for p, c17 in ((on_gpu, gpu.verify_s(17)), (on_cpu, CPU[17])):
        for i in range(30):  # 90 % of the tokens accepted
            p.observe("prompt8", drafted=16, accepted=16 if i % 2 else 13, draft_s=0.0, verify_s=c17)
    assert plan(on_gpu, "prompt8", 16) >= 12
    # at 50 % a GPU still drafts, where this CPU's dear batches do not pay
    half_gpu, half_cpu = _policy(gpu.timings(), {}), _policy(CPU, {})
    for p, c in ((half_gpu, gpu.verify_s(5)), (half_cpu, 0.080)):
        for i in range(40):
            p.observe("prompt2", drafted=4, accepted=(0, 1, 2, 4)[i % 4], draft_s=0.0, verify_s=c)
    assert plan(half_gpu, "prompt2", 16) >= 2 and plan(half_cpu, "prompt2", 16) < plan(half_gpu, "prompt2", 16)
    # a 1B draft at 3 % of the target drafts there; the 0.5B at 60 % never pays on this CPU
    assert plan(_policy(gpu.timings(), {"draft": gpu.draft_per_token_s}), "draft", 16) >= 4
    assert plan(_policy(CPU, {"draft": 0.6 * CPU[1]}), "draft", 16) == 0


def test_a_generation_on_the_simulated_clock_is_charged_by_it(smollm_fast):
    from spec_cli.core.config import SamplingConfig
    from spec_cli.run.engine import GenConfig
    from spec_cli.run.runner import Pair
    from spec_cli.run.session import Session
    from spec_cli.run.suffix import Lookup

    gpu = load_clock("gpu-70b")
    smollm_fast.reset()
    prompt = smollm_fast.vocab.tokenize("one two three four five one two three four five one two three")
    steps = []
    out = Session(Pair(smollm_fast, None, None), prompt, GenConfig(SamplingConfig(), max_tokens=40, clock=gpu),
                  Lookup()).run(lambda step, stats: steps.append(step))
    assert out.stats.prefill_s == pytest.approx(gpu.prefill_s(len(prompt) - 1))
    for s in steps:  # the profile's device cost, and the host's time measured here on top
        assert s.host_s > 0
        assert s.verify_s == pytest.approx(gpu.verify_s(s.drafted + 1) + s.host_s - s.host_draft_s)
        assert s.draft_s == pytest.approx(s.host_draft_s)  # a lookup costs the device nothing
    assert out.stats.wall_s == pytest.approx(out.stats.prefill_s + sum(s.verify_s + s.draft_s for s in steps))
    assert out.stats.drafted > 0 and max(s.drafted for s in steps) > 6  # cheap batches: long drafts
