"""The scheduling of many requests at once (run/schedule.py) and the round's
plan (run/round.py) as pure logic: fake requests with the fields a
batch.Stream has, a price curve, a real Policy over a CostModel.  The same
rules on real models: test_parallel.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from spec_cli.core.batching import Load, passes
from spec_cli.core.cost import CostModel
from spec_cli.run import round as rounds
from spec_cli.run import schedule
from spec_cli.run.proposers.base import Candidate
from helpers import Policy

CPU = lambda n: 0.05 + 0.015 * (n - 1)  # noqa: E731  every row costs (a CPU)
GPU = lambda n: 0.020 + 0.0002 * n      # noqa: E731  a pass costs about the same whatever its rows


@dataclass(eq=False)
class Req:
    """A fake request: batch.Stream's scheduling fields, and its limit."""

    seq: int
    reading: bool = False
    editor: bool = False
    unread: list = field(default_factory=list)
    spent_s: float = 0.0
    alone_s: float = 0.0
    owed: float = 0.0
    got: float = 0.0
    k: int = 4

    def limit(self) -> int:
        return self.k


def test_a_new_prompt_is_read_a_chunk_a_round_beside_running_requests_and_whole_when_alone():
    running, new = Req(0), Req(1, reading=True, unread=list(range(500)))
    parts = schedule.reading_parts([running, new], chunk=128, n_batch=512, price=CPU)
    assert [(s, len(t)) for s, t in parts] == [(new, 129)]  # one row in the running one's pass: 128 in its own
    parts = schedule.reading_parts([new], chunk=128, n_batch=512, price=CPU)
    assert [len(t) for _, t in parts] == [500]  # no one waits: as much as a batch holds
    assert schedule.reading_parts([running], chunk=128, n_batch=512, price=CPU) == []


def test_a_chunk_is_lengthened_or_shortened_so_that_each_pass_is_a_whole_number_of_tiles():
    running = [Req(i) for i in range(7)]
    new = Req(7, reading=True, unread=list(range(1000)))
    parts = schedule.reading_parts([*running, new], chunk=128, n_batch=512, price=CPU)
    assert len(parts[0][1]) == 129
    assert passes([(r.seq, 1) for r in running] + [(7, 129)]) == [8, 128]
    # apart from the running ones (a gap in the sequences): its own pass is the chunk
    apart = Req(9, reading=True, unread=list(range(1000)))
    assert [len(t) for _, t in schedule.reading_parts([*running, apart], chunk=128, n_batch=512, price=CPU)] == [128]
    # two reading side by side: only the last chunk moves, and where no move of
    # fewer than q tokens evens out every pass, the chunks stay as they were
    a, b = Req(7, reading=True, unread=list(range(100))), Req(8, reading=True, unread=list(range(1000)))
    parts = schedule.reading_parts([*running, a, b], chunk=128, n_batch=512, price=CPU)
    assert [len(t) for _, t in parts] == [100, 28]
    a.unread = list(range(113))  # [113, 15] would make passes [9, 28, 98]; b two longer, [9, 32, 96]
    parts = schedule.reading_parts([*running, a, b], chunk=128, n_batch=512, price=CPU)
    assert [len(t) for _, t in parts] == [113, 17]
    assert passes([(r.seq, 1) for r in running] + [(7, 113), (8, 17)]) == [9, 32, 96]
    # a chunk that ends its prompt is read as it is; so is one with no one running beside it
    end = Req(7, reading=True, unread=list(range(50)))
    assert [len(t) for _, t in schedule.reading_parts([*running, end], chunk=128, n_batch=512, price=CPU)] == [50]
    assert [len(t) for _, t in schedule.reading_parts([new], chunk=128, n_batch=512, price=CPU)] == [512]
    # never past what a batch holds
    full = [Req(i, k=60) for i in range(7)]
    parts = schedule.reading_parts([*full, Req(7, reading=True, unread=list(range(1000)))], chunk=128,
                                   n_batch=7 * 61 + 128, price=CPU)
    assert len(parts[0][1]) <= 128


def test_an_editor_reads_all_that_fits_and_the_others_chunks_wait_for_it():
    running = Req(0, k=7)
    editor = Req(1, reading=True, editor=True, unread=list(range(400)))
    other = Req(2, reading=True, unread=list(range(300)))
    parts = schedule.reading_parts([editor, running, other], chunk=128, n_batch=512, price=CPU)
    assert [(s, len(t)) for s, t in parts] == [(editor, 400)]  # 512 less the running one's 8 rows holds it all


