"""The cost model that turns drafting up, down, off and back on (pure)."""

from dataclasses import replace

import numpy as np
import pytest

from spec_cli.core.cost import CostModel, expected_tokens
from spec_cli.core.batching import Load
from spec_cli.core.policy import SHAPE_K
from helpers import Policy, plan, verify_greedy
from spec_cli.core.verify import verify
from spec_cli.run.proposers.base import Candidate

CPU = {1: 0.039, 2: 0.086, 3: 0.109, 4: 0.135, 5: 0.161, 6: 0.181, 7: 0.203}   # measured here
GPU = {1: 0.020, 2: 0.021, 4: 0.022, 8: 0.024, 16: 0.030}                    # batches nearly free


def test_expected_tokens():
    assert expected_tokens([]) == 1
    assert expected_tokens([1.0, 1.0]) == 3
    assert expected_tokens([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)


def test_cost_model_interpolates_and_extrapolates():
    cm = CostModel.from_timings({1: 1.0, 3: 3.0}, n_max=5)
    assert cm.verify_s[:3] == [1.0, 2.0, 3.0]
    assert cm.verify_s[3] > 3.0 and cm.verify_s[4] > cm.verify_s[3]


def test_a_slow_draft_model_is_never_used_nor_probed():
    policy = Policy(CostModel.from_timings(CPU, 7), k_max=6)
    policy.draft_s["draft"] = 0.020  # half the target's cost per token
    assert all(plan(policy, "draft", 6) == 0 for _ in range(500))


def test_a_free_draft_with_high_acceptance_drafts_long():
    policy = Policy(CostModel.from_timings(CPU, 7), k_max=6)
    for _ in range(30):
        policy.observe("ngram4", drafted=6, accepted=6, draft_s=0.0, verify_s=0.203)
    assert plan(policy, "ngram4", 6) == 6
    # one token does not pay on this CPU (a batch of 2 costs 2.2 single tokens), three do
    assert plan(policy, "ngram4", 1) == 0
    assert plan(policy, "ngram4", 3) == 3


def test_rejections_turn_drafting_off_and_probes_turn_it_back_on():
    policy = Policy(CostModel.from_timings(GPU, 17), k_max=8)
    policy.draft_s["draft"] = 0.002
    assert plan(policy, "draft", 8) > 0
    for _ in range(40):
        policy.observe("draft", drafted=4, accepted=0, draft_s=0.008, verify_s=0.022)
    plans = [plan(policy, "draft", 8) for _ in range(2 * policy.probe_every)]
    assert plans[0] == 0 and any(plans)  # off, with a probe after a while
    for _ in range(40):
        policy.observe("draft", drafted=8, accepted=8, draft_s=0.016, verify_s=0.024)
    assert plan(policy, "draft", 8) == 8


def test_probes_back_off_while_they_change_nothing():
    policy = Policy(CostModel.from_timings(GPU, 17), k_max=8, probe_every=4)
    policy.draft_s["draft"] = 0.002
    for _ in range(40):
        policy.observe("draft", drafted=4, accepted=0, draft_s=0.008, verify_s=0.022)
    probes = [i for i in range(200) if plan(policy, "draft", 8)]
    gaps = np.diff(probes)
    assert len(probes) >= 3 and all(b >= a for a, b in zip(gaps, gaps[1:])) and gaps[-1] > gaps[0]


def test_sizes_between_measured_ones_follow_the_line_between_them():
    cm = CostModel.from_timings({1: 0.05, 2: 0.16, 4: 0.38, 8: 0.81}, n_max=8)
    assert cm.c(3) == pytest.approx(0.27) and not cm.seen(3)
    cm.observe_verify(1, 0.05)
    cm.observe_verify(5, 0.10)
    assert cm.seen(3) and not cm.seen(6)
    assert cm.c(1) < cm.c(2) < cm.c(3) < cm.c(4) < cm.c(5) < 0.2  # between 1 and 5: the measured line
    # beyond the sizes measured: the prior's shape from the largest (a first
    # load extrapolates what it had no time to time; 5 measured at a fifth of
    # what it said makes 6 and 8 a fifth too)
    assert cm.c(6) == pytest.approx(0.10 * cm.prior[5] / cm.prior[4])
    assert cm.c(8) == pytest.approx(0.10 * 0.81 / cm.prior[4])


def test_a_size_measured_dearer_than_the_prior_raises_the_sizes_past_it():
    """The shape holds the other way too: a first load's curve that said a
    batch of 4 costs 2 singles, measured at 3, puts 8 at its share of that."""
    cm = CostModel.from_timings({1: 0.05, 2: 0.07, 4: 0.10, 8: 0.16}, n_max=8)
    for _ in range(20):
        cm.observe_verify(1, 0.05)
        cm.observe_verify(4, 0.15)
    assert cm.c(4) == pytest.approx(0.15, rel=0.05)
    assert cm.c(8) == pytest.approx(cm.c(4) * 0.16 / 0.10)


def test_a_curve_that_says_no_lookup_can_pay_is_put_to_the_test():
    """A first load's noisy curve (a batch of n dearer than n tokens) would
    keep a lookup from ever drafting; where the size was never measured the
    lookup looks anyway, and a cheap batch measured turns drafting on.  A
    look that confirms the curve is not repeated for that size."""
    noisy = {1: 0.055, 2: 0.162, 4: 0.379, 8: 0.814, 17: 1.79}
    policy = Policy(CostModel.from_timings(noisy, 17), k_max=16, probe_every=8)
    policy.observe("none", drafted=0, accepted=0, draft_s=0.0, verify_s=0.055)
    plans = [plan(policy, "ngram4", 8)]
    while plans[-1] == 0 and len(plans) < 12:
        plans.append(plan(policy, "ngram4", 8))
    assert plans[0] == 0 and plans[-1] == SHAPE_K
    assert policy.keep_going("ngram4", [1.0]) and not policy.keep_going("ngram4", [1.0] * SHAPE_K)  # not cut short
    policy.observe("ngram4", drafted=SHAPE_K, accepted=SHAPE_K, draft_s=0.0, verify_s=0.10)  # memory-bound
    assert plan(policy, "ngram4", SHAPE_K) == SHAPE_K
    # where the batch measured is as dear as the curve said, the look is not taken again
    policy = Policy(CostModel.from_timings(noisy, 17), k_max=16, probe_every=8)
    policy.observe("none", drafted=0, accepted=0, draft_s=0.0, verify_s=0.055)
    assert SHAPE_K in [plan(policy, "ngram4", 8) for _ in range(12)]
    policy.observe("ngram4", drafted=SHAPE_K, accepted=SHAPE_K, draft_s=0.0, verify_s=0.49)  # compute-bound
    assert not any(plan(policy, "ngram4", 8) for _ in range(500))
    # a draft model is not made to look (its catch-up and tokens cost): the curve decides
    policy = Policy(CostModel.from_timings(noisy, 17), k_max=16, probe_every=8)
    policy.draft_s["draft"] = 0.02
    assert not any(plan(policy, "draft", 8) for _ in range(200))


def test_a_lookup_that_pays_at_k_tries_wider_where_the_curve_is_unmeasured():
    """Drafts of one never measure a batch of four: now and then a lookup
    drafts up to 2k + 1, and a cheap batch measured there is kept."""
    noisy = {1: 0.055, 2: 0.075, 4: 0.379, 8: 0.814, 17: 1.79}  # a batch of 4 timed in a busy moment
    policy = Policy(CostModel.from_timings(noisy, 17), k_max=16)
    for _ in range(30):
        policy.observe("ngram4", drafted=1, accepted=1, draft_s=0.0, verify_s=0.075)
    plans = [plan(policy, "ngram4", 8) for _ in range(3 * policy.plain_every)]
    assert plans[0] == 1 and 3 in plans and set(plans) <= {0, 1, 3}
    wide = next(i for i, k in enumerate(plans) if k == 3)
    policy = Policy(CostModel.from_timings(noisy, 17), k_max=16)  # the draft is not cut short by keep_going
    for _ in range(30):
        policy.observe("ngram4", drafted=1, accepted=1, draft_s=0.0, verify_s=0.075)
    for _ in range(wide):
        plan(policy, "ngram4", 8)
    assert plan(policy, "ngram4", 8) == 3 and all(policy.keep_going("ngram4", [1.0] * i) for i in (1, 2))
    assert not policy.keep_going("ngram4", [1.0] * 3)
    policy.observe("ngram4", drafted=3, accepted=3, draft_s=0.0, verify_s=0.11)  # memory-bound after all
    assert plan(policy, "ngram4", 3) == 3


def test_keep_going_stops_on_low_confidence():
    policy = Policy(CostModel.from_timings(GPU, 17), k_max=8)
    policy.draft_s["draft"] = 0.002
    assert policy.keep_going("draft", [0.95, 0.9])
    assert not policy.keep_going("draft", [0.95, 0.02])
    assert not policy.keep_going("draft", [0.9] * 8)  # at k_max


def test_verify_greedy_is_verify_on_one_hot_rows():
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(0, 6))
        target = rng.integers(0, 4, size=k + 1)
        draft = [int(t) if rng.random() < 0.7 else int(rng.integers(0, 4)) for t in target[:k]]
        q = np.eye(4)[target]
        p = np.eye(4)[draft] if k else np.zeros((0, 4))
        assert verify_greedy(draft, target) == verify(draft, p, q, rng)


