"""Pure pieces: statistics, n-gram lookup, stop strings."""

import numpy as np
import pytest

from spec_cli.run.stops import StopMatcher
from spec_cli.run.proposers.base import EMPTY
from spec_cli.run.suffix import Lookup
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


def test_lookup_proposes_what_followed_the_match():
    lk = Lookup()
    ctx = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3]
    lk.prepare(ctx)
    (cand,) = lk.candidates(ctx)
    assert cand.source == "prompt3" and cand.limit == 6  # 3 tokens matched: at most ALPHA x 3
    assert lk.draft(ctx, cand, 3).tokens == [4, 5, 9]
    assert lk.draft(ctx, cand, 3).probs is None


def test_a_prediction_drafts_the_answer_from_its_first_token_and_outranks_the_prompt():
    from spec_cli.run.suffix.priors import lookup_prior

    prompt, answer = [50, 1, 2, 3, 4, 60, 61], [1, 2, 3, 4, 5]
    lk = Lookup()
    lk.predict(answer)
    lk.prepare(prompt)
    (cand,) = lk.candidates(prompt)  # the prompt's tail leads into the prediction's start
    assert cand.source.origin == "prediction" and lk.draft(prompt, cand, 5).tokens == answer
    ctx = prompt + [1, 2]  # "1 2" is in the prompt and in the prediction (no copy running yet)
    lk = Lookup()
    lk.predict(answer)
    lk.prepare(prompt)
    cands = {c.source.origin: c for c in lk.candidates(ctx)}
    assert set(cands) == {"prompt", "prediction"}
    assert lookup_prior(cands["prediction"].source, 1)[0] > lookup_prior(cands["prompt"].source, 1)[0]


def test_lookup_prefers_the_longest_match_then_the_most_frequent_then_the_latest():
    ctx = [1, 2, 3, 7, 8, 5, 2, 3, 6, 1, 2, 3]
    assert propose(Lookup(), ctx, 2).tokens == [7, 8]  # "1 2 3" beats the later "2 3"
    ctx2 = [4, 2, 3, 7, 8, 5, 2, 3, 6, 9, 2, 3]
    assert propose(Lookup(), ctx2, 2).tokens == [6, 9]  # "2 3": once each, the latest wins
    ctx3 = [1, 2, 5, 1, 2, 5, 1, 2, 6, 1, 2]
    lk = Lookup()
    assert propose(lk, ctx3, 1).tokens == [5]  # "1 2": 5 twice, 6 once
    assert lk.shares == [2 / 3]


def test_lookup_stops_where_the_continuation_becomes_uncertain():
    # after "a b" comes c; after "b c" comes d, e, f or g once each (share 1/4)
    ctx = [10, 11, 12, 20, 10, 11, 12, 21, 10, 11, 12, 22, 10, 11, 12, 23, 5, 10, 11]
    lk = Lookup(threshold=0.3)
    assert propose(lk, ctx, 4).tokens == [12]
    # a lower bar takes the latest of the four, then a sure run: "12 23" -> 5 -> 10
    assert propose(Lookup(threshold=0.2), ctx, 4).tokens == [12, 23, 5, 10]


def test_lookup_no_match_and_no_self_match():
    assert propose(Lookup(), [1, 2, 3, 4], 4).tokens == []
    assert propose(Lookup(), [7], 4).tokens == []


def test_lookup_follows_the_context_and_rewinds_on_rewrite():
    lk = Lookup()
    ctx = [1, 2, 3, 1]
    assert propose(lk, ctx, 2).tokens == [2, 3]
    ctx = ctx + [2, 5, 1, 2]  # grows: "1 2" now followed by 3 and 5 once each: the latest, 5
    assert propose(lk, ctx, 2).tokens == [5, 1]
    assert propose(lk, [9, 8, 7, 9], 2).tokens == [8, 7]  # rewritten: the index follows
    assert lk.index.tokens == [9, 8, 7, 9]


def test_after_a_wholly_accepted_draft_the_copy_goes_on_in_the_originals_order():
    original = [50, 51, 52, 53, 54, 55, 56, 57, 58, 59]
    prompt = original + [7] + [50, 51]
    lk = Lookup()
    lk.prepare(prompt)
    first = propose(lk, prompt, 3)
    assert first.tokens == [52, 53, 54]
    ctx = prompt + first.tokens + [55]  # all accepted, and the bonus token is the original's next
    (run, *_) = lk.candidates(ctx)
    assert run.source == "prompt-run4" and lk.draft(ctx, run, 3).tokens == [56, 57, 58]
    other = prompt + first.tokens + [99]  # the bonus parted from the original: a fresh lookup
    assert all("-run" not in c.source for c in lk.candidates(other))


