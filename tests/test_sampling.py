import numpy as np
import pytest

from spec_cli.core.sampling import SamplingConfig, probs, sample


LOGITS = np.array([[2.0, 1.0, 0.5, -1.0, 3.0, 0.0],
                   [0.0, 0.0, 0.0, 0.0, 0.0, 5.0]], dtype=np.float32)


def test_greedy_is_one_hot_on_argmax():
    p = probs(LOGITS, SamplingConfig(temperature=0.0))
    assert p.tolist() == [[0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]]


def test_temperature_one_is_softmax():
    p = probs(LOGITS[0], SamplingConfig(temperature=1.0))
    e = np.exp(LOGITS[0] - LOGITS[0].max())
    assert np.allclose(p, e / e.sum())


def test_higher_temperature_flattens():
    cold = probs(LOGITS[0], SamplingConfig(temperature=0.5))
    hot = probs(LOGITS[0], SamplingConfig(temperature=2.0))
    assert cold.max() > hot.max()


def test_top_k_keeps_k_tokens_renormalised():
    p = probs(LOGITS[0], SamplingConfig(temperature=1.0, top_k=2))
    assert set(np.nonzero(p)[0]) == {0, 4}
    assert p.sum() == pytest.approx(1.0)


def test_top_p_keeps_smallest_set_reaching_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = probs(logits, SamplingConfig(temperature=1.0, top_p=0.75))
    assert set(np.nonzero(p)[0]) == {0, 1}
    p = probs(logits, SamplingConfig(temperature=1.0, top_p=0.85))
    assert set(np.nonzero(p)[0]) == {0, 1, 2}


def test_min_p_drops_tokens_below_fraction_of_top():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = probs(logits, SamplingConfig(temperature=1.0, min_p=0.2))
    assert set(np.nonzero(p)[0]) == {0, 1, 2}


def test_rows_are_transformed_independently():
    cfg = SamplingConfig(temperature=0.7, top_k=3, top_p=0.9, min_p=0.05)
    both = probs(LOGITS, cfg)
    assert np.allclose(both[0], probs(LOGITS[0], cfg))
    assert np.allclose(both[1], probs(LOGITS[1], cfg))
    assert np.allclose(both.sum(axis=1), 1.0)


@pytest.mark.parametrize("kw", [{"temperature": -1}, {"temperature": 1e-310}, {"top_k": -1}, {"top_p": 0.0},
                                {"top_p": 1.5}, {"min_p": 1.0}])
def test_invalid_settings_are_refused(kw):
    with pytest.raises(ValueError):
        SamplingConfig(**kw)


def test_sample_never_draws_zero_probability_tokens():
    rng = np.random.default_rng(0)
    p = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    draws = {sample(p, rng) for _ in range(2000)}
    assert draws == {1, 3}


def test_sample_follows_distribution():
    rng = np.random.default_rng(1)
    p = np.array([0.1, 0.2, 0.7])
    n = 20000
    counts = np.bincount([sample(p, rng) for _ in range(n)], minlength=3)
    assert np.allclose(counts / n, p, atol=0.015)


def test_gumbel_noise_is_keyed_by_seed_position_and_token():
    from spec_cli.core.sampling import gumbel
    ids = np.arange(1000)
    g = gumbel(7, 3, ids)
    assert np.array_equal(gumbel(7, 3, ids[[5, 900, 17]]), g[[5, 900, 17]])  # any subset alone
    assert not np.array_equal(gumbel(7, 4, ids), g) and not np.array_equal(gumbel(8, 3, ids), g)
    big = gumbel(1, 0, np.arange(200_000))
    assert abs(big.mean() - 0.5772) < 0.01 and abs(big.std() - np.pi / np.sqrt(6)) < 0.01  # standard Gumbel


def test_choose_is_greedy_at_temperature_zero_and_respects_filters():
    from spec_cli.core.sampling import choose
    logits = np.array([0.0, 3.0, 2.9, -1.0, 1.0])
    assert all(choose(logits, SamplingConfig(), s, 0).token == 1 for s in range(50))
    top2 = SamplingConfig(temperature=1.0, top_k=2)
    picks = {choose(logits, top2, s, p).token for s in range(200) for p in range(3)}
    assert picks == {1, 2}