# -- a simulated clock: the policy against a machine it was not told about --

def simulate(policy, curve, *, steps, accept=0.5, draft_cost=0.0, source="draft", seed=0, k_max=8):
    """Run the policy for `steps` steps on a machine whose batch of n costs
    curve(n) seconds; each draft token is accepted with chance `accept`.
    Returns the k chosen at each step."""
    rng = np.random.default_rng(seed)
    ks = []
    for i in range(steps):
        k = plan(policy, source, k_max)
        acc = 0
        while acc < k and rng.random() < accept:
            acc += 1
        policy.observe(source if k else "none", drafted=k, accepted=acc, draft_s=k * draft_cost,
                       verify_s=curve(i, k + 1))
        ks.append(k)
    return ks


def quiet(i, n):  # this CPU, quiet: c(2)/c(1) = 1.8, about linear after
    return 0.052 * (1.0 + 0.8 * (n - 1))


def test_a_poisoned_probe_is_unlearned_within_a_few_dozen_steps():
    # probed while another process used the CPU: c(1) 290 ms, c(2) 397 ms (ratio 1.37)
    poisoned = {1: 0.290, 2: 0.397, 3: 0.50, 4: 0.60, 8: 1.0, 17: 1.9}
    policy = Policy(CostModel.from_timings(poisoned, 9), k_max=8)
    policy.draft_s["draft"] = 0.026  # the 0.5B draft: half the target per token
    assert plan(policy, "draft", 8) > 0  # the poisoned curve makes drafting look good
    ks = simulate(policy, quiet, steps=300, accept=0.5, draft_cost=0.026)
    assert sum(ks[48:]) <= 8, f"still drafting: {ks}"  # off within a few dozen steps, only rare probes after