def test_the_index_update_reads_a_bounded_number_of_entries():
    from spec_cli.run.suffix import SuffixIndex
    index = SuffixIndex(depth=4)
    index.extend(range(1000))
    assert len(index.next) == 999 + 998 + 997 + 996  # every context of 1-4 tokens, once
    index.truncate(10)
    assert len(index.tokens) == 10 and len(index.next) == 9 + 8 + 7 + 6


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


def test_an_edit_made_once_is_drafted_the_next_time_the_copy_meets_it():
    """A rename: the output inserts 50 after "1 2 3 4" where the code had it;
    the copy remembers and drafts the second occurrence renamed."""
    code = [5, 6, 1, 2, 3, 4, 10, 11, 12, 20, 21, 22, 1, 2, 3, 4, 10, 13, 12, 30]
    prompt = code + [99, 5, 6]
    lk = Lookup()
    lk.prepare(prompt)
    first = propose(lk, prompt, 4)
    assert first.tokens == [1, 2, 3, 4]
    ctx = prompt + [1, 2, 3, 4, 50]            # accepted, then the target inserted 50
    assert all("-run" not in c.source for c in lk.candidates(ctx))  # off the copy
    ctx = ctx + [10]                          # ... and came back to the code
    (run,) = [c for c in lk.candidates(ctx) if c.source.startswith("prompt-run")]
    assert lk.draft(ctx, run, 12).tokens == [11, 12, 20, 21, 22, 1, 2, 3, 4, 50, 10, 13]


def test_an_edit_made_before_any_copy_followed_is_found_and_replayed():
    """The output renamed (inserted 50 after "3 4") in plain steps, before
    anything drafted; the first lookup draft after it finds the edit behind
    its match, and the copy drafts the next occurrence renamed."""
    code = [5, 6, 1, 2, 3, 4, 10, 11, 12, 20, 21, 22, 1, 2, 3, 4, 10, 13, 12, 30]
    prompt = code + [99]
    lk = Lookup()
    lk.prepare(prompt)
    ctx = prompt + [5, 6, 1, 2, 3, 4, 50, 10, 11]   # written one by one, no draft
    first = propose(lk, ctx, 2)
    assert first.tokens == [12, 20]
    ctx = ctx + [12, 20, 21]                         # accepted, and the bonus follows the copy
    (run,) = [c for c in lk.candidates(ctx) if c.source.startswith("prompt-run")]
    assert lk.draft(ctx, run, 8).tokens == [22, 1, 2, 3, 4, 50, 10, 13]


def test_an_edit_the_output_does_not_make_again_is_forgotten():
    """Inserted once after "3 4"; at the next "3 4" the output keeps the
    original, so the third is drafted as the original too."""
    code = [1, 2, 3, 4, 10, 11, 12, 7, 2, 3, 4, 10, 13, 14, 8, 3, 4, 10, 15, 16]
    prompt = code + [99, 1, 2]
    lk = Lookup()
    lk.prepare(prompt)
    assert propose(lk, prompt, 2).tokens == [3, 4]
    ctx = prompt + [3, 4, 50, 10]                    # the edit: 50 inserted
    ctx = ctx + [11, 12, 7, 2, 3, 4]
    (run,) = [c for c in lk.candidates(ctx) if c.source.startswith("prompt-run")]
    assert lk.draft(ctx, run, 2).tokens == [50, 10]  # replayed where "3 4" comes again
    ctx = ctx + [10, 13, 14, 8, 3, 4]                # ... but the output kept the original
    (run,) = [c for c in lk.candidates(ctx) if c.source.startswith("prompt-run")]
    assert lk.draft(ctx, run, 3).tokens == [10, 15, 16]


def test_a_context_seen_more_than_once_is_a_source_of_its_own():
    lk = Lookup()
    ctx = [1, 2, 3, 1, 2, 4, 9, 1, 2]
    lk.prepare(ctx)
    assert [c.source for c in lk.candidates(ctx)] == ["prompt-multi2"]
    lk2 = Lookup()
    ctx2 = [1, 2, 3, 9, 1, 2]
    lk2.prepare(ctx2)
    assert [c.source for c in lk2.candidates(ctx2)] == ["prompt2"]


def test_the_timed_lookup_drafts_the_lookups_proposal_cut_to_the_reference():
    from spec_cli.run.bench.references import TimedLookup
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 99, 1, 2]
    reference = [3, 4, 5, 9, 9]          # the lookup proposes 3 4 5 6; the target wrote 3 4 5, then 9
    tl = TimedLookup(reference)
    tl.prepare(prompt)
    (cand,) = tl.candidates(prompt)
    assert cand.source == "ngram-oracle" and cand.limit == 3
    assert tl.draft(prompt, cand, 3).tokens == [3, 4, 5]
    assert tl.candidates(prompt + [3, 4, 6]) == []   # parted from the reference: nothing to measure


