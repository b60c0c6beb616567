"""Several generations at once on one pair: every running request's rows
in one target batch a round (continuous batching, as llama-server's slots).

Each request is a `Stream`: its own sequence in both models' contexts, its
own `Generation` (context, seed, rule, stops, policy) and proposer.  A
round (`Batch.round`) is run/round.py's, the one `generate` runs for a
request alone: each request's policy chooses its draft knowing the batch
around it, the plan is trimmed where its drafts would split the batch into
passes that cost more than they yield, the proposers draft (a draft model
for all that chose it together), the target decodes every request's
[last token, draft...] and the new requests' prompt chunks in ONE
llama_decode, and each request's rule keeps its own accepted prefix.  So
requests draft together or not at all, speculation shrinks as the batch
grows, and stops by itself where rows cost as much as tokens.  One request
running alone goes through the same round, its fast paths taken by shape.

What this module keeps is the scheduling around the round, its rules pure
in run/schedule.py: which prompt chunks are read (a long prompt does not
hold up the others' tokens), an editor's pace (EDITOR_PACE: rounds of
editors only while one has fallen behind; the others' prompts read only as
far as its slack allows; no one else drafts while an editor reads its
prompt), fairness (a request behind what it would have got with no one
drafting has the others wait), the sequences kept without gaps
(`compact`), and the draft model reading each new request's prompt beside
the target, chunk by chunk (`Batch._follow`), so that it drafts for it once
the prompt is read with no catch-up every request would wait for -- where
it would draft at the batch's size at all, and the reading pays back.

The text of a request does not depend on what runs beside it, but for
rounding: its rows come from a batch of another shape than alone, and a
matrix product's sums may round differently there; the coupled rule's
choice moves only where two tokens' logits were within that rounding (a
near-tie).  `--deterministic` runs one request at a time (see serve).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..core.batching import Load
from ..core.tokens import common_prefix
from . import round as rounds, schedule
from .engine import Generation, Step
from .schedule import CHUNK
from .proposers.draft import DraftModel

@dataclass(eq=False)
class Stream:
    """One request in the batch."""

    seq: int
    gen: Generation
    unread: list[int] = field(default_factory=list)  # prompt tokens not in the cache yet
    evaluated: int = 0
    read_s: float = 0.0
    reading: bool = True
    editor: bool = False
    # fairness (schedule.fair): tokens this request got in shared rounds, and
    # those it would have got in the same seconds with no request drafting
    got: float = 0.0
    owed: float = 0.0
    # an editor's pace (schedule.pace): seconds of the rounds it was in, and
    # what those rounds would have cost it alone
    spent_s: float = 0.0
    alone_s: float = 0.0
    # its proposer's draft model (proposers.draft.DraftModel), else None;
    # `followed` where that model reads this request's text beside the
    # target (Batch._follow), `following` while it is behind; `judged`: the
    # batch's size when Batch._follow last weighed following it
    drafter: object = None
    followed: bool = False
    following: bool = False
    judged: int = 0

    @property
    def context(self) -> list[int]:
        return self.gen.context

    def limit(self) -> int:
        """The longest draft it may verify now (Generation.limit)."""
        return self.gen.limit()


class Batch:
    """The requests running on `pair` now (see the module's docstring)."""

    def __init__(self, pair, *, chunk: int = CHUNK, turns: bool = False, clock=None):
        self.pair, self.target = pair, pair.target
        self.clock = clock  # a simulated clock (clock.py) prices the rounds: every request's GenConfig.clock
        self.chunk = max(1, min(chunk, self.target.n_batch // 2))
        # take turns, one request's target batch a round, instead of one
        # batch for all (--deterministic: a batch holding another sequence's
        # rows is not bitwise one sequence's)
        self.turns = turns
        self._turn = 0
        self.streams: list[Stream] = []
        self.last_rows = 0      # the target batch's size in the last round
        self.last_s = 0.0       # and its seconds (drafting included)
        self.charged_s = 0.0    # the same on the simulated clock where there is one, else on the wall
        self.last_drafts: dict = {}  # the last round's drafts: stream -> (tokens, seconds); schedule.pace reads it

    def add(self, seq: int, gen: Generation, *, editor: bool = False) -> Stream:
        """`gen` (made for sequence `seq`) joins at the next round; the part
        of its prompt the sequence's cache already holds is not read again.
        An `editor`'s request is planned first in each round (its draft
        chosen before the others'): its latency comes first."""
        if any(s.seq == seq for s in self.streams):
            raise ValueError(f"sequence {seq} is busy")
        t = self.target
        t.use(seq)
        prompt = gen.prompt[:-1]
        keep = common_prefix(t.tokens, prompt)
        t.truncate(keep)
        s = Stream(seq, gen, unread=prompt[keep:], editor=editor, drafter=gen.proposer.follower)
        at = sum(o.editor for o in self.streams) if editor else len(self.streams)
        self.streams.insert(at, s)
        if not s.unread:
            self._ready(s)
        return s

    def drop(self, stream: Stream) -> None:
        """`stream` leaves now (it ended, or its client went away)."""
        if stream in self.streams:
            self.streams.remove(stream)

    def __len__(self) -> int:
        return len(self.streams)

    def compact(self, free, spare: int | None = None) -> list[tuple[int, int]]:
        """Close the gaps between the running requests' sequences, which a
        request that ended before the others leaves: llama.cpp runs only
        sequences that follow each other in one pass over the weights
        (core.batching.passes), so every round after it would cost a pass
        more (on a GPU about a whole step).  The request in the highest
        sequence moves to the lowest free one between them, its caches
        copied there (Pair.copy_seq; through `spare`, Pair.swap_seq, where
        what the free sequence holds is kept).  `free`: the sequences no
        request holds.  Returns the moves, (from, to)."""
        moves: list[tuple[int, int]] = []
        if self.turns:  # one request's batch a round: no passes to join
            return moves
        free = set(free)
        while (move := schedule.next_move([s.seq for s in self.streams], free)) is not None:
            src, dst = move
            s = next(s for s in self.streams if s.seq == src)
            if not (self.pair.swap_seq(src, dst, spare) if spare is not None else self.pair.copy_seq(src, dst)):
                break
            s.seq = dst
            free.discard(dst)
            free.add(src)
            moves.append((src, dst))
        return moves

    @property
    def _price(self):
        """One pass of n rows, in seconds: on the simulated clock where there
        is one, else as the target's cost model has learned it (None before
        it has one)."""
        if self.clock is not None:
            return self.clock.verify_s
        return self.target.costs.c if self.target.costs is not None else None

    # -- a round ---------------------------------------------------------------
    def round(self) -> list[tuple[Stream, Step]]:
        """One target batch for every request: what each running one added."""
        t0 = time.perf_counter()
        if self.turns:
            out = self._one_turn()
            self.last_s = time.perf_counter() - t0
            self.charged_s = self.last_s if self.clock is None else sum(
                st.verify_s + st.draft_s + st.prefill_s for _, st in out)
            return out
        reading = schedule.reading_parts(self.streams, chunk=self.chunk, n_batch=self.target.n_batch,
                                         price=self._price)
        running = [s for s in self.streams if not s.reading]
        if schedule.editors_behind(running) or schedule.editors_alone(self.streams, self._price):  # editors only
            running = [s for s in running if s.editor]
            reading = [(s, tokens) for s, tokens in reading if s.editor]
        if not running and not reading:
            return []
        out, charged = self._together(running, reading)
        self.last_s = time.perf_counter() - t0
        self.charged_s = self.last_s if self.clock is None else charged
        schedule.pace([(s, *self.last_drafts.get(s, (0, 0.0))) for s, _ in out], [s for s, _ in reading],
                      self.charged_s, self._price)
        return out

    def _one_turn(self) -> list[tuple[Stream, Step]]:
        """One request's round alone (its prompt read whole first), the
        requests in turn."""
        if not self.streams:
            return []
        s = self.streams[self._turn % len(self.streams)]
        self._turn += 1
        if s.reading:
            self.pair.use(s.seq)
            s.gen.read_prompt()
            s.reading, s.unread = False, []
        return self._together([s], [])[0]

    def _ready(self, s: Stream) -> None:
        s.reading = False
        self.pair.use(s.seq)
        s.gen.prompt_read(s.evaluated, s.read_s)

    def _together(self, running: list[Stream], reading: list[tuple[Stream, list[int]]]
                  ) -> tuple[list[tuple[Stream, Step]], float]:
        """The round's one batch (run/round.py); returns each running
        request's step, and what the simulated clock charges for the round
        (drafting included).  One request alone takes the round's fast
        paths, as `generate` does."""
        t0 = time.perf_counter()
        followed_s = 0.0 if rounds.alone(running, reading) else self._follow(reading, running)
        crowded = len(running) > 1
        v, drafted = rounds.run(self.target, running, schedule.limits(running, reading, self.target.n_batch),
                                usable=lambda s, cand: _usable(s, cand, crowded),
                                reading=[(s.seq, tokens) for s, tokens in reading], use=self.pair.use,
                                clock=self.clock, price=self._price)
        for s, tokens in reading:  # the prompt's chunk is in the cache
            s.unread = s.unread[len(tokens):]
            s.evaluated += len(tokens)
            s.read_s += v.decoded_s * len(tokens) / v.rows
        self.last_rows = v.rows
        out = [(s, s.gen.settle(r)) for s, r in zip(running, v.rounds)]
        for s, _ in reading:
            if not s.unread:
                self._ready(s)
        charged = v.verify_s + sum(d.draft_s for d in drafted) + followed_s
        schedule.fair([(s, len(st.tokens)) for s, st in out],
                      charged if self.clock is not None else time.perf_counter() - t0,
                      [(s.seq, len(tokens)) for s, tokens in reading], self._price)
        self.last_drafts = {s: (len(d.draft), d.draft_s) for s, d in zip(running, drafted)}
        return out, charged

    def _follow(self, reading: list[tuple[Stream, list[int]]], running: list[Stream]) -> float:
        """The draft model reads what the target holds of each request in
        the round that it follows (Stream.following), or will hold after
        this round's prompt chunks: at most `chunk` tokens a request, all in
        one draft batch.  A request is followed until it is running and the
        draft is within two tokens of it (a step's usual catch-up), and only
        while that pays at the batch's size (_follow_pays, weighed again
        when the size changes): every request in the round waits for the
        draft batch, so where the draft model would not draft at this load
        (many requests on a CPU) its reading would be all loss.
        Returns what the simulated clock charges for it (else 0)."""
        chunk_of = {s: len(tokens) for s, tokens in reading}
        streams = [s for s, _ in reading] + running
        parts, model, n = [], None, 0
        for s in streams:
            dm = s.drafter
            if dm is None or (s.followed and not s.following):
                continue  # no draft model, or one caught up: a step prices its few tokens' catch-up
            if not s.followed and s.judged == len(streams):
                continue  # not worth following at this batch's size
            m = dm.model
            text = s.gen.prompt if s.reading else s.context
            held = len(text) - 1 - (len(s.unread) - chunk_of.get(s, 0) if s.reading else 0)
            m.use(s.seq)
            have = common_prefix(m.tokens, text[:held])
            if s.judged != len(streams):
                s.judged = len(streams)
                s.followed = s.following = self._follow_pays(s, dm, len(text) - 1 - have, streams)
                if not s.followed:
                    continue
            if not s.reading and held - have <= 2:
                s.following = False
                continue
            m.truncate(have)
            take = text[have:min(held, have + self.chunk)]
            if take and n + len(take) <= m.n_batch:
                parts.append((s.seq, take, False))
                model, n = m, n + len(take)
        if not parts:
            return 0.0
        model.decode_batch(parts)
        return self.clock.catch_up_s(n) if self.clock is not None else 0.0

    @staticmethod
    def _follow_pays(s: Stream, dm: DraftModel, behind: int, streams: list[Stream]) -> bool:
        """Would `s`'s draft model, once it has read the `behind` tokens it
        lacks (a stall for every request in the batch), draft for it at all
        beside `streams` -- each of the others one row, drafting as much
        with theirs where they have one (core.batching.Load.following)?  A
        fixed draft length (no policy) was asked for: it always would."""
        policy = s.gen.policy
        if policy is None:
            return True
        others = [o for o in streams if o is not s]
        rates = tuple(policy.chances(dm.name))
        load = Load(rows=len(others), tokens=float(len(others)), others=len(others),
                    shape=tuple(sorted((o.seq, 1) for o in streams)), seq=s.seq,
                    following=tuple((o.seq, rates) for o in others if o.drafter is not None),
                    horizon=s.gen.remaining)
        return policy.could_pay(dm.name, load, setup_s=dm.catch_up_s(behind), pooled=True)

def _usable(s: Stream, cand, crowded: bool) -> bool:
    """Whether `cand` may draft for `s` in a shared round: a draft model
    still reading the prompt beside the target (Batch._follow), or one that
    would read all of it now beside other requests (`crowded`: every one in
    the batch would wait), does not; one that followed it prices its few
    tokens' catch-up (policy: setup_s)."""
    return cand.setup_s == 0.0 or not (s.following or (crowded and not s.followed))
