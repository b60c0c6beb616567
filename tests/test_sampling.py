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


@pytest.mark.parametrize("kw", [{"temperature": -1}, {"top_k": -1}, {"top_p": 0.0},
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
    assert all(choose(logits, SamplingConfig(), s, 0) == 1 for s in range(50))
    top2 = SamplingConfig(temperature=1.0, top_k=2)
    picks = {choose(logits, top2, s, p) for s in range(200) for p in range(3)}
    assert picks == {1, 2}