# -- the fast path against the plain one (tests/reference_sampling.py) ------

import reference_sampling as reference  # noqa: E402
from spec_cli.core import sampling as fast  # noqa: E402
from spec_cli.core.kernel import COMPILED, NUMPY  # noqa: E402
from helpers import choose_from_probs  # noqa: E402
from conftest import REPO  # noqa: E402

SETTINGS = [SamplingConfig(),
            SamplingConfig(temperature=1.0),                                   # full vocabulary
            SamplingConfig(temperature=0.8, top_p=0.95),
            SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),  # llama.cpp's defaults
            SamplingConfig(temperature=1.5),
            SamplingConfig(temperature=2.0, min_p=0.01),
            SamplingConfig(temperature=0.7, top_k=5),
            SamplingConfig(temperature=1.2, top_k=3000, top_p=0.99)]


@pytest.fixture(scope="module")
def real_rows(smollm_fast):
    """Real logit rows: a prompt's and a few generated positions'."""
    m = smollm_fast
    m.reset()
    prompt = m.vocab.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:")
    rows = [m.decode(prompt, logits_from=0)]
    for _ in range(6):
        rows.append(m.decode([int(np.argmax(rows[-1][-1]))], logits_from=0))
    m.reset()
    return np.concatenate(rows)


@pytest.mark.parametrize("head_cap", [fast.HEAD_CAP, 32])
def test_fast_choice_is_the_reference_choice_on_real_rows(real_rows, monkeypatch, head_cap):
    """Same q, same token for every seed, position and setting; with a small
    head the two-stage path (a tail block wins, then a token in it) runs too."""
    monkeypatch.setattr(fast, "HEAD_CAP", head_cap)
    tail_wins = 0
    for cfg in SETTINGS:
        for r, row in enumerate(real_rows):
            assert np.allclose(fast.probs(row, cfg), reference.probs(row, cfg)[0], rtol=1e-6, atol=1e-12), cfg
            for seed in range(4):
                want, via_tail = reference.traced(row, cfg, seed, r)
                assert fast.choose(row, cfg, seed, r).token == want, (cfg, r, seed)
                assert fast.choose(row, cfg, seed, r, confidence=True)[0] == want
                tail_wins += via_tail
    if head_cap == 32:
        assert tail_wins > 20  # the tail's path was exercised, not only the head's


def test_the_compiled_kernel_makes_the_numpy_paths_choices(real_rows, monkeypatch):
    """The per-row kernel (core/_fastpick.c, built by `pip install`) picks
    the token the numpy path and the reference pick, and gives decide's
    confidence, for every setting it takes (greedy, top-k, min-p, with or
    without top-p, the full vocabulary), on real rows, flattened ones and
    rows of ties; it leaves to numpy a q wider than the head.  With a small
    head, tail blocks win too."""
    assert COMPILED.available, "the kernel did not build: see setup.py"
    rows = [*real_rows, *(real_rows[::3] * np.float32(0.2)), np.round(real_rows[0]),
            np.zeros_like(real_rows[0])]
    cfgs = [SamplingConfig()] + [SamplingConfig(temperature=t, top_k=k, top_p=p, min_p=mp)
                                 for t in (0.6, 1.7) for k in (0, 1, 40, 3000) for p in (1.0, 0.95, 0.4)
                                 for mp in (0.0, 0.05, 0.3)]
    used, left, tail_wins = 0, 0, 0
    small_head = [(SamplingConfig(temperature=t), 32, rep) for t in (1.0, 1.7) for rep in range(3)]
    for cfg, head_cap, rep in [(c, fast.HEAD_CAP, 0) for c in cfgs] + small_head:
        monkeypatch.setattr(fast, "HEAD_CAP", head_cap)
        for r, row in enumerate(rows):
            seed, pos = 3 + r + 100 * rep, 11 * r
            got = fast._by_kernel(COMPILED, row, cfg, seed, pos, True)
            want = fast.choose(row, cfg, seed, pos, confidence=True, kernel=NUMPY)
            full = not cfg.greedy and cfg.top_k == 0 and cfg.top_p == 1.0 and cfg.min_p == 0.0
            assert (got is not None) >= (cfg.greedy or full), (cfg, r)
            if got is None:  # q wider than the head: numpy's
                left += 1
                continue
            used += 1
            ref, via_tail = reference.traced(row, cfg, seed, pos)
            tail_wins += via_tail
            assert got[0] == want[0] == ref, (cfg, r)
            assert got[1] == pytest.approx(want[1], rel=1e-6), (cfg, r)
            assert fast.choose(row, cfg, seed, pos).token == got[0]
    assert used > 2000 and left > 200 and tail_wins > 5, (used, left, tail_wins)
    with pytest.raises(TypeError, match="float32"):
        COMPILED.choose(np.zeros(4, np.float64), SamplingConfig(1.0, 0, 1.0, 0.1), 0, 0, False, None, 8)