def test_a_machine_that_slows_down_mid_run_is_followed():
    """A GPU-like curve where drafting a free proposer pays; then a second
    process makes batches dear (CPU-like): drafting stops; it goes away
    again: drafting comes back through probes."""
    gpu = {1: 0.020, 2: 0.021, 4: 0.022, 8: 0.024, 17: 0.030}
    policy = Policy(CostModel.from_timings(gpu, 9), k_max=8, probe_every=8)

    def machine(i, n):
        if 100 <= i < 300:
            return 0.060 * n  # busy: a batch of n costs n singles
        return gpu.get(n, 0.020 + 0.0006 * n)

    ks = simulate(policy, machine, steps=500, accept=0.5, source="ngram4")
    assert np.mean([k > 0 for k in ks[:100]]) > 0.8      # drafting while batches are cheap
    assert np.mean([k > 0 for k in ks[160:300]]) < 0.1   # off while they are dear
    assert np.mean([k > 0 for k in ks[420:]]) > 0.5      # back once the machine is quiet again


def test_the_safeguard_stops_drafting_that_loses_on_the_clock():
    """The model is told drafting pays (a curve that is wrong and never
    corrected: every batch looks the same size to it); the realised rate
    says otherwise, and drafting stops."""
    policy = Policy(CostModel.from_timings({1: 0.05, 17: 0.05}, 9), k_max=8, plain_every=4)
    policy.cost.observe_verify = lambda n, s: None  # a cost model that cannot learn
    ks = simulate(policy, quiet, steps=200, accept=0.3, source="ngram4")
    assert "ngram" in policy.stopped
    assert sum(k > 0 for k in ks[100:]) <= 4


def test_catch_up_is_charged_against_what_drafting_would_save():
    policy = Policy(CostModel.from_timings(GPU, 17), k_max=8)
    policy.draft_s["draft"] = 0.001
    assert plan(policy, "draft", 8, setup_s=0.1, load=Load(horizon=200)) > 0  # saves far more than 0.1 s over 200 tokens
    assert plan(policy, "draft", 8, setup_s=0.1, load=Load(horizon=3)) == 0   # three tokens to go: not worth the catch-up


