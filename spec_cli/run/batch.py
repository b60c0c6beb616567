"""Several generations at once on one pair: every running request's rows
in one target batch a round (continuous batching, as llama-server's slots).

Each request is a `Stream`: its own sequence in both models' contexts, its
own `Generation` (context, seed, rule, stops, policy) and proposer.  A
round (`Batch.round`):

  1. a request that has just arrived reads its prompt in chunks, inside
     the round's batch (rows not read), so a long prompt does not hold up
     the others' tokens: at most `chunk` prompt tokens a round (an
     editor's, all that fits);
  2. each running request's policy chooses its draft knowing the batch
     around it (core.policy.Load: the others' rows, their expected tokens
     and their drafting time, and the requests after it, which may draft
     too) -- a draft must make the whole batch faster, and its own request
     faster than a plain step at that load; the batch is priced as
     llama.cpp runs it, a pass over the weights for each run of
     consecutive sequences with as many rows each (core.policy.passes),
     and the plan is trimmed where its drafts split it into passes that
     cost more than they yield (core.policy.trim_drafts), and again once
     drafted (a draft model stops early where it is unsure).  So requests
     draft together or not at all, speculation shrinks as the batch
     grows, and stops by itself where rows cost as much as tokens.  The
     proposers draft (draft models together, one draft batch a position:
     proposers.draft.draft_together).  A draft model reads each new
     request's prompt beside the target, chunk by chunk, in one draft
     batch a round (Batch._follow), so that the request drafts with it
     once its prompt is read, with no catch-up that every request in the
     batch would wait for -- where it would draft at the batch's size at
     all, and the reading pays back (on a CPU, beside many requests, it
     would not: the whole batch would wait for it for nothing);
  3. the target decodes every request's [last token, draft...] in ONE
     llama_decode (Model.decode_batch);
  4. each request's rule keeps the longest valid prefix of its own draft
     from its own rows, and its sequence is rewound on its own;
  5. the cost model learns c(the batch's rows) once, from a round that was
     one pass.

A request joins at the next round and leaves the moment it ends.  One
request running alone goes through engine.step, exactly as `generate`.
An editor's request whose rounds have taken more than EDITOR_PACE times
what they would have cost it alone gets rounds of editors only until it
is back within; beside a running editor the others' prompts are read only
as far as that pace's slack allows (Batch._editors_allow), and in the round
where an editor reads its prompt no one else drafts.

The text of a request does not depend on what runs beside it, but for
rounding: its rows come from a batch of another shape than alone, and a
matrix product's sums may round differently there; the coupled rule's
choice moves only where two tokens' logits were within that rounding (a
near-tie).  `--deterministic` runs one request at a time (see serve).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..core.policy import ALONE, Load, expected_tokens, passes, pooled_s, trim_drafts
from ..core.tokens import common_prefix
from .engine import Generation, Round, Step, keep_going, legal_draft, step as one_step
from .proposers.base import EMPTY, Proposal
from .proposers.draft import DraftModel, ModelDrafts

CHUNK = 128  # prompt tokens read a round, over all the requests that are reading
# a request may fall this far behind what it would have got with no request
# drafting (a share of those tokens, and at least FAIR_TOKENS); then the
# requests ahead of it draft nothing until it is back within the bound
FAIR_SHARE = 0.1
FAIR_TOKENS = 4.0
# an editor's request (/infill) may take this many times the seconds its
# rounds would have taken alone; past it, rounds run editors only until it
# is back within (the others wait: an editor's latency comes first)
EDITOR_PACE = 1.25
EDITOR_CHUNK = 16  # the least of another's prompt read beside a running editor (Batch._editors_allow)


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
    # fairness (Batch._fair): tokens this request got in shared rounds, and
    # those it would have got in the same seconds with no request drafting
    got: float = 0.0
    owed: float = 0.0
    # an editor's pace (Batch._pace): seconds of the rounds it was in, and
    # what those rounds would have cost it alone
    spent_s: float = 0.0
    alone_s: float = 0.0
    # this round's draft (Batch.round)
    prop: Proposal = EMPTY
    draft: list = field(default_factory=list)
    draft_s: float = 0.0        # the user's wait for it (on a simulated clock, what the clock charges)
    steady_s: float = 0.0       # what the policy learns of its cost (proposers.base.Proposal.steady_s)
    unit_s: float | None = None  # drafted with others: a token's seconds alone (Policy.observe)
    host_draft_s: float = 0.0
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


def _drafter(gen: Generation) -> DraftModel | None:
    """`gen`'s proposer's own draft model, which may read its text beside
    the target (Batch._follow); None for the others (an MTP block reads the
    target's rows)."""
    dm = getattr(gen.proposer, "draft_model", gen.proposer)
    return dm if isinstance(dm, DraftModel) and isinstance(dm.source, ModelDrafts) else None


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
        s = Stream(seq, gen, unread=prompt[keep:], editor=editor, drafter=_drafter(gen))
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
        (core.policy.passes), so every round after it would cost a pass
        more (on a GPU about a whole step).  The request in the highest
        sequence moves to the lowest free one between them, its caches
        copied there (Pair.copy_seq; through `spare`, Pair.swap_seq, where
        what the free sequence holds is kept).  `free`: the sequences no
        request holds.  Returns the moves, (from, to)."""
        moves: list[tuple[int, int]] = []
        if self.turns:  # one request's batch a round: no passes to join
            return moves
        free = set(free)
        while len(self.streams) > 1:
            seqs = sorted(s.seq for s in self.streams)
            holes = [f for f in free if seqs[0] < f < seqs[-1]]
            if not holes:
                break
            s = max(self.streams, key=lambda s: s.seq)
            src, dst = s.seq, min(holes)
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
        reading = self._reading_parts()
        running = [s for s in self.streams if not s.reading]
        if any(s.editor and s.spent_s > EDITOR_PACE * s.alone_s for s in running):
            # an editor fell behind its pace alone: a round of editors only
            running = [s for s in running if s.editor]
            reading = [(s, tokens) for s, tokens in reading if s.editor]
        if not running and not reading:
            return []
        if len(running) == 1 and not reading:
            out = [(running[0], self._alone(running[0]))]
            charged = out[0][1].verify_s + out[0][1].draft_s
        else:
            out, charged = self._together(running, reading)
        self.last_s = time.perf_counter() - t0
        self.charged_s = self.last_s if self.clock is None else charged
        self._pace(out, reading)
        return out

    def _pace(self, out: list[tuple[Stream, Step]], reading: list[tuple[Stream, list[int]]]) -> None:
        """Count each editor's seconds in this round against what the round
        would have cost it alone (its rows, its drafting): EDITOR_PACE keeps
        the first within a share of the second."""
        price = self._price
        alone = len(out) == 1 and not reading
        for s, _ in out:
            if s.editor:
                s.spent_s += self.charged_s
                s.alone_s += self.charged_s if alone or price is None else (
                    price(len(s.draft) + 1) + s.draft_s)
        for s, _ in reading:
            if s.editor:  # it reads its prompt in one batch, as alone (the others' rows beside it are few)
                s.spent_s += self.charged_s
                s.alone_s += self.charged_s

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
        return [(s, self._alone(s))]

    def _reading_parts(self) -> list[tuple[Stream, list[int]]]:
        """This round's prompt chunks: at most `chunk` tokens while others
        run (their tokens wait for the batch), as many as a batch holds
        while none does."""
        if not any(s.reading for s in self.streams):
            return []  # most rounds: the rest is a limit() a request and the editors' slack, for nothing
        budget = self.chunk if any(not s.reading for s in self.streams) else self.target.n_batch
        # an editor reads as much as the batch holds beside the others' rows
        # (editors come first in the streams): its latency comes first
        room = self.target.n_batch - sum(s.gen.limit() + 1 for s in self.streams if not s.reading)
        parts = []
        editors = any(s.reading and s.editor for s in self.streams)
        allow = self._editors_allow()  # and the others read no more than a running editor's pace allows
        for s in self.streams:
            if s.reading and budget > 0 and (s.editor or not editors):  # others' chunks wait for an editor's
                take = s.unread[:max(budget, room) if s.editor else min(budget, allow)]
                if not take:
                    break
                parts.append((s, take))
                budget -= len(take)
                room -= len(take)
                allow -= 0 if s.editor else len(take)
        return parts

    def _editors_allow(self) -> float:
        """The others' prompt tokens a round may read beside the running
        editors: what fits in the slack of their pace (EDITOR_PACE times
        their seconds alone, less what they spent), read once it makes a
        chunk of EDITOR_CHUNK at least.  On a CPU a 128-token chunk costs an
        editor some twenty steps of its own, a second and a half beside a
        2-second completion."""
        editors = [s for s in self.streams if s.editor and not s.reading]
        price = self._price
        if not editors or price is None:
            return float("inf")
        slack = min(EDITOR_PACE * s.alone_s - s.spent_s for s in editors)
        rows = sum(not s.reading for s in self.streams)
        lo, hi = 0, self.chunk  # the most tokens whose rows fit in the slack (c is increasing)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if price(rows + mid) - price(rows) <= slack else (lo, mid - 1)
        return lo if lo >= min(EDITOR_CHUNK, self.chunk) else 0

    def _ready(self, s: Stream) -> None:
        s.reading = False
        self.pair.use(s.seq)
        s.gen.prompt_read(s.evaluated, s.read_s)

    def _alone(self, s: Stream) -> Step:
        """One request: `generate`'s round, its fast paths included."""
        g = s.gen
        self.pair.use(s.seq)
        self.target.candidates_k = g.candidates_k
        if g.policy is not None:
            g.policy.load = ALONE
        r = one_step(self.target, g.proposer, g.policy, g.context, g.limit(), g.pick, g.cfg.clock)
        self.last_rows = len(r.draft) + 1
        return g.settle(r)

    def _together(self, running: list[Stream], reading: list[tuple[Stream, list[int]]]
                  ) -> tuple[list[tuple[Stream, Step]], float]:
        """The round's one batch; returns each running request's step, and
        what the simulated clock charges for the round (drafting included)."""
        target, timer = self.target, self.target.timer
        t0 = time.perf_counter()
        n_read = sum(len(tokens) for _, tokens in reading)
        followed_s = self._follow(reading, running)
        self._draft_all(running, reading)
        parts = [(s.seq, tokens, False) for s, tokens in reading]
        parts += [(s.seq, [s.context[-1], *s.draft]) for s in running]
        rows_n = sum(len(s.draft) + 1 for s in running)
        t1, d1 = time.perf_counter(), timer.seconds
        rows = target.decode_batch(parts)[len(reading):]
        decoded_s = timer.seconds - d1
        for s, tokens in reading:  # the prompt's chunk is in the cache
            s.unread = s.unread[len(tokens):]
            s.evaluated += len(tokens)
            s.read_s += decoded_s * len(tokens) / (n_read + rows_n)
        self.last_rows = rows_n + n_read
        picks = []
        for s, r in zip(running, rows):
            picks.append(s.gen.pick(r, s.draft, s.prop))
            target.use(s.seq)
            target.truncate(len(s.context) + picks[-1][0])
        t2 = time.perf_counter()
        verify_s, host_verify = t2 - t1, max(t2 - t1 - (timer.seconds - d1), 0.0)
        clock = self.clock
        shape = passes([(s.seq, len(tokens)) for s, tokens in reading]
                       + [(s.seq, len(s.draft) + 1) for s in running])
        if clock is not None:  # the simulated machine's price of llama.cpp's passes, whoever's rows
            verify_s = sum(clock.verify_s(n) for n in shape) + host_verify
        cost = target.costs
        if cost is not None and clock is None and not reading and len(shape) == 1:
            cost.observe_verify(rows_n, verify_s)  # c(n) is one pass's price
        out = []
        for s, r, (n_acc, token) in zip(running, rows, picks):
            g = s.gen
            if g.policy is not None:
                # what this request's rows alone would have cost at the pace the batch
                # showed: its passes' price (the prompts' chunks' included) against
                # their seconds; not a share of the chunks' seconds, which are not its
                c = g.policy.cost.c
                share = verify_s * c(len(s.draft) + 1) / max(sum(c(n) for n in shape), 1e-9)
                g.policy.observe(s.prop.source, drafted=len(s.draft), accepted=n_acc,
                                 draft_s=s.steady_s, verify_s=share, batch=True, unit_s=s.unit_s)
            rnd = Round(s.draft, n_acc, token, s.prop.source, s.draft_s, verify_s, r,
                        s.host_draft_s + host_verify, s.host_draft_s)
            out.append((s, g.settle(rnd, r)))
        for s, _ in reading:
            if not s.unread:
                self._ready(s)
        charged = verify_s + sum(s.draft_s for s in running) + followed_s
        self._fair(out, charged if clock is not None else time.perf_counter() - t0,
                   [(s.seq, len(tokens)) for s, tokens in reading])
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
        with theirs where they have one (core.policy.Load.following)?  A
        fixed draft length (no policy) was asked for: it always would."""
        policy = s.gen.policy
        if policy is None:
            return True
        s.gen.limit()  # the policy's horizon: the tokens still to come
        others = [o for o in streams if o is not s]
        rates = tuple(policy.chances(dm.name))
        load = Load(rows=len(others), tokens=float(len(others)), others=len(others),
                    shape=tuple(sorted((o.seq, 1) for o in streams)), seq=s.seq,
                    following=tuple((o.seq, rates) for o in others if o.drafter is not None))
        return policy.could_pay(dm.name, load, setup_s=dm.catch_up_s(behind), pooled=True)

    def _draft_all(self, running: list[Stream], reading: list[tuple[Stream, list[int]]]) -> None:
        """Each running request's draft: its policy, told the batch around
        it, chooses (in order: editors first, each after those before it,
        the ones after it taken to draft as it does where they can: see
        core.policy.Load);
        then the draft model drafts for every request that chose it, all
        together, and the other proposers (lookup, MTP) for each alone."""
        timer = self.target.timer
        behind = [s for s in running if s.owed - s.got > max(FAIR_TOKENS, FAIR_SHARE * s.owed)]
        editor_reads = any(s.editor for s, _ in reading)
        offers = []  # each request's draft limit, candidates, the chances of its likeliest draft, seconds
        for s in running:
            g, policy = s.gen, s.gen.policy
            self.pair.use(s.seq)
            k = g.limit() if not behind or s in behind else 0  # a request fell behind: the others wait
            if editor_reads and not s.editor:
                k = 0  # an editor's prompt, its longest round: the others' drafts' rows would lengthen it
            t0 = time.perf_counter()
            cands = g.proposer.candidates(g.context) if k > 0 else []
            if s.following or (len(running) > 1 and not s.followed):
                # a draft model still reading the prompt beside the target (_follow), or
                # one that would read all of it now (every request in the batch would
                # wait), does not draft here; one that followed it prices its few
                # tokens' catch-up (policy: setup_s)
                cands = [c for c in cands if c.setup_s == 0.0]
            outlook = policy.outlook(cands, k) if policy is not None else ()
            offers.append((k, cands, outlook, time.perf_counter() - t0))
        # the batch's parts as llama.cpp will run them: the prompts' chunks, and
        # a row each for the running requests until each has chosen its draft
        rows_of = {s.seq: len(tokens) for s, tokens in reading}
        rows_of.update({s.seq: 1 for s in running})
        tokens = extra = pool_d = 0.0
        pool = []  # the lengths of the drafts a draft model makes together (Load.pool)
        plans = []
        drafts = []  # for trim_drafts: (sequence, k, chances, seconds a drafted token, pooled)
        for i, (s, (k, cands, _, spent)) in enumerate(zip(running, offers)):
            g, policy = s.gen, s.gen.policy
            self.pair.use(s.seq)
            t0 = time.perf_counter()
            if policy is not None:
                policy.load = Load(rows=sum(rows_of.values()) - 1, tokens=tokens, extra_s=extra,
                                   pool=tuple(pool), pool_d=pool_d,
                                   others=len(running) - 1, shape=tuple(rows_of.items()), seq=s.seq,
                                   following=tuple((o.seq, offers[j][2])
                                                   for j, o in enumerate(running) if j > i))
            cand, k = policy.choose(cands, k) if policy else (cands[0] if cands else None, k)
            k = min(k, cand.limit) if cand else 0
            tokens += 1.0
            if cand and k > 0 and policy is not None:
                chances, d = tuple(policy.chances(cand.source)[:k]), policy.draft_s.get(cand.source, 0.0)
                rows_of[s.seq] += k
                tokens += expected_tokens(list(chances)) - 1.0
                if cand.pooled:
                    pool.append(k)
                    pool_d = max(pool_d, d)
                else:
                    extra += d * k
                drafts.append((s.seq, k, chances, d, cand.pooled))
            else:
                drafts.append((s.seq, 0, (), 0.0, False))
            plans.append((s, cand, k, spent + time.perf_counter() - t0))
        # the plan is trimmed where every request's policy chose its draft; a fixed
        # length (--fixed, bench's draft@K) is what was asked for, and stays
        price = self._price if all(s.gen.policy for s in running) else None
        chunks = [(s.seq, len(tokens)) for s, tokens in reading]
        if price is not None and any(k > 0 for _, k, *_ in drafts):
            ks = trim_drafts(chunks, drafts, price)
            plans = [(s, cand, k, spent) for (s, cand, _, spent), k in zip(plans, ks)]
        together, alone = [], []
        for s, cand, k, spent in plans:
            s.prop, s.draft, s.draft_s, s.steady_s, s.host_draft_s = EMPTY, [], spent, spent, spent
            s.unit_s = None
            if not cand or k <= 0:
                continue
            batched = getattr(s.gen.proposer, "batched", None)
            dm = batched(cand) if batched is not None else None
            (together if dm is not None else alone).append((s, cand, k, dm))
        if len(together) == 1:  # one draft model's draft: as alone (its fast path)
            alone, together = alone + together, []
        for s, cand, k, _ in alone:
            t0, d0 = time.perf_counter(), timer.seconds
            self.pair.use(s.seq)
            s.prop = s.gen.proposer.draft(s.gen.context, cand, k, keep_going(s.gen.policy, cand))
            self._drafted(s, k, time.perf_counter() - t0, timer.seconds - d0)
        if together:
            from .proposers.draft import draft_together

            t0, d0 = time.perf_counter(), timer.seconds
            props = draft_together([(dm, s.seq, s.gen.context, cand, k, keep_going(s.gen.policy, cand))
                                    for s, cand, k, dm in together])
            spent, decoded = time.perf_counter() - t0, timer.seconds - d0
            lengths = [len(p.tokens) for p in props]
            total = max(sum(lengths), 1)
            clock = self.clock
            if clock is not None:  # the simulated draft model's batches, a position each
                charged = clock.draft_batch_s(lengths)
            # what a token would have cost alone, for the policies to learn (they price
            # drafting together themselves: pooled_s); the batches' time over their
            # sizes in tokens alone, as pooled_s weighs them
            units = pooled_s(lengths, 1.0, self._price) if self._price is not None else 0.0
            for (s, cand, k, _), prop in zip(together, props):
                s.prop = prop
                share = len(prop.tokens) / total
                self._drafted(s, k, spent * share, decoded * share)
                if clock is not None:
                    s.draft_s = s.steady_s = charged * share + s.host_draft_s
                if units > 0:
                    s.unit_s = (charged if clock is not None else spent) / units
        if price is not None and any(s.draft for s in running):
            # the drafts as made: a draft model stops where it is unsure, so drafts
            # planned to one length come back uneven, and would split the batch into
            # passes again; their drafting is spent, their rows are not
            made = [(s.seq, len(s.draft), tuple(s.gen.policy.chances(s.prop.source)[:len(s.draft)]), 0.0, False)
                    if s.draft else (s.seq, 0, (), 0.0, False) for s in running]
            for s, k in zip(running, trim_drafts(chunks, made, price)):
                s.draft = s.draft[:k]

    def _fair(self, out: list[tuple[Stream, Step]], seconds: float, reading: list[tuple[int, int]]) -> None:
        """Count what each request got this round against what it would have
        got in the same seconds had no request drafted: a round of one row
        each (and the same prompt chunk), as the cost model prices it."""
        if len(out) < 2:
            return
        plain = passes([(s.seq, 1) for s, _ in out] + list(reading))
        price = self._price
        plain_s = sum(price(n) for n in plain) if price is not None else 0.0
        if plain_s <= 0:
            return
        for s, st in out:
            s.owed += seconds / plain_s
            s.got += len(st.tokens)

    def _drafted(self, s: Stream, k: int, seconds: float, decoded: float) -> None:
        """`s`'s draft is in: its tokens, and what it cost."""
        s.draft = legal_draft(s.gen.pick, s.prop.tokens[:k], s.prop)
        s.draft_s += seconds
        s.host_draft_s = max(s.draft_s - decoded, 0.0)
        s.steady_s = s.draft_s if s.prop.steady_s is None else s.prop.steady_s
        clock = self.clock
        if clock is not None:
            s.draft_s = s.steady_s = clock.draft_s(s.prop.model_tokens, s.prop.model_read) + s.host_draft_s