def test_beside_a_running_editor_others_read_only_what_its_pace_allows():
    editor = Req(0, editor=True, alone_s=2.0, spent_s=2.19)  # EDITOR_PACE's slack: 0.31 s
    other = Req(1, reading=True, unread=list(range(300)))
    allow = schedule.editors_allow([editor, other], chunk=128, price=CPU)
    assert allow == 20 and CPU(1 + allow) - CPU(1) <= 0.31 < CPU(2 + allow) - CPU(1)
    assert [len(t) for _, t in schedule.reading_parts([editor, other], chunk=128, n_batch=512, price=CPU)] == [20]
    editor.spent_s = 2.35  # slack 0.15 s: 10 tokens, too small a chunk to be worth a pass: wait
    assert schedule.editors_allow([editor, other], chunk=128, price=CPU) == 0 < schedule.EDITOR_CHUNK
    assert schedule.reading_parts([editor, other], chunk=128, n_batch=512, price=CPU) == []
    editor.alone_s = 4.0  # slack 2.75 s: the whole chunk
    assert schedule.editors_allow([editor, other], chunk=128, price=CPU) == 128
    assert schedule.editors_allow([Req(0), other], chunk=128, price=CPU) == float("inf")  # no editor
    assert schedule.editors_allow([editor, other], chunk=128, price=None) == float("inf")  # nothing priced yet


def test_an_editor_behind_its_pace_gets_rounds_of_its_own():
    editor = Req(0, editor=True, alone_s=1.0, spent_s=1.2)
    assert not schedule.editors_behind([editor, Req(1)])
    editor.spent_s = 1.0 + schedule.EDITOR_PACE
    assert schedule.editors_behind([editor, Req(1)])
    assert not schedule.editors_behind([Req(1, spent_s=9.0, alone_s=1.0)])  # only an editor's pace counts


def test_where_two_rows_cost_nearly_two_steps_an_editor_runs_alone_from_its_first_round():
    steep = lambda n: 0.041 * n ** 0.85  # noqa: E731  c(2) 1.80 c(1): this project's AMD VMs
    editor, chat = Req(0, editor=True, reading=True), Req(1)
    assert schedule.editors_alone([editor, chat], steep)
    assert not schedule.editors_alone([editor, chat], CPU)    # 1.3: the editor shares, paced
    assert not schedule.editors_alone([editor, chat], GPU)
    assert not schedule.editors_alone([chat, Req(2)], steep)  # no editor
    assert not schedule.editors_alone([editor, Req(2, editor=True)], steep)  # editors only already
    assert not schedule.editors_alone([editor, chat], None)   # nothing priced yet


def test_pace_counts_a_shared_rounds_seconds_against_what_the_editors_rows_cost_alone():
    editor, other = Req(0, editor=True), Req(1)
    schedule.pace([(editor, 3, 0.01), (other, 0, 0.0)], [], 0.5, CPU)
    assert editor.spent_s == 0.5 and editor.alone_s == pytest.approx(CPU(4) + 0.01)
    assert other.spent_s == other.alone_s == 0.0  # not an editor
    schedule.pace([(editor, 3, 0.01)], [], 0.2, CPU)  # alone: the round is its own
    assert editor.spent_s == 0.7 and editor.alone_s == pytest.approx(CPU(4) + 0.01 + 0.2)
    reader = Req(2, editor=True, reading=True)
    schedule.pace([(other, 0, 0.0)], [reader], 0.3, CPU)  # reading its prompt: as alone
    assert reader.spent_s == reader.alone_s == 0.3


def test_fairness_counts_tokens_against_a_round_of_plain_rows_and_holds_the_others_back():
    a, b = Req(0), Req(1)
    for _ in range(10):  # a drafts and gets 5 tokens a round; b's draft is rejected: 1
        schedule.fair([(a, 5), (b, 1)], 2 * CPU(2), [], CPU)
    assert a.owed == b.owed == pytest.approx(20.0) and (a.got, b.got) == (50, 10)
    assert schedule.limits([a, b], []) == [0, 4]  # b fell behind: a waits, b may draft
    b.got = 19.0
    assert schedule.limits([a, b], []) == [4, 4]  # back within FAIR_TOKENS
    schedule.fair([(a, 5)], 1.0, [], CPU)  # alone: nothing to be fair about
    assert a.owed == pytest.approx(20.0)


def test_no_one_else_drafts_while_an_editor_reads_its_prompt():
    editor, a, b = Req(0, editor=True, reading=True), Req(1, k=6), Req(2, k=3)
    assert schedule.limits([a, b], [(editor, [1, 2, 3])]) == [0, 0]
    assert schedule.limits([a, b], [(Req(3, reading=True), [1])]) == [6, 3]