# c(n) probed for Qwen2.5-Coder 1.5B Q4_K_M with llama.cpp's defaults on this project's CPU
CPU_FAST = {1: 0.0259, 2: 0.0443, 3: 0.0562, 4: 0.0712, 6: 0.1005, 8: 0.1196, 12: 0.1454, 17: 0.1667}


def test_lookup_priors_rise_once_the_first_token_holds_and_doubt_what_is_less_sure():
    from helpers import prior

    unique, multi, output, run = (prior(s, 8) for s in ("prompt4", "prompt-multi4", "output4", "prompt-run8"))
    assert unique[0] < unique[4]                  # a copy that started goes on
    assert multi[0] < unique[0]                   # a context seen often, its most frequent continuation
    assert all(o < u for o, u in zip(output, unique))   # the output repeats itself less surely
    assert min(run) == run[0] > unique[0]         # a copy followed for 8 tokens
    assert prior("prompt1", 8)[0] < prior("prompt2", 8)[0] < prior("prompt16", 8)[0]
    assert prior("draft", 3) == [0.8] * 3


def test_what_one_match_length_teaches_moves_the_others_of_its_origin():
    """A text that copies its prompt shows it on one match length; the
    others of the same origin believe it too, other origins do not."""
    policy = Policy(CostModel.from_timings(CPU_FAST, 17), k_max=16)
    assert plan(policy, "prompt2", 16) == 0        # a 2-token match alone: not worth a batch here
    for _ in range(4):
        policy.observe("prompt4", drafted=8, accepted=8, draft_s=0.0, verify_s=0.12)
    assert plan(policy, "prompt2", 16) > 0
    assert policy.chances("output2") == prior_of(policy, "output2")
    assert policy.chances("draft") == prior_of(policy, "draft")
    for _ in range(12):                           # ... and a text that does not, the other way
        policy.observe("prompt4", drafted=4, accepted=0, draft_s=0.0, verify_s=0.07)
    assert policy.chances("prompt8")[0] < prior_of(policy, "prompt8")[0]


def prior_of(policy, source):
    from helpers import prior
    return prior(source, policy.k_max)


def test_the_safeguard_judges_copies_apart_from_fresh_lookups():
    policy = Policy(CostModel.from_timings({1: 0.05, 17: 0.05}, 9), k_max=8, plain_every=4)
    policy.cost.observe_verify = lambda n, s: None  # a cost model that cannot learn
    simulate(policy, quiet, steps=200, accept=0.3, source="prompt4")
    assert "prompt" in policy.stopped and "prompt-run" not in policy.stopped
    assert plan(policy, "prompt-run8", 8) > 0


def test_a_look_that_costs_a_catch_up_must_be_able_to_pay_it_back():
    """The 0.5B draft at 59 % of the 1.5B target here: always accepted, 15
    tokens a step would save ~2 ms a token -- not twice its 0.6 s catch-up
    over 180 tokens, so it is never looked at; with nothing to catch up it is."""
    def probes(setup_s):
        policy = Policy(CostModel.from_timings(CPU_FAST, 17), k_max=16, probe_every=4)
        policy.draft_s["draft"] = 0.0152
        return sum(plan(policy, "draft", 16, setup_s=setup_s, load=Load(horizon=184)) > 0 for _ in range(64))
    assert probes(0.64) == 0
    assert probes(0.0) > 0


def test_the_safeguard_judges_before_plain_steps_come_against_the_cost_models_c1():
    """A short generation has few plain steps (one in plain_every while
    drafting): the bar is then c(1), which the steps' timings keep current."""
    policy = Policy(CostModel.from_timings(CPU, 17), k_max=8, plain_every=1000)
    for _ in range(10):  # each drafting step: 2 tokens in 4 target tokens' time
        policy.observe("draft", drafted=4, accepted=1, draft_s=0.05, verify_s=4 * CPU[1] - 0.05)
    assert "draft" in policy.stopped