def test_the_min_p_window_gives_the_general_paths_q_to_the_bit(real_rows, monkeypatch):
    """With top-k and min-p on (llama.cpp's defaults) q is read from one
    window below the top: the same ids, z and normaliser, bitwise, as the
    general path (top-k's window, then top-p and min-p), on real rows and
    settings where top-p keeps the window whole, cuts into it, and where
    the window holds more than k."""
    cfgs = [SamplingConfig(temperature=t, top_k=k, top_p=p, min_p=mp)
            for t in (0.3, 0.8, 1.5) for k in (1, 5, 40) for p in (1.0, 0.95, 0.5) for mp in (0.01, 0.05, 0.3)]
    from spec_cli.core import dist as rows_dist

    window = rows_dist._dist_under_min_p
    rows = np.concatenate([real_rows, real_rows * np.float32(0.25)])  # flatter rows: wider windows
    fired = fell_back = 0
    for cfg in cfgs:
        for row in rows:
            got = window(row, cfg)
            monkeypatch.setattr(rows_dist, "_dist_under_min_p", lambda x, c: None)
            general = fast.dist(row, cfg)
            monkeypatch.setattr(rows_dist, "_dist_under_min_p", window)
            if got is None:
                fell_back += 1
                continue
            fired += 1
            assert (got.top, got.m, got.log_z) == (general.top, general.m, general.log_z), cfg
            assert np.array_equal(got.ids, general.ids) and np.array_equal(got.z, general.z), cfg
    assert fired > 100 and fell_back > 10, (fired, fell_back)


def _candidates(row, n):
    """A row's n largest, in a shuffled order (llama.cpp's come unsorted)."""
    ids = np.argpartition(row, len(row) - n)[len(row) - n:]
    ids = np.random.default_rng(n).permutation(ids).astype(np.int32)
    return fast.Candidates(ids, row[ids].astype(np.float32))


def test_candidates_give_the_whole_rows_q_to_the_bit(real_rows):
    """A row's top-k candidates alone (what llama.cpp's backend sampler
    leaves) give the same q as the whole row -- the same ids, z and
    normaliser bitwise -- and so the same token, greedy or seeded."""
    for cfg in [c for c in SETTINGS if c.top_k] + [SamplingConfig(temperature=0.9, top_k=40),
                                                  SamplingConfig(temperature=1.1, top_k=20, min_p=0.1)]:
        for r, row in enumerate(real_rows):
            whole = fast.dist(row, cfg)
            for spare in (0, 8):
                c = _candidates(row, cfg.top_k + spare)
                part = fast.dist(c, cfg)
                assert np.array_equal(part.ids, whole.ids) and np.array_equal(part.z, whole.z), (cfg, r)
                assert part.log_z == whole.log_z and part.top == whole.top
                for seed in range(4):
                    assert fast.choose(c, cfg, seed, r) == fast.choose(row, cfg, seed, r)
                    assert fast.choose(c, cfg, seed, r, confidence=True) == fast.choose(row, cfg, seed, r, confidence=True)
        c = _candidates(real_rows[0], 50)
        assert fast.choose(c, SamplingConfig(), 0, 0).token == int(np.argmax(real_rows[0]))
    with pytest.raises(ValueError):
        fast.dist(_candidates(real_rows[0], 10), SamplingConfig(temperature=1.0))  # no top-k: whole rows only


