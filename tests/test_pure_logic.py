"""Pure pieces: statistics, n-gram lookup, stop strings."""

import pytest

from spec_cli.run.engine import StopMatcher
from spec_cli.run.proposers import EMPTY, NGram
from spec_cli.core.stats import Stats


def test_stats_accumulate():
    s = Stats()
    s.add(n_tokens=4, drafted=4, accepted=3, draft_s=0.1, verify_s=0.2)
    s.add(n_tokens=1, drafted=2, accepted=0, draft_s=0.1, verify_s=0.1)
    s.add(n_tokens=1, drafted=0, accepted=0, draft_s=0.0, verify_s=0.1)
    s.wall_s, s.prefill_s = 2.5, 0.5
    assert s.tokens == 6 and s.steps == 3
    assert s.acceptance_rate == pytest.approx(3 / 6)
    assert s.mean_accepted == pytest.approx(3 / 2)  # over the two steps that drafted
    assert s.position_rates() == [0.5, 0.5, 1.0, 0.0]
    assert s.tokens_per_s == pytest.approx(3.0)
    d = s.as_dict()
    assert d["drafted"] == 6 and d["accepted"] == 3 and d["verify_s"] == pytest.approx(0.4)


def test_stats_empty_is_zero_not_nan():
    s = Stats()
    assert s.acceptance_rate == 0 and s.mean_accepted == 0 and s.tokens_per_s == 0


def propose(ng, ctx, k):
    """What the lookup drafts when asked for up to k tokens."""
    cands = ng.candidates(ctx)
    return ng.draft(ctx, cands[0], min(k, cands[0].limit)) if cands else EMPTY


def test_ngram_proposes_what_followed_the_latest_match():
    ng = NGram(n_max=3)
    ctx = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3]
    assert propose(ng, ctx, 3).tokens == [4, 5, 9]
    assert propose(ng, ctx, 10).tokens == [4, 5, 9, 9, 1, 2, 3]
    assert propose(ng, ctx, 3).probs is None


def test_ngram_prefers_longest_match_then_latest():
    ng = NGram(n_max=3)
    # "2 3" occurs twice; the longer "1 2 3" match picks the first
    ctx = [1, 2, 3, 7, 8, 5, 2, 3, 6, 1, 2, 3]
    assert propose(ng, ctx, 2).tokens == [7, 8]
    ng2 = NGram(n_max=3)
    ctx2 = [4, 2, 3, 7, 8, 5, 2, 3, 6, 9, 2, 3]
    assert propose(ng2, ctx2, 2).tokens == [6, 9]  # latest "2 3"


def test_ngram_no_match_and_no_self_match():
    ng = NGram()
    assert propose(ng, [1, 2, 3, 4], 4).tokens == []
    assert propose(ng, [7], 4).tokens == []


def test_ngram_index_grows_and_rebuilds_on_rewrite():
    ng = NGram(n_max=2)
    ctx = [1, 2, 3, 1]
    assert propose(ng, ctx, 2).tokens == [2, 3]
    ctx = ctx + [2, 5, 1, 2]  # grows: latest "1 2" is now followed by 5
    assert propose(ng, ctx, 2).tokens == [5, 1]
    assert propose(ng, [9, 8, 7, 9], 2).tokens == [8, 7]  # history rewritten


def test_stop_matcher_holds_back_partial_stop():
    m = StopMatcher(["</end>"])
    assert m.feed("hello </e") == ("hello ", False)
    assert m.feed("nd> more") == ("", True)


def test_stop_matcher_releases_false_alarm():
    m = StopMatcher(["STOP"])
    assert m.feed("ST") == ("", False)
    assert m.feed("ART") == ("START", False)
    assert m.flush() == ""


def test_stop_matcher_without_stops_passes_through():
    m = StopMatcher([])
    assert m.feed("abc") == ("abc", False)