def test_a_draft_model_that_could_never_pay_is_told_apart_from_one_that_could():
    from spec_cli.core.cost import can_pay
    linear = CostModel.from_timings({1: 0.056, 2: 0.11, 4: 0.2, 8: 0.4, 17: 0.85}, 17)  # compute-bound CPU
    memory = CostModel.from_timings({1: 0.072, 2: 0.105, 4: 0.12, 8: 0.215, 17: 0.33}, 17)  # memory-bound
    assert not can_pay(linear, 0.45 * 0.056, 16, margin=1.3)
    assert can_pay(memory, 0.35 * 0.072, 16, margin=1.3)
    assert can_pay(CostModel.from_timings(GPU, 17), 0.03 * GPU[1], 16, margin=1.3)


def test_could_pay_tells_whether_a_caught_up_draft_model_would_draft_alone_whatever_the_batch():
    """run/batch.py has the draft model read a new request's prompt beside
    the target only where, caught up, it could pay at all."""
    gpu = CostModel.from_timings(GPU, 17)
    policy = Policy(gpu, k_max=8, draft_s={"cheap": 0.05 * GPU[1], "slow": 1.5 * GPU[1]})
    assert policy.could_pay("cheap") and not policy.could_pay("slow")  # alone: the batch around it now does not count
    policy.stopped.add("cheap")  # the safeguard stopped it
    assert not policy.could_pay("cheap")


def test_could_pay_at_a_load_weighs_the_batch_and_a_catch_up_that_stalls_it():
    """Batch._follow asks whether a draft model would draft at the batch's
    size before it reads a request's text beside the target: on a CPU a
    draft model that pays alone does not beside seven requests drafting
    with theirs; on a GPU it does; and a catch-up that every request would
    wait for must be paid back over the tokens still to come."""
    from spec_cli.core.batching import Load

    cpu = CostModel.from_timings({n: 0.04 + 0.012 * (n - 1) for n in range(1, 130)}, 129)
    gpu = CostModel.from_timings({n: 0.020 + 0.0002 * n for n in range(1, 130)}, 129)
    for cost in (cpu, gpu):
        d = 0.1 * cost.c(1)
        policy = Policy(cost, k_max=8, draft_s={"draft": d})
        for _ in range(40):
            policy.observe("draft", drafted=8, accepted=6, draft_s=8 * d, verify_s=cost.c(9))
        rates = tuple(policy.chances("draft"))
        eight = Load(rows=7, tokens=7.0, others=7, shape=tuple((seq, 1) for seq in range(8)), seq=0,
                     following=tuple((seq, rates) for seq in range(1, 8)))
        assert policy.could_pay("draft")
        assert policy.could_pay("draft", eight, pooled=True) == (cost is gpu)
    assert policy.could_pay("draft", replace(eight, horizon=8), setup_s=0.1 * gpu.c(1), pooled=True)
    assert not policy.could_pay("draft", replace(eight, horizon=8), setup_s=10 * gpu.c(1),
                                pooled=True)  # 8 tokens cannot repay it
    assert policy.could_pay("draft", replace(eight, horizon=4096), setup_s=10 * gpu.c(1), pooled=True)


def _learned(cost) -> "Policy":
    """A lookup source that has been right about 60-70 % of the time a token."""
    policy = Policy(cost, k_max=6)
    for i in range(60):
        policy.observe("ngram4", drafted=6, accepted=[1, 4, 2, 6, 0, 3][i % 6], draft_s=0.0, verify_s=cost.c(7))
    policy.stopped.clear()
    return policy


def test_a_batch_around_a_sequence_makes_it_draft_less_then_nothing_on_a_cpu():
    """Several requests in one target batch (run/batch.py): each draft's rows
    cost the others' time too, so as the batch grows on a CPU (every row
    costs) the draft shortens and then stops; alone it is the one-sequence
    choice."""
    from spec_cli.core.batching import ALONE, Load

    cost = CostModel.from_timings({n: 0.04 + 0.025 * (n - 1) for n in range(1, 130)}, 129)
    policy = _learned(cost)
    alone = plan(policy, "ngram4", 6)
    four = plan(policy, "ngram4", 6, load=Load(rows=3, tokens=3.0, others=3))
    many = plan(policy, "ngram4", 6, load=Load(rows=63, tokens=63.0, others=63))
    assert alone == plan(policy, "ngram4", 6, load=ALONE) > 0
    assert alone >= four and many == 0


def test_on_a_gpu_a_batch_leaves_drafting_on():
    from spec_cli.core.batching import Load

    cost = CostModel.from_timings({n: 0.020 + 0.0002 * n for n in range(1, 130)}, 129)  # rows nearly free
    policy = _learned(cost)
    assert plan(policy, "ngram4", 6, load=Load(rows=7, tokens=7.0, others=7)) >= 4