def test_llama_cpps_candidates_are_the_rows_own(smollm_fast):
    """With candidates_k set, llama.cpp's top-k sampler in the graph leaves
    each row's most likely tokens with their logits bitwise the whole
    row's, and every seeded choice is the whole row's."""
    m = smollm_fast
    toks = m.vocab.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:")
    cfg = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    m.reset()
    m.decode(toks[:-9])
    whole = m.decode(toks[-9:], logits_from=0)
    m.truncate(len(toks) - 9)
    m.candidates_k, m.device_top_k = cfg.top_k, True  # on a CPU too, to check the path
    try:
        part = m.decode(toks[-9:], logits_from=0, candidates=True)
        assert all(isinstance(c, fast.Candidates) for c in part)
        for i, (row, c) in enumerate(zip(whole, part)):
            assert len(c.ids) == cfg.top_k + 8
            assert np.array_equal(c.vals, row[c.ids])
            assert set(c.ids.tolist()) == set(np.argsort(row)[-len(c.ids):].tolist())
            assert all(fast.choose(c, cfg, s, i) == fast.choose(row, cfg, s, i) for s in range(8))
        # a read that does not ask for candidates gets whole rows again
        m.truncate(len(toks) - 9)
        again = m.decode(toks[-9:], logits_from=0)
        assert isinstance(again, np.ndarray) and np.array_equal(again, whole)
    finally:
        m.candidates_k, m.device_top_k = None, False
        m.reset()


def test_choose_from_probs_is_the_same_choice(real_rows):
    cfg = SamplingConfig(temperature=1.0, top_p=0.9)
    for r, row in enumerate(real_rows[:10]):
        q = fast.probs(row, cfg)
        assert all(choose_from_probs(q, s, r) == fast.choose(row, cfg, s, r).token for s in range(5))


