"""The acceptance rule on fixed p and q: exact, seeded, and able to fail."""

from collections import Counter

import numpy as np
import pytest

from spec_cli.core.verify import verify

from stat_helpers import as_probs, chi2_fits


def one_hot(i, v=5):
    x = np.zeros(v)
    x[i] = 1.0
    return x


def test_greedy_all_accepted_gives_bonus_from_last_row():
    q = np.stack([one_hot(1), one_hot(2), one_hot(3), one_hot(4)])
    p = np.stack([one_hot(1), one_hot(2), one_hot(3)])
    assert verify([1, 2, 3], p, q, np.random.default_rng(0)) == (3, 4)


def test_greedy_first_mismatch_takes_target_token():
    q = np.stack([one_hot(1), one_hot(0), one_hot(3), one_hot(4)])
    p = np.stack([one_hot(1), one_hot(2), one_hot(3)])
    assert verify([1, 2, 3], p, q, np.random.default_rng(0)) == (1, 0)


def test_point_mass_draft_same_rule():
    q = np.stack([one_hot(1), one_hot(0), one_hot(3)])
    assert verify([1, 2], None, q, np.random.default_rng(0)) == (1, 0)
    assert verify([1, 0], None, q, np.random.default_rng(0)) == (2, 3)


def test_no_draft_samples_from_first_row():
    q = np.stack([one_hot(3)])
    assert verify([], None, q, np.random.default_rng(0)) == (0, 3)


def test_wrong_number_of_rows_is_an_error():
    with pytest.raises(ValueError):
        verify([1], None, np.stack([one_hot(1)]), np.random.default_rng(0))


def test_all_zero_residual_falls_back_to_target():
    # p >= q everywhere (as rounding can make it): the residual is all zero
    q = np.array([[0.5, 0.5], [0.5, 0.5]])
    p = np.array([[0.9, 0.6]])
    rng = np.random.default_rng(3)
    outcomes = Counter(verify([0], p, q, rng) for _ in range(2000))
    assert set(outcomes) == {(1, 0), (1, 1), (0, 0), (0, 1)}  # q drawn after a rejection, not nothing
    rejected = outcomes[(0, 0)] + outcomes[(0, 1)]
    assert abs(rejected / 2000 - (1 - 0.5 / 0.9)) < 0.05


# -- statistics: the emitted tokens follow q ------------------------------

P = as_probs([0.40, 0.05, 0.25, 0.10, 0.20])   # draft
Q = as_probs([0.10, 0.30, 0.15, 0.35, 0.10])   # target


def draw_first_two(rule, n, k, rng, point_mass=False):
    """Emit tokens with a context-free draft (P) and target (Q) until two
    are out; count the (first, second) pairs."""
    counts = Counter()
    V = len(P)
    for _ in range(n):
        out = []
        while len(out) < 2:
            if point_mass:
                draft = [int(rng.integers(V)) for _ in range(k)]
                p = None
            else:
                draft = [int(rng.choice(V, p=P)) for _ in range(k)]
                p = np.tile(P, (k, 1))
            q = np.tile(Q, (k + 1, 1))
            n_acc, nxt = rule(draft, p, q, rng)
            out += draft[:n_acc] + [nxt]
        counts[tuple(out[:2])] += 1
    return counts


EXPECTED = {(a, b): Q[a] * Q[b] for a in range(5) for b in range(5)}


def accept_everything(draft, p, q, rng):
    """A deliberately wrong rule: keep every draft token."""
    return len(draft), int(rng.choice(q.shape[1], p=q[len(draft)]))


@pytest.mark.parametrize("k", [1, 3])
def test_sampled_output_follows_target(k):
    n = 6000
    counts = draw_first_two(verify, n, k, np.random.default_rng(1234 + k))
    fits, stat, crit = chi2_fits(counts, EXPECTED, n)
    assert fits, f"chi2 {stat:.1f} > {crit:.1f}: output does not follow q"


def test_point_mass_draft_output_follows_target():
    n = 6000
    counts = draw_first_two(verify, n, 2, np.random.default_rng(77), point_mass=True)
    fits, stat, crit = chi2_fits(counts, EXPECTED, n)
    assert fits, f"chi2 {stat:.1f} > {crit:.1f}"


def test_the_check_catches_a_wrong_rule():
    """The same check, with 'accept every draft token', must fail: the
    statistical tests above can tell a wrong rule from the right one."""
    n = 6000
    counts = draw_first_two(accept_everything, n, 3, np.random.default_rng(1237))
    fits, stat, crit = chi2_fits(counts, EXPECTED, n)
    assert not fits, f"chi2 {stat:.1f} <= {crit:.1f}: the check is blind"


def test_same_seed_same_decisions():
    a = draw_first_two(verify, 300, 2, np.random.default_rng(5))
    b = draw_first_two(verify, 300, 2, np.random.default_rng(5))
    assert a == b


# -- the Gumbel coupling (the default rule) --------------------------------

from helpers import choose_from_probs  # noqa: E402
from spec_cli.core.verify import verify_choices  # noqa: E402


def coupled_first_two(n, k, *, choose=choose_from_probs, rule=verify_choices):
    """First two tokens of n seeds: a context-free draft (P) proposes its own
    Gumbel-max choices with the seed's noise; the coupled rule accepts those
    equal to the target's (Q) choices.  Also returns whether the text was the
    target's own choices, whatever was drafted."""
    counts, invariant = Counter(), True
    for seed in range(n):
        out = []
        while len(out) < 2:
            pos = len(out)
            draft = [choose(P, seed, pos + i) for i in range(k)]
            n_acc, nxt = rule(draft, lambda i: choose(Q, seed, pos + i))
            out += draft[:n_acc] + [nxt]
        counts[tuple(out[:2])] += 1
        invariant &= out[:2] == [choose(Q, seed, 0), choose(Q, seed, 1)]
    return counts, invariant


@pytest.mark.parametrize("k", [1, 3])
def test_gumbel_output_follows_target_and_ignores_the_draft(k):
    n = 6000
    counts, invariant = coupled_first_two(n, k)
    fits, stat, crit = chi2_fits(counts, EXPECTED, n)
    assert fits, f"chi2 {stat:.1f} > {crit:.1f}: output does not follow q"
    assert invariant  # the same seed gives the target alone's tokens


def test_gumbel_check_catches_wrong_rules():
    n = 6000

    def everything(draft, choice):
        return len(draft), int(choice(len(draft)))

    counts, _ = coupled_first_two(n, 3, rule=everything)
    fits, stat, crit = chi2_fits(counts, EXPECTED, n)
    assert not fits, f"accept-everything: chi2 {stat:.1f} <= {crit:.1f}: the check is blind"

    def same_noise_everywhere(q, seed, pos):  # noise not keyed by position
        return choose_from_probs(q, seed, 0)

    counts, _ = coupled_first_two(n, 1, choose=same_noise_everywhere)
    fits, stat, crit = chi2_fits(counts, EXPECTED, n)
    assert not fits, f"position-blind noise: chi2 {stat:.1f} <= {crit:.1f}: the check is blind"


def test_gumbel_acceptance_is_at_least_the_coupling_bound():
    """Acceptance of a one-token draft under the coupling is at least
    (1 - TV) / (1 + TV) (Daliri, Musco, Suresh 2024)."""
    tv = 0.5 * np.abs(P - Q).sum()
    n = 6000
    hits = sum(choose_from_probs(P, s, 0) == choose_from_probs(Q, s, 0) for s in range(n))
    assert hits / n >= (1 - tv) / (1 + tv) - 3 * np.sqrt(0.25 / n)