def test_passes_are_llama_cpps_split_of_a_batch_over_sequences():
    """A pass runs consecutive sequences with rows left, the same number from
    each (llama_batch_allocr::split_equal over a KV cache per sequence)."""
    from spec_cli.core.batching import passes

    assert passes([(0, 1), (1, 1), (2, 1), (3, 1)]) == [4]
    assert passes([(3, 1), (1, 1), (0, 1), (2, 1)]) == [4]           # the parts' order does not matter
    assert passes([(0, 5), (1, 1), (2, 1), (3, 1)]) == [4, 4]
    assert passes([(0, 4), (1, 4), (2, 4), (3, 4)]) == [16]
    assert passes([(0, 1), (2, 1), (5, 1), (7, 1)]) == [1, 1, 1, 1]  # gaps: a pass each
    assert passes([(0, 1), (1, 3), (2, 3)]) == [3, 4]
    assert passes([(0, 128), (1, 1)]) == [2, 127]                    # a prompt's chunk beside a row
    assert passes([(0, 0), (1, 2)]) == [2] and passes([]) == []


def test_a_batch_drafts_together_or_not_at_all_where_each_pass_costs_a_weights_read():
    """On a GPU a pass costs about the same whatever its rows: one request
    drafting among plain ones adds a pass (twice the step), so a lone
    drafter needs long accepted runs, while requests that all can draft
    draft together in one pass.  The first to plan sees the ones after it
    (Load.following) and drafts; the last, seeing the others' drafts, joins
    with as long a one; a request whose neighbours cannot draft stays plain."""
    from spec_cli.core.batching import Load

    cost = CostModel.from_timings({n: 0.020 + 0.0002 * n for n in range(1, 130)}, 129)
    policy = _learned(cost)
    rates = tuple(policy.chances("ngram4")[:6])
    shape = ((0, 1), (1, 1), (2, 1), (3, 1))
    first = plan(policy, "ngram4", 6, load=Load(rows=3, tokens=0.0, others=3, shape=shape, seq=0,
                                                following=((1, rates), (2, rates), (3, rates))))
    assert first >= 4
    planned = ((0, first + 1), (1, first + 1), (2, first + 1), (3, 1))
    at = Load(rows=3 * (first + 1), tokens=3 * 2.0, others=3, shape=planned, seq=3)
    assert plan(policy, "ngram4", 6, load=at) == first  # one pass again: its draft costs nearly nothing
    at = Load(rows=3, tokens=3.0, others=3, shape=shape, seq=0, following=((1, ()), (2, ()), (3, ())))
    assert plan(policy, "ngram4", 6, load=at) == 0      # alone among plain rows: a second pass, not repaid


def test_a_draft_model_drafting_for_a_batch_is_priced_a_draft_batch_a_position():
    """A draft model drafts for every request of the batch together, one
    draft batch a position (draft_together): on a GPU eight requests'
    drafts cost about one request's, so the batch drafts where drafting
    each alone would not pay; on a CPU they cost about eight."""
    from spec_cli.core.batching import Load, pooled_s

    gpu = CostModel.from_timings({n: 0.020 + 0.0002 * n for n in range(1, 130)}, 129)
    cpu = CostModel.from_timings({n: 0.04 + 0.025 * (n - 1) for n in range(1, 130)}, 129)
    assert pooled_s([4] * 8, 0.01, gpu.c) == pytest.approx(4 * 0.01 * gpu.c(8) / gpu.c(1))
    assert pooled_s([4, 2], 0.01, cpu.c) == pytest.approx(0.01 * (2 * cpu.c(2) + 2 * cpu.c(1)) / cpu.c(1))
    assert pooled_s([], 0.01, cpu.c) == 0.0

    d = 0.3 * gpu.c(1)  # a draft model at 0.3 of the target a token
    policy = Policy(gpu, k_max=8, draft_s={"draft": d})
    for _ in range(40):
        policy.observe("draft", drafted=8, accepted=7, draft_s=8 * d, verify_s=gpu.c(9))
    shape = tuple((seq, 1) for seq in range(8))
    rates = tuple(policy.chances("draft")[:8])
    at = Load(rows=7, others=7, shape=shape, seq=0, following=tuple((seq, rates) for seq in range(1, 8)))
    together = policy.choose([Candidate("draft", 8, pooled=True)], 8, at)[1]
    each = policy.choose([Candidate("draft", 8)], 8, at)[1]
    assert together >= 4 and each < together