def _two_stage_case(monkeypatch):
    """A 6,000-token q whose tail (outside an 8-token head) holds ~40 % of
    the mass, in three blocks."""
    monkeypatch.setattr(fast, "HEAD_CAP", 8)
    monkeypatch.setattr(fast, "BLOCK", 2048)
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 1.0, 6000)
    logits[rng.choice(6000, 8, replace=False)] += 7.0
    q = reference.probs(logits, SamplingConfig(temperature=1.0))[0]
    head = np.argsort(-q)[:8]
    bucket = {int(t): ("head", int(t)) for t in head}
    lows = np.median(logits)

    def cell(t):  # a head token alone; a tail token by block and half of the logits
        return bucket.get(t, ("tail", t // 2048, bool(logits[t] > lows)))
    expected: dict = {}
    for t, p in enumerate(q):
        expected[cell(t)] = expected.get(cell(t), 0.0) + p
    assert 0.2 < sum(p for k, p in expected.items() if k[0] == "tail") < 0.6
    return logits, cell, expected


def test_two_stage_choice_is_an_exact_sample(monkeypatch):
    """Gumbel-max over head tokens and tail blocks, then within the block:
    the draws follow q over the head tokens and over the tail's blocks and
    logit ranges; dropping the tail (a top-k of the head) must fail."""
    from collections import Counter

    from stat_helpers import chi2_fits

    logits, cell, expected = _two_stage_case(monkeypatch)
    n = 4000
    full = SamplingConfig(temperature=1.0)
    counts = Counter(cell(fast.choose(logits, full, s, 0).token) for s in range(n))
    fits, stat, crit = chi2_fits(counts, expected, n)
    assert fits, f"chi2 {stat:.1f} > {crit:.1f}"
    head_only = SamplingConfig(temperature=1.0, top_k=8)
    counts = Counter(cell(fast.choose(logits, head_only, s, 0).token) for s in range(n))
    fits, stat, crit = chi2_fits(counts, expected, n)
    assert not fits, f"a sampler without the tail passed: chi2 {stat:.1f} <= {crit:.1f}"


def test_margin_sees_a_token_just_left_out_by_the_cut():
    """Where a token the cut left out by 0.1 logits would win were it kept,
    rounding can change the choice: bench's margin says 0.1, not the gap."""
    import math

    x = np.array([5.0, 4.0, 2.0, -9.0, -9.0])
    cfg = SamplingConfig(temperature=1.0, min_p=math.exp(-2.9))  # the cut at 2.1: token 2 is out by 0.1
    assert set(np.flatnonzero(fast.probs(x, cfg))) == {0, 1}
    at_cut = [s for s in range(200) if fast.margin(x, cfg, s, 0) == pytest.approx(0.1)]
    assert 0 < len(at_cut) < 200  # the seeds where token 2 would have won
    far = x.copy()
    far[2] = -9.0  # nothing near the cut: the margin is the scores' gap again
    assert not any(fast.margin(far, cfg, s, 0) == pytest.approx(0.1) for s in at_cut)


def test_rowcost_times_both_paths(smollm_fast):
    """`python tools/rowcost.py` (the figures in docs): every setting timed
    with the kernel and without, after a real decode, in one call with its
    decode, and over a verify batch in 1 and N threads (nothing about speed
    is asserted)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("rowcost", REPO / "tools" / "rowcost.py")
    rowcost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rowcost)
    times, host = rowcost.measure(smollm_fast, 2)
    assert set(times) == set(rowcost.SETTINGS) and len(host) == 2 * 2 * len(rowcost.SETTINGS)
    wide = f"rows, {smollm_fast.n_threads} threads"
    for t in times.values():
        assert set(t) == {"kernel", "numpy", "one call", "rows, 1 thread", wide}
        assert all(len(t[side]) == 2 for side in ("kernel", "numpy", "one call"))
        assert sum(len(ms) for side, ms in t.items() if side.startswith("rows")) == 4  # each run: both ways
    smollm_fast.reset()


def test_choose_rows_walks_a_verify_batch_as_the_rule_does(real_rows, monkeypatch):
    """The kernel's walk over a verify batch gives each row's `choose`,
    from the first row on, while the draft agrees, and the first choice
    that disagrees (or the one after the draft); it stops short where a
    row is numpy's to decide, so the rule chooses the rest row by row.
    In several threads (rows claimed in order, none read past a known
    stop) the walk is the same."""
    from spec_cli.core.verify import verify_choices
    rows = np.ascontiguousarray(real_rows[:9])
    for cfg in [SamplingConfig(), SamplingConfig(0.8, 40, 0.95, 0.05), SamplingConfig(1.0),
                SamplingConfig(0.8, top_p=0.95)]:
        for seed in range(3):
            truth = [fast.choose(row, cfg, seed, 5 + i).token for i, row in enumerate(rows)]
            for j in (0, 3, 8):  # the draft parts from the choices at j (8: it never does)
                draft = truth[:j] + [truth[j] + 1] + truth[j + 1:8] if j < 8 else truth[:8]
                for threads in (1, 2, 3):
                    walked = COMPILED.walk(rows, draft, cfg, seed, 5, threads, fast.HEAD_CAP)
                    assert walked == truth[:j + 1], (cfg, seed, j, threads)
                    assert fast.choose_rows(rows, draft, cfg, seed, 5, threads=threads) == walked
                    assert verify_choices(draft, walked.__getitem__) == (j, truth[j])
    hot = SamplingConfig(1.0, top_k=40)
    monkeypatch.setattr(fast, "HEAD_CAP", 1)  # every sampled row's q is wider: numpy's, from row 0
    truth = [fast.choose(row, hot, 0, 5 + i, kernel=NUMPY).token for i, row in enumerate(rows)]
    for threads in (1, 2):
        assert COMPILED.walk(rows, truth[:8], hot, 0, 5, threads, fast.HEAD_CAP) == []
        assert fast.choose_rows(rows, truth[:8], hot, 0, 5, threads=threads) == truth  # numpy walks it all
    assert fast.choose_rows(list(rows), truth[:8], hot, 0, 5) == truth  # not an array: row by row