def test_every_request_drafting_its_longest_fits_one_batch():
    """Eight requests that could each draft 64 and a prompt chunk of 128
    would be 656 rows: each gets an equal share of the 512 a batch holds."""
    many = [Req(i, k=64) for i in range(8)]
    assert schedule.limits(many, [(Req(8, reading=True), list(range(128)))], n_batch=512) == [47] * 8
    assert schedule.limits(many[:4], [], n_batch=512) == [64] * 4  # they fit: as asked
    assert schedule.limits([Req(0, k=64), Req(1, k=3)], [], n_batch=40) == [19, 3]


def test_compaction_moves_the_highest_sequence_into_the_lowest_gap():
    assert schedule.next_move([0, 3, 1], {2, 4, 5}) == (3, 2)
    assert schedule.next_move([0, 1, 2], {3, 4}) is None
    assert schedule.next_move([4], {0, 1}) is None  # alone: no pass to join
    assert schedule.next_move([1, 5], {0, 2, 3}) == (5, 2)


# -- the round's plan (run/round.py) ---------------------------------------
class Lookup:
    """A proposer that could draft `n` tokens of `source` for free."""

    name = "lookup"

    def __init__(self, n: int, source: str = "prompt8", setup_s: float = 0.0, pooled: bool = False):
        self.n, self.source, self.setup_s, self.pooled = n, source, setup_s, pooled

    def candidates(self, context):
        return [Candidate(self.source, self.n, self.setup_s, pooled=self.pooled)]


@dataclass
class Gen:
    """A fake Generation: what the round's offer and plan read."""

    policy: object
    proposer: object
    context: list = field(default_factory=lambda: [1, 2, 3])
    remaining: int = 200


def _learned(curve, accepted=(6,)) -> Policy:
    """A policy that saw 40 drafts of 6 tokens, accepted as far as `accepted` says in turn."""
    policy = Policy(CostModel.from_timings({n: curve(n) for n in range(1, 130)}, 129), k_max=8)
    for i in range(40):
        policy.observe("prompt8", drafted=6, accepted=accepted[i % len(accepted)], draft_s=0.0, verify_s=curve(7))
    return policy


def test_a_request_alone_is_planned_as_the_policy_chooses_alone():
    policy = _learned(CPU)
    lane = rounds.Lane(0, Gen(policy, Lookup(8)))
    ref = _learned(CPU)
    cand, k = ref.choose(Lookup(8).candidates([]), 8, Load(horizon=200))
    offers = [rounds.offer(lane, 8)]
    plans, loads = rounds.plan([lane], offers, price=CPU)
    assert (plans[0].cand, plans[0].k) == (cand, k) and k > 0
    assert loads == [Load(horizon=200)]
    assert plans[0].chances == tuple(policy.chances("prompt8")[:k])


def test_a_crowded_cpu_batch_plans_shorter_drafts_than_one_request_alone():
    """On a CPU every row costs: beside seven others a request's rows cost
    their time too, so the round plans less drafting a request than alone;
    on a GPU, where a pass costs about the same, the drafts stay."""
    def planned(curve, n):
        lanes = [rounds.Lane(seq, Gen(_learned(curve, (1, 4, 2, 6, 0, 3)), Lookup(8))) for seq in range(n)]
        offers = [rounds.offer(lane, 8, outlook=n > 1) for lane in lanes]
        plans, _ = rounds.plan(lanes, offers, price=curve)
        return [p.k for p in plans]

    alone, eight = planned(CPU, 1), planned(CPU, 8)
    assert alone[0] > 0 and sum(eight) < 8 * alone[0]
    gpu = planned(GPU, 8)
    assert all(k > 0 for k in gpu)


def test_a_fixed_draft_length_is_planned_as_asked_and_never_trimmed():
    lanes = [rounds.Lane(seq, Gen(None, Lookup(8))) for seq in range(4)]
    offers = [rounds.offer(lane, 5) for lane in lanes]
    plans, _ = rounds.plan(lanes, offers, fixed=[(4, 100)], price=CPU)
    assert [p.k for p in plans] == [5, 5, 5, 5]


def test_a_candidate_the_batch_cannot_use_is_not_offered():
    lane = rounds.Lane(0, Gen(_learned(CPU), Lookup(8, source="draft", setup_s=0.3)))
    assert rounds.offer(lane, 8).cands
    assert not rounds.offer(lane, 8, usable=lambda s, c: c.setup_s == 0.0).cands
    assert not rounds.offer(lane, 0).cands  # nothing to draft: not even asked