def test_on_a_cpu_a_draft_that_would_split_the_batch_into_passes_is_priced_as_such():
    """Where rows cost (a CPU), a draft among plain rows is priced as llama.cpp
    runs it: the plain pass, then a pass of the draft's rows alone."""
    from spec_cli.core.batching import Load

    cost = CostModel.from_timings({n: 0.04 + 0.025 * (n - 1) for n in range(1, 130)}, 129)
    policy = _learned(cost)
    at = Load(rows=3, tokens=3.0, others=3, shape=((0, 1), (1, 1), (2, 1), (3, 1)), seq=0)
    assert policy.step_s(3, 0.0, load=at) == pytest.approx(cost.c(4) + cost.c(3))
    assert policy.plain_s(at) == pytest.approx(cost.c(4))
    assert plan(policy, "ngram4", 6, load=at) == 0


def test_a_batch_plan_that_splits_into_passes_is_trimmed_where_that_is_faster():
    """trim_drafts: drafts chosen one request at a time are shortened --
    to nothing, or to another's length so that they share passes -- where
    the whole batch then makes more tokens a second; never lengthened."""
    from spec_cli.core.batching import trim_drafts

    flat = lambda n: 0.020 + 0.0002 * n  # noqa: E731  a GPU: a pass costs about the same whatever its rows
    cpu = lambda n: 0.04 + 0.025 * (n - 1)  # noqa: E731  a CPU: every row costs
    sure, weak = (0.9,) * 6, (0.3,) * 6
    plain = [(2, 0, (), 0.0, False), (3, 0, (), 0.0, False)]
    # two sure drafts beside two plain rows on a GPU: the second pass is repaid
    assert trim_drafts([], [(0, 4, sure[:4], 0.0, False), (1, 4, sure[:4], 0.0, False)] + plain, flat) == [4, 4, 0, 0]
    # a weak lone draft on a CPU: its pass is not repaid
    assert trim_drafts([], [(0, 4, weak[:4], 0.0, False), (1, 0, (), 0.0, False)] + plain, cpu) == [0, 0, 0, 0]
    # a long draft that is sure only at first, beside a short one: cut to share the short one's passes
    tail = (0.9, 0.9, 0.05, 0.05, 0.05, 0.05)
    assert trim_drafts([], [(0, 6, tail, 0.0, False), (1, 2, sure[:2], 0.0, False)], flat) == [2, 2]
    # ... but beside two plain rows, two passes for them are not repaid: all are cut at once
    # (cutting one alone would only split the passes further)
    assert trim_drafts([], [(0, 6, tail, 0.0, False), (1, 2, sure[:2], 0.0, False)] + plain, flat) == [0, 0, 0, 0]
    # drafts of uneven lengths beside two prompts' chunks (gpu-70b's price): cut to one length, so
    # that they share the chunks' first pass; kept, for they yield more than the batch's rate
    # without the chunks would make of the seconds they add
    from spec_cli.run.clock import load_clock
    gpu70 = load_clock("gpu-70b").verify_s
    uneven = [(seq, k, sure[:1] * k, 0.0012, True) for seq, k in enumerate([3, 7, 4, 9])]
    assert trim_drafts([(4, 47), (5, 81)], uneven, gpu70) == [3, 3, 3, 3]
    # a weak draft's extra rows beside a chunk are not repaid at that rate, though the round's
    # tokens a second (the chunk's seconds counted against no token) would say they are
    lone = [(0, 4, (0.5,) * 4, 0.0, False)]
    assert trim_drafts([(1, 128)], lone, cpu) == [0]
    # a prompt's chunk in the batch stays as it is
    assert trim_drafts([(4, 64)], [(0, 0, (), 0.0, False), (1, 0, (), 0.0, False)] + plain, cpu) == [0, 0, 0, 0]