def test_a_source_is_its_name_with_its_parts():
    """What drafted is typed: the lookup makes Sources, the policy and the
    statistics read their parts, and a plain name reads the same way."""
    from helpers import prior
    from spec_cli.core.source import Source
    from spec_cli.core.stats import origin

    made = Source("prompt", "multi", 4)
    assert made == "prompt-multi4" and Source.of("prompt-multi4") == made
    assert (made.origin, made.kind, made.matched, made.group, made.is_lookup) == ("prompt", "multi", 4,
                                                                                   "prompt-multi", True)
    for name in ("hist-run16", "output8", "draft", "ngram-oracle", "prompt1"):
        parsed = Source.of(name)
        assert parsed == name and Source(parsed.origin, parsed.kind, parsed.matched) == name
        assert origin(name) == parsed.origin and prior(name, 3) == prior(parsed, 3)
    assert not Source.of("draft").is_lookup and origin("ngram-oracle") == "ngram"
    assert prior("output8", 1)[0] < prior("prompt8", 1)[0]  # the output repeats itself less surely


def test_one_slow_draft_cannot_poison_the_remembered_draft_cost():
    """A cold first draft (weights read from disk) 15x the usual cost moves
    the remembered cost per token by a bounded step, not to 4.6x; drafts
    that keep measuring a new cost still reach it."""
    from spec_cli.run.proposers.draft import learned_cost

    usual = 0.04
    assert learned_cost(usual, 0.6) <= usual * 1.6 + 1e-12
    c = usual
    for _ in range(12):
        c = learned_cost(c, 0.2)
    assert abs(c - 0.2) < 0.01
    c = 0.6  # a cost poisoned before the bound: real drafts bring it back within a run
    for _ in range(20):
        c = learned_cost(c, usual)
    assert c < usual * 1.1


def test_a_busy_spell_remembered_does_not_shut_the_draft_model_out():
    """A draft model's remembered cost per token above its own batch of two
    (learned in a busy spell: on this machine 0.26 s against 0.06 s for two,
    after runs beside two busy processes) is a stall, not a cost: the policy
    starts from the batch of two, so the draft model drafts and is measured
    again, instead of never drafting (and never being measured) again."""
    from spec_cli.run.proposers.draft import ModelDrafts, steady_per_token

    assert steady_per_token({1: 0.258, 2: 0.058, 4: 0.064}) == 0.058
    assert steady_per_token({1: 0.03, 2: 0.05}) == 0.03   # a steady cost stays
    assert steady_per_token({1: 0.03}) == 0.03

    class Remembered:  # what ModelDrafts reads of a loaded model
        curve = {1: 0.258, 2: 0.058}

    drafts = ModelDrafts(Remembered())
    drafts.learn(0.02)  # a quiet draft: from the bounded value, not from the stall
    assert Remembered.curve[1] == pytest.approx(0.058 + 0.3 * (0.02 - 0.058))


def test_message_contents_are_found_in_the_rendered_chat():
    """Where each message's content lies in a rendered chat, from the same
    template rendered with marks: as given, trimmed, or (a reasoning
    model's past answer) what follows its "</think>"; None where the
    template rewrote a content some other way."""
    from spec_cli.core.chat import MARK as _MARK, content_spans

    def render(contents, rewrite=lambda c: c.strip()):
        return "".join(f"<|user|>{rewrite(c)}<|end|>" for c in contents)

    contents = ["  hi <|end|> there ", "<think>plan</think>\n\nThe answer."]
    marks = [_MARK.format(i) for i in range(len(contents))]
    r1 = lambda c: c.rsplit("</think>", 1)[-1].strip()  # noqa: E731  (DeepSeek-R1's template)
    for rewrite in (lambda c: c.strip(), r1):
        rendered, marked = render(contents, rewrite), render(marks, rewrite)
        spans = content_spans(rendered, marked, contents)
        assert [rendered[a:b] for a, b in spans] == [rewrite(c) for c in contents]
    assert content_spans(render(contents, str.upper), render(marks, str.upper), contents) is None