def test_a_lookup_draft_is_extended_only_where_the_draft_model_can_pay_its_catch_up():
    """The hybrid extends a confident lookup draft with the draft model.  A
    draft model far behind (the lookup copied a long prompt it never read)
    must read all of it first: one extension cannot pay that back, and a
    request with a prediction once spent seconds on it for nothing."""
    from types import SimpleNamespace

    from spec_cli.run.drafting import keep_going
    from spec_cli.run.proposers.base import Proposal
    from spec_cli.run.proposers.hybrid import Hybrid

    class Copy:
        shares: list = []

        def draft(self, context, cand, k, keep_going=None):
            self.shares = [1.0] * 3
            return Proposal([1, 2, 3], None, cand.source)

    class Behind:
        name = "draft"
        decoding, sampling = SimpleNamespace(rule="standard"), SimpleNamespace(greedy=True)
        lag = 0.0

        def lag_s(self):
            return self.lag

        def draft(self, context, cand, k, keep_going=None):
            return Proposal([7, 8][:k], None, self.name)

    policy = Policy(CostModel.from_timings(GPU, 17), k_max=8)
    policy.draft_s["draft"] = 0.002
    cand = Candidate("prompt3", 8)
    dm = Behind()
    hybrid = Hybrid(Copy(), dm)
    for lag, tokens in ((0.0, [1, 2, 3, 7, 8]), (2.5, [1, 2, 3])):
        dm.lag = lag
        assert hybrid.draft(list(range(900)), cand, 8, keep_going(policy, cand)).tokens == tokens, lag


def test_what_earlier_generations_saw_of_a_source_is_where_the_next_one_starts():
    """A server's chat requests all answer after the same template tokens,
    so the earlier answers' first words look like a sure lookup draft (a
    context seen often, its most frequent continuation) and miss: a new
    request starts where the earlier ones left that source, not from the
    prior; other sources keep theirs, and a source that starts to hold is
    drafted again."""
    from spec_cli.core.acceptance import Learned

    learned = Learned()
    fresh = lambda: Policy(CostModel.from_timings(CPU_FAST, 17), k_max=16, learned=learned)  # noqa: E731
    assert plan(fresh(), "hist-multi4", 16) > 0 and plan(fresh(), "prompt-run8", 16) > 0
    for _ in range(4):  # four earlier requests, each missing once at the answer's start
        fresh().observe("hist-multi4", drafted=4, accepted=0, draft_s=0.0, verify_s=0.07)
    assert plan(fresh(), "hist-multi4", 16) == 0
    assert fresh().chances("prompt-run8") == prior_of(fresh(), "prompt-run8")
    assert plan(fresh(), "prompt-run8", 16) > 0
    for _ in range(8):  # the workload changed: the same context now continues as before
        fresh().observe("hist-multi4", drafted=2, accepted=2, draft_s=0.0, verify_s=0.05)
    assert plan(fresh(), "hist-multi4", 16) > 0


def test_learned_acceptance_counts_the_prior_as_one_observation_and_follows_a_window():
    from spec_cli.core.acceptance import LEARNED_WINDOW, Learned

    learned, prior = Learned(), [0.8, 0.8, 0.8]
    assert learned.start("x", prior) == prior
    learned.observe("x", drafted=3, accepted=1)   # first held, second missed, third never reached
    assert learned.start("x", prior) == pytest.approx([0.9, 0.4, 0.8])
    assert learned.start("x", prior + [0.5]) == pytest.approx([0.9, 0.4, 0.8, 0.5])
    assert learned.start("x", prior[:2]) == pytest.approx([0.9, 0.4])
    learned.observe("x", drafted=4, accepted=4)   # a longer draft: the position started later is learned too
    assert learned.start("x", prior + [0.5])[3] == pytest.approx(0.75)
    for _ in range(10 * LEARNED_WINDOW):
        learned.observe("x", drafted=1, accepted=0)
    for _ in range(LEARNED_WINDOW):
        learned.observe("x", drafted=1, accepted=1)
    assert learned.start("x", prior)[0] > 0.6  # the latest window, not the whole history


def test_a_draft_made_together_for_many_requests_pays_only_where_their_rows_are_cheap():
    from spec_cli.core.batching import pays_together

    cpu = lambda n: 0.05 + 0.01 * n  # noqa: E731  rows cost nearly what tokens do
    gpu = lambda n: 0.02 + 0.0001 * n  # noqa: E731  rows nearly free
    assert pays_together(cpu, 0.005, 1, 8, 1.3)          # one request: a cheap, always-right draft pays
    assert not pays_together(cpu, 0.005, 16, 8, 1.3)     # sixteen: 2n rows cost nearly twice n
    assert pays_together(gpu, 0.002, 16, 8, 1.3)
    assert not pays_together(gpu, 0.05, 16, 8, 1.3)      # a draft as slow as the target never does