def _tiny_gguf(path, tokens, mtp):
    import gguf as gguf_writer

    w = gguf_writer.GGUFWriter(str(path), "llama")
    w.add_token_list(tokens)
    w.add_uint32("llama.nextn_predict_layers", mtp)
    w.add_tensor("output.weight", np.zeros((16, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_files_gguf_facts_are_read_once_and_again_when_it_changes(tmp_path, monkeypatch):
    """token_digest and mtp_layers walk a 150 K-token header each run; they
    are kept per file, size and mtime, and a changed file is read again."""
    import os

    from spec_cli.llama import gguf

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    f = tmp_path / "m.gguf"
    _tiny_gguf(f, ["ab", "cd"], 1)
    digest = gguf.token_digest(f)
    assert digest[0] == 2 and gguf.mtp_layers(f) == 1
    assert gguf.tensors(f) == [("output.weight", 0, (8, 16))]
    st = os.stat(f)
    _tiny_gguf(f, ["xy", "zw"], 3)  # same size; put its mtime back: the kept facts are used
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert gguf.token_digest(f) == digest and gguf.mtp_layers(f) == 1
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert gguf.token_digest(f) != digest and gguf.token_digest(f)[0] == 2 and gguf.mtp_layers(f) == 3


def test_a_request_runs_beside_the_busy_slots_taking_its_cached_prefix_with_it():
    """serve's slot choice (schedule.choose_slot): the cached prefix where it
    keeps the busy slots together, else copied to a slot that does; a
    prompt no slot holds half of goes beside the busy ones, least recently
    used first."""
    from spec_cli.run.schedule import choose_slot

    free = [0, 2, 3]
    # slot 2 holds the prompt and sits beside busy slot 1: run there
    assert choose_slot(free, [1], {0: 0, 2: 90, 3: 0}, {}, 100) == (2, None)
    # slot 3 holds it but busy 1 and 3 would need two passes: copy it to 0 or 2
    place, cached = choose_slot(free, [1], {0: 0, 2: 0, 3: 90}, {0: 5, 2: 1}, 100)
    assert cached == 3 and place == 2  # beside 1, the least recently used of 0 and 2
    # ...unless the requests coming fill every slot: then no copy
    assert choose_slot(free, [1], {0: 0, 2: 0, 3: 90}, {0: 5, 2: 1}, 100, filling=True) == (3, None)
    # nothing busy: the prefix stays where it is
    assert choose_slot(free, [], {0: 0, 2: 0, 3: 90}, {}, 100) == (3, None)
    # less than half held: no reuse, the place beside the busy ones
    assert choose_slot(free, [1], {0: 0, 2: 0, 3: 40}, {0: 1, 2: 2}, 100) == (0, None)
    # the place already holds as much: no copy
    assert choose_slot([0, 2], [1], {0: 60, 2: 60}, {0: 3, 2: 1}, 100) == (2, None)


def test_a_draft_ends_at_its_first_end_of_generation_token():
    """A copy of the prompt that reaches the end of the user's message runs
    on into the chat template; past the end token nothing can be accepted."""
    from spec_cli.run.drafting import to_end

    class Vocab:
        def is_eog(self, t):
            return t in (2, 7)

    assert list(to_end(Vocab(), [5, 6, 2, 9, 4, 7])) == [5, 6, 2]
    assert list(to_end(Vocab(), [7, 1])) == [7]
    assert list(to_end(Vocab(), [1, 3, 4])) == [1, 3, 4] and list(to_end(Vocab(), [])) == []


def test_a_copy_the_output_keeps_leaving_is_offered_as_a_patch_not_a_run():
    """A completion writing a second function after the first follows its
    lines but leaves them every few tokens (a new name, a changed slice):
    after three breaks, one every 16 tokens followed or sooner, a copy is a "patch", priced
    apart from a copy the output follows (a code edit's unchanged lines)."""
    from spec_cli.run.suffix.priors import lookup_prior

    code = list(range(100, 140))
    prompt = code + [99, 100, 101, 102]
    lk = Lookup()
    lk.prepare(prompt)
    assert propose(lk, prompt, 2).tokens == [103, 104]
    ctx = prompt + [103, 104, 105, 7, 107, 108]     # left once (7 for 106), came back
    assert [c.source for c in lk.candidates(ctx) if "-" in c.source] == ["prompt-run2"]
    ctx = ctx + [109, 8, 111, 112]                   # and again (8 for 110)
    assert [c.source for c in lk.candidates(ctx) if "-" in c.source] == ["prompt-run2"]
    ctx = ctx + [113, 9, 115, 116]                   # a third time, within 16 tokens a break
    (patch,) = [c for c in lk.candidates(ctx) if "-" in c.source]
    assert patch.source == "prompt-patch2" and lk.draft(ctx, patch, 3).tokens == [117, 118, 119]
    assert lookup_prior("prompt-patch16", 4) < lookup_prior("prompt-run16", 4)
