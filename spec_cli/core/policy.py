"""When drafting pays, and how far: an online cost model.  Pure, no I/O.

A step that drafts k tokens costs  T(k) = c(k+1) + k*d  -- c(n) the target's
batch of n, d the draft's cost per token -- and yields on average

    E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j

tokens, a_j the chance that draft token j is accepted once the ones before
it were.  The target alone makes 1/c(1) tokens a second.  Each step picks
the k that maximises E(k)/T(k), k = 0 (no drafting) included, so drafting
turns off when it does not pay and back on when it would:

  * c(n) starts from the curve probed at load (probe.py) and is then learned
    from the real steps: each measurement moves every size with the
    machine's pace, and its own size toward what was measured, so the
    curve's shape is learned as well as its level -- except a size's first
    measurement where it is cheaper than the curve said, which is taken as
    it is (noise only slows a batch: the curve was wrong there).  While
    drafting, one step in `plain_every` goes without, so c(1), the bar to
    beat, stays measured too; a large change of pace makes the next probe
    come soon;
  * d follows the draft's measured cost per token (0 for n-gram lookup); a
    draft model that has not read the prompt yet is charged its catch-up
    once, against the time it would save over the tokens still to come;
  * a_j follows the acceptance seen at each draft position, per proposer;
    a draft model's own confidence (its top probability) refines it token
    by token, so a draft stops early where it is unsure.  A lookup's
    sources (source.py: where it matched, how long, a copy or not) start
    from priors by position -- a first token is the doubtful one; once it
    holds, a copy mostly goes on -- and what any of them sees moves all the
    sources of the same origin a little (a log-odds shift): a text that
    copies its prompt shows it on short matches as on long ones.

Beside the model, a safeguard that believes only the clock: the realised
tokens per second of each proposer's drafting steps against plain steps,
over a recent window.  When drafting is losing it stops, whatever the model
predicts, and comes back only through probes that show it winning.  It
judges each kind of lookup apart (fresh matches, copies, contexts seen
often), so short guesses that lose do not stop copies that win.

While drafting is off, a short draft now and then (after `probe_every` steps,
then twice as long after each look that changes nothing) keeps the
acceptance estimate honest -- unless even an always-accepted draft could
not pay, as for a draft model nearly as slow as its target, or could not
pay back twice the catch-up the look would cost.  A free draft (a lookup)
still looks where that verdict rests on a batch size never measured: a
first load's curve is one noisy timing a size, and a curve that says no
draft can pay would otherwise never be put to the test.  For the same
reason a free draft that pays at k now and then drafts up to 2k + 1 where
that size was never measured.  Sizes between two measured ones follow the
line between them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .source import Source
from .stats import origin

EMA = 0.3
PACE_EMA = 0.3   # in log space
PACE_CHANGE = 1.5  # a pace this much off since the last look makes the next look come soon


def expected_tokens(accept: list[float]) -> float:
    """E(k) for per-position acceptance chances a_1..a_k."""
    total, chain = 1.0, 1.0
    for a in accept:
        chain *= a
        total += chain
    return total


class CostModel:
    """c(n), the seconds a target batch of n tokens takes on this machine:
    what the target's steps teach, kept across generations on it."""

    def __init__(self, prior: list[float]):
        self.prior = list(prior)            # c(n) at index n-1, from the probe
        self.pace = 1.0                     # the machine's pace against the prior, all sizes alike
        self._seen: dict[int, tuple[float, float]] = {}  # n -> (seconds, pace then)
        self._memo: dict[int, float] = {}   # c(n) until the next observation (a step asks it ~50 times)

    @classmethod
    def from_timings(cls, timings: dict[int, float], n_max: int) -> "CostModel":
        """Fill c(1..n_max) from measured batch timings (linear between points)."""
        known = sorted((n, s) for n, s in timings.items() if s > 0)
        if not known:
            known = [(1, 1.0)]
        out = []
        for n in range(1, n_max + 1):
            below = [p for p in known if p[0] <= n]
            above = [p for p in known if p[0] >= n]
            if below and above:
                (n0, s0), (n1, s1) = below[-1], above[0]
                out.append(s0 if n1 == n0 else s0 + (s1 - s0) * (n - n0) / (n1 - n0))
            elif below:  # past the last point: grow linearly at the last slope
                (n0, s0) = below[-1]
                slope = (s0 - known[0][1]) / max(n0 - known[0][0], 1) if len(known) > 1 else s0
                out.append(s0 + slope * (n - n0))
            else:
                out.append(above[0][1] * n / above[0][0])
        return cls(out)

    @property
    def verify_s(self) -> list[float]:
        return [self.c(n) for n in range(1, len(self.prior) + 1)]

    def _prior(self, n: int) -> float:
        if n <= len(self.prior):
            return self.prior[n - 1]
        return self.prior[-1] * n / len(self.prior)

    def c(self, n: int) -> float:
        n = max(1, n)
        got = self._memo.get(n)
        if got is None:
            got = self._memo[n] = self._c(n)
        return got

    def _c(self, n: int) -> float:
        if n in self._seen:
            seconds, pace = self._seen[n]
            return seconds * self.pace / pace
        # between two sizes measured, the line between them: a first load's
        # curve is one noisy timing of each size, and what was measured of
        # its neighbours says more of a size than that
        below = max((m for m in self._seen if m < n), default=0)
        above = min((m for m in self._seen if m > n), default=0)
        if below and above:
            lo, hi = self.c(below), self.c(above)
            return lo + (hi - lo) * (n - below) / (above - below)
        return self._prior(n) * self.pace

    def seen(self, n: int) -> bool:
        """Whether a batch of n has been measured (or lies between sizes that were)."""
        return n in self._seen or (any(m < n for m in self._seen) and any(m > n for m in self._seen))

    def observe_verify(self, n: int, seconds: float) -> None:
        """Learn from a measured batch of n: every size moves with the
        machine's pace (a busy machine slows them all), then size n moves
        toward what was measured (the curve's shape is learned too)."""
        if n < 1 or seconds <= 0:
            return
        self._memo.clear()
        if n not in self._seen and seconds < self.c(n):
            # a size's first measurement, cheaper than the curve said: noise only
            # ever slows a batch, so the curve (a first load's one timing of it, or
            # a line between sizes) was wrong there, not the machine's pace
            self._seen[n] = (seconds, self.pace)
            self._memo.clear()
            return
        self.pace *= (seconds / self.c(n)) ** PACE_EMA
        self._memo.clear()
        now = self.c(n)
        self._seen[n] = (now + EMA * (seconds - now), self.pace)
        self._memo.clear()

    def step_s(self, k: int, draft_cost: float) -> float:
        return self.c(k + 1) + k * draft_cost

    def rate(self, accept: list[float], draft_cost: float) -> float:
        return expected_tokens(accept) / self.step_s(len(accept), draft_cost)


def can_pay(cost: CostModel, draft_s: float, k_max: int, *, margin: float = 1.0) -> bool:
    """Could a draft whose every token is accepted beat the target alone by
    `margin` at some length up to k_max?  (If not by much, a real draft,
    some of whose tokens are rejected, loses: not worth running.)"""
    return any(cost.rate([1.0] * k, draft_s) > margin / cost.c(1) for k in range(1, k_max + 1))


@dataclass
class Acceptance:
    """Per-position acceptance chances of one proposer, learned online from
    its prior (see `prior`)."""

    rates: list[float]

    def observe(self, drafted: int, accepted: int) -> None:
        for i in range(min(drafted, len(self.rates))):
            if i > accepted:  # never reached: an earlier token was rejected
                break
            hit = 1.0 if i < accepted else 0.0
            self.rates[i] += EMA * (hit - self.rates[i])


SHIFT_RATE = 0.3   # log-odds per surprise: how fast a text's copiability is learned
SHIFT_MAX = 2.0


def _group(source: str) -> str:
    """What the safeguard judges as one (Source.group)."""
    return Source.of(source).group


def _lookup(source: str) -> bool:
    return Source.of(source).is_lookup


def _shifted(p: float, shift: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return 1.0 / (1.0 + math.exp(-(math.log(p / (1 - p)) + shift)))


UNKNOWN_PRIOR = 0.7  # acceptance expected of a draft nobody said more about


def unknown_prior(source: str, n: int) -> list[float]:
    """Acceptance chances before anything is seen, where the proposer says
    nothing of its own (each proposer's `acceptance_prior` does)."""
    return [UNKNOWN_PRIOR] * n


def passes(parts) -> list[int]:
    """The rows of each pass llama.cpp makes over the weights for a batch of
    (sequence, rows) parts, each sequence a KV cache of its own
    (llama_batch_allocr::split_equal, sequential): a pass takes the lowest
    sequence with rows left and the ones that follow it by one with rows
    left, the same number of rows from each (the fewest any has left).  So
    four sequences of one row each are one pass, [5, 1, 1, 1] two (4 rows,
    then 4), sequences 0 and 2 two."""
    left: dict[int, int] = {}
    for seq, rows in parts:
        if rows > 0:
            left[seq] = left.get(seq, 0) + rows
    out = []
    while left:
        seqs = sorted(left)
        run = seqs[:1]
        for seq in seqs[1:]:
            if seq != run[-1] + 1:
                break
            run.append(seq)
        n = min(left[seq] for seq in run)
        out.append(n * len(run))
        for seq in run:
            left[seq] -= n
            if not left[seq]:
                del left[seq]
    return out


def pooled_s(lengths, d: float, price) -> float:
    """Seconds of drafts of these lengths made together by one draft model,
    a draft batch a position (proposers.draft.draft_together), at `d`
    seconds a token alone: a batch of r rows costs d x price(r)/price(1),
    the target's curve standing for the draft's (the same machine, a model
    of the same family; on a GPU nearly flat, on a CPU nearly linear)."""
    if d <= 0 or not lengths:
        return 0.0
    c1 = price(1)
    return sum(d * price(sum(n > j for n in lengths)) / c1 for j in range(max(lengths)))


def trim_drafts(fixed, drafts, price) -> list[int]:
    """The batch's plan made no slower: each request chose its draft in turn
    (Load), so together the drafts may split the batch into passes that
    cost more than they yield.  `fixed`: (sequence, rows) parts that stay
    (prompt chunks, an editor's rows); `drafts`: per request (sequence, k,
    chances, seconds a drafted token, drafted together with the other
    pooled ones: a draft model's, pooled_s); `price(n)`: one pass of n
    rows.  Shortens drafts -- to nothing, or to another request's length so
    that they share passes -- while that makes more tokens a second for
    the whole batch; returns each request's k.

    Where the round has fixed parts, their seconds are paid whatever the
    drafts, and a round's tokens a second would count them against no
    token: the drafts would look cheap beside a prompt's chunk, and the
    passes they split it into cost more than they yield.  There a draft
    must yield, for the seconds it adds, the tokens a second the batch
    makes without the fixed parts (its best plan), as a second spent
    elsewhere would."""
    ks = [k for _, k, _, _, _ in drafts]
    pool_d = max((d for *_, d, pooled in drafts if pooled), default=0.0)

    def cost(ks, fixed) -> tuple[float, float]:  # (tokens made, seconds)
        parts = list(fixed) + [(seq, k + 1) for (seq, *_), k in zip(drafts, ks)]
        seconds = (sum(price(n) for n in passes(parts))
                   + sum(k * d for (*_, d, pooled), k in zip(drafts, ks) if not pooled)
                   + pooled_s([k for (*_, pooled), k in zip(drafts, ks) if pooled], pool_d, price))
        made = sum(expected_tokens(list(chances[:k])) for (_, _, chances, _, _), k in zip(drafts, ks))
        return made, seconds

    def rate(ks) -> float:
        made, seconds = cost(ks, ())
        return made / seconds if seconds > 0 else 0.0

    best = _shortened(ks, rate)
    if not fixed:
        return best
    r = rate(best)

    def value(ks) -> float:
        made, seconds = cost(ks, fixed)
        return made - r * seconds
    return _shortened(ks, value)


def _shortened(ks: list[int], score) -> list[int]:
    """Shorten drafts -- one (to nothing, or to another's length), or all
    to at most one length (nothing included: passes are shared, so one
    draft cut alone may only split them further) -- while that raises
    `score`; the plan where no such move does."""
    best = score(ks)
    while True:
        move = None
        lengths = {0, *ks}
        trials = [ks[:i] + [shorter] + ks[i + 1:] for i, k in enumerate(ks) for shorter in lengths if shorter < k]
        trials += [[min(k, cap) for k in ks] for cap in lengths]
        for trial in trials:
            v = score(trial)
            if v > best + 1e-9 * abs(best):
                best, move = v, trial
        if move is None:
            return ks
        ks = move


@dataclass(frozen=True)
class Load:
    """What else runs in the same target batch (several requests at once,
    run/batch.py): the other sequences' rows, the tokens they are expected
    to yield, and the seconds their drafting adds to the step.  Alone, all
    three are 0 and every formula below is the one-sequence one.

    Where `shape` is given (the batch's parts as (sequence, rows), this
    request's `seq` among them with one row), a step costs what llama.cpp's
    passes over those parts cost (`passes`), not c(all rows): a draft that
    makes its sequence longer than the others' costs a pass of its own.
    `following`: the requests not planned yet, as (sequence, the chances of
    the draft each could make), each taken to draft as many tokens as this
    one (where its chances reach), so that the first to plan sees what a
    batch drafting together costs and yields, not only what drafting alone
    among plain rows does.  `pool`: the lengths of the drafts planned before
    this one that a draft model makes together (a draft batch a position,
    pooled_s), at `pool_d` seconds a token alone; `extra_s` is the others'
    drafting, made each alone."""

    rows: int = 0
    tokens: float = 0.0
    extra_s: float = 0.0
    pool: tuple[int, ...] = ()
    pool_d: float = 0.0
    others: int = 0   # the other sequences: a one-time cost (a draft model's catch-up) stalls them too
    shape: tuple[tuple[int, int], ...] = ()
    seq: int = -1
    following: tuple[tuple[int, tuple[float, ...]], ...] = ()


ALONE = Load()


WINDOW = 32      # drafting steps per proposer kept by the safeguard
PLAIN_WINDOW = 16
MIN_DRAFTING, MIN_PLAIN = 8, 4   # evidence before the safeguard judges (plain: else c(1) is the bar)
MIN_BACK = 4     # probe steps that must win before a stopped proposer drafts again
PROBE_MARGIN = 2.0
FREE = 0.02   # a draft costing at most this share of a target token a token is free (a lookup)
SHAPE_K = 4   # a free look where the curve's size is unmeasured drafts this many (a batch of 5)


def _realised(window) -> float:
    seconds = sum(s for _, s in window)
    return sum(t for t, _ in window) / seconds if seconds > 0 else 0.0


class Policy:
    """Decides, step by step, how many tokens each proposer should draft."""

    def __init__(self, cost: CostModel, *, k_max: int, draft_s: dict[str, float] | None = None,
                 prior=unknown_prior, probe_every: int = 64, plain_every: int = 16):
        self.cost = cost
        self.prior = prior  # prior(source, n): acceptance chances of a source before any is seen
        self.draft_s = dict(draft_s or {})  # per proposer, seconds per draft token (its prior, then learned)
        self.k_max = k_max
        self.probe_every = probe_every
        self.plain_every = plain_every
        self.horizon = 1 << 30   # tokens still to come (the engine keeps it current)
        self.load = ALONE        # what shares the target's batch (run/batch.py keeps it current)
        self._drafting = 0
        self._wide = 0  # this step's draft is a wider look of this many tokens (_wider)
        self.accept: dict[str, Acceptance] = {}
        self._idle: dict[str, int] = {}
        self._wait: dict[str, int] = {}
        self._pace_then: dict[str, float] = {}
        self._steps: dict[str, deque] = {}      # group -> (tokens, seconds) of drafting steps
        self._plain: deque = deque(maxlen=PLAIN_WINDOW)
        self.stopped: set[str] = set()          # groups the safeguard has stopped
        self.pooled: set[str] = set()           # sources drafted together in a batch (Candidate.pooled)
        self._shift: dict[str, float] = {}      # origin -> log-odds shift of its lookup sources

    def _acc(self, proposer: str) -> Acceptance:
        if proposer not in self.accept:
            self.accept[proposer] = Acceptance(self.prior(proposer, self.k_max))
        return self.accept[proposer]

    def chances(self, source: str) -> list[float]:
        """Per-position acceptance chances of `source` now: its own learned
        rates, moved by what its origin's other sources taught."""
        rates = self._acc(source).rates
        shift = self._shift.get(origin(source), 0.0) if _lookup(source) else 0.0
        return [_shifted(r, shift) for r in rates] if shift else rates

    # -- a step's time and yield, the batch around this sequence included --
    def step_s(self, k: int, d: float, pooled: bool = False) -> float:
        """Seconds of a step in which this sequence drafts k tokens: the
        target batch of its k + 1 rows and the others', and every drafting
        (the requests that follow drafting as this one); a `pooled` draft
        is made together with the others' pooled ones (Load.pool)."""
        load, c = self.load, self.cost.c
        more = {load.seq: k, **{seq: min(k, len(rates)) for seq, rates in load.following}}
        mine = list(more.values())  # this draft, and those that follow
        if load.shape:
            verify = sum(c(n) for n in passes([(seq, rows + more.get(seq, 0)) for seq, rows in load.shape]))
        else:
            verify = c(load.rows + k + 1)
        if pooled:
            drafting = pooled_s([*load.pool, *mine], max(d, load.pool_d), c)
        else:
            drafting = sum(mine) * d + pooled_s(load.pool, load.pool_d, c)
        return verify + drafting + load.extra_s

    def plain_s(self) -> float:
        """Seconds of the step with this sequence not drafting."""
        return self.step_s(0, 0.0)

    def rate(self, rates: list[float], d: float, pooled: bool = False) -> float:
        """This sequence's tokens a second at draft chances `rates`."""
        return expected_tokens(rates) / self.step_s(len(rates), d, pooled)

    def _batch_gains(self, rates: list[float], d: float, pooled: bool = False) -> bool:
        """Does the whole batch make more tokens a second with this draft
        than with this sequence plain?  (Alone: the same as `rate` beating
        the target alone.)  Speculation pays less as the batch grows: its
        rows cost the others' time as well."""
        load = self.load
        if not load.rows:
            return True
        k = len(rates)  # this request's draft, and as long a one for those that follow
        follow = sum(expected_tokens(list(r[:k])) for _, r in load.following)
        n = len(load.following)
        return ((load.tokens + expected_tokens(rates) + follow) / self.step_s(k, d, pooled)
                > (load.tokens + 1.0 + n) / self.plain_s())

    def _saves(self, rates: list[float], d: float, setup_s: float, pooled: bool = False) -> bool:
        """Does drafting len(rates) tokens a step beat the target alone over
        the tokens still to come, a one-time `setup_s` included?"""
        per_token = self.step_s(len(rates), d, pooled) / expected_tokens(rates)
        saved = self.plain_s() - per_token
        return saved > 0 and saved * self.horizon > setup_s * (1 + self.load.others)

    def _best(self, rates: list[float], d: float, limit: int, pooled: bool = False) -> int:
        best_k, best = 0, 1.0 / self.plain_s()
        total, chain = 1.0, 1.0  # expected_tokens(rates[:k]), grown a position at a time
        for k in range(1, min(limit, len(rates)) + 1):  # (past the rates a step only costs more)
            chain *= rates[k - 1]
            total += chain
            r = total / self.step_s(k, d, pooled)
            if r > best:
                best_k, best = k, r
        while best_k and not self._batch_gains(rates[:best_k], d, pooled):
            best_k -= 1  # a shorter draft costs the others less
        return best_k

    def could_pay(self, source: str, load: Load = ALONE, setup_s: float = 0.0, pooled: bool = False) -> bool:
        """Would `source` draft at all at `load` (alone unless told), on what
        is known of it now, its one-time `setup_s` (a draft model's catch-up
        on the request's text, which stalls the whole batch) paid back over
        the tokens still to come?  A draft model that would not need not
        read the request's text (run/batch.py: Batch._follow)."""
        if _group(source) in self.stopped:
            return False
        rates, d = self.chances(source), self.draft_s.get(source, 0.0)
        now, self.load = self.load, load
        try:
            k = self._best(rates, d, self.k_max, pooled)
            return k > 0 and (setup_s <= 0.0 or self._saves(rates[:k], d, setup_s, pooled))
        finally:
            self.load = now

    def outlook(self, candidates, limit: int) -> tuple[float, ...]:
        """The chances of the likeliest draft among `candidates` (of up to
        `limit` tokens), for the requests planned before this one in a batch
        (Load.following); () where none may draft."""
        best: tuple[float, ...] = ()
        for cand in candidates:
            n = min(limit, cand.limit, self.k_max)
            if n <= 0 or _group(cand.source) in self.stopped:
                continue
            rates = tuple(self.chances(cand.source)[:n])
            if expected_tokens(list(rates)) > expected_tokens(list(best)):
                best = rates
        return best

    def choose(self, candidates, limit: int):
        """Once per step: which candidate drafts, and how far.

        `candidates` are what the proposers could draft now (each with
        `source`, `limit` and `setup_s`, see proposers.Candidate).  Returns
        (candidate, k), or (None, 0) for a plain step.  A `sure` candidate
        (tokens a constraint forces) drafts as far as it and `limit` go."""
        self._wide = 0
        for cand in candidates:
            if getattr(cand, "sure", False) and min(limit, cand.limit, self.k_max) > 0:
                return cand, min(limit, cand.limit, self.k_max)
        best, best_rate = None, 1.0 / self.plain_s()
        for cand in candidates:
            n = min(limit, cand.limit, self.k_max)
            if n <= 0 or _group(cand.source) in self.stopped:
                continue
            d = self.draft_s.get(cand.source, 0.0)
            rates = self.chances(cand.source)
            pooled = cand.pooled
            if pooled:
                self.pooled.add(cand.source)
            k = self._best(rates, d, n, pooled)
            if (k > 0 and self._saves(rates[:k], d, cand.setup_s, pooled)
                    and self.rate(rates[:k], d, pooled) > best_rate):
                best, best_rate = (cand, k), self.rate(rates[:k], d, pooled)
        if best is not None:
            self._idle[best[0].source] = 0
            self._wait[best[0].source] = self.probe_every
            self._drafting += 1
            if self._drafting % self.plain_every == 0:
                return None, 0  # a plain step now and then keeps c(1), the bar to beat, measured
            cand, k = best
            return cand, self._wider(cand, k, min(limit, cand.limit, self.k_max))
        for cand in candidates:
            k = self._probe(cand, min(limit, cand.limit, self.k_max))
            if k > 0:
                return cand, k
        return None, 0

    def _free(self, cand) -> bool:
        """A draft that costs next to nothing (a lookup: its host time only)."""
        return cand.setup_s == 0.0 and self.draft_s.get(cand.source, 0.0) <= FREE * self.cost.c(1)

    def _wider(self, cand, k: int, n: int) -> int:
        """k, or now and then (after `plain_every` steps, then twice as
        long after each time) a free draft of up to 2k + 1 where that batch
        size was never measured: the curve there may be a noisy first
        load's, and drafts of k never measure it."""
        wide = min(n, 2 * k + 1)
        if wide <= k or not self._free(cand) or self.cost.seen(wide + 1):
            return k
        key = cand.source + " wider"
        idle, wait = self._idle.get(key, 0) + 1, self._wait.get(key, self.plain_every)
        if idle < wait:
            self._idle[key] = idle
            return k
        self._idle[key], self._wait[key] = 0, min(wait * 2, 1024)
        self._wide = wide
        return wide

    def _probe(self, cand, n: int) -> int:
        """Not worth it on what we know, or the clock says it is losing.  If
        even a draft that is always accepted would not pay (the draft is too
        slow for this target, or too slow to pay its catch-up back twice over
        the tokens to come), there is nothing to learn; else look again
        now and then, waiting twice as long after each look that did not
        change the answer, and soon again when the machine's pace changed."""
        if n <= 0:
            return 0
        source = cand.source
        d = self.draft_s.get(source, 0.0)
        # a look that costs a catch-up (a draft model reading what it missed)
        # is taken only where an always-accepted draft would pay it back twice
        ideal = next((k for k in range(1, n + 1)
                      if self._saves([1.0] * k, d, PROBE_MARGIN * cand.setup_s, cand.pooled)), 0)
        shape = ideal == 0 and self._free(cand) and not self.cost.seen(min(n, SHAPE_K) + 1)
        if shape:
            # a free draft that the curve says cannot pay, where that size was never
            # measured: the curve may be a noisy first load's, and only a draft of
            # that length measures it (then the look backs off like any other)
            ideal = min(n, SHAPE_K)
        if ideal == 0:
            return 0
        idle = self._idle.get(source, 0) + 1
        wait = self._wait.get(source, self.probe_every)
        then = self._pace_then.setdefault(source, self.cost.pace)
        if max(then / self.cost.pace, self.cost.pace / then) > PACE_CHANGE:
            wait = self.probe_every  # the machine changed: look again soon
            self._pace_then[source] = self.cost.pace
        if idle < wait:
            self._idle[source] = idle
            return 0
        self._idle[source] = 0
        self._wait[source] = min(wait * 2, 1024)
        self._pace_then[source] = self.cost.pace
        if shape:
            self._wide = ideal
        return ideal

    def keep_going(self, proposer: str, chain: list[float]) -> bool:
        """After drafting len(chain) tokens whose acceptance chances (the
        draft's confidences) are `chain`, is one more worth it?"""
        k = len(chain)
        if k >= self.k_max:
            return False
        if k < self._wide:
            return True  # a wider look (see _wider) goes its whole length: that size is what it measures
        d, pooled = self.draft_s.get(proposer, 0.0), proposer in self.pooled
        nxt = self.chances(proposer)[k]
        return (self.rate(chain + [nxt], d, pooled) > self.rate(chain, d, pooled)
                and self._batch_gains(chain + [nxt], d, pooled))

    def observe(self, proposer: str, *, drafted: int, accepted: int, draft_s: float,
                verify_s: float, batch: bool = False, unit_s: float | None = None) -> None:
        """Learn from a step.  With `batch` (several sequences in one target
        batch) the caller teaches the cost model the batch's size and time
        itself, once, and `verify_s` is this sequence's share: what its own
        rows alone would have cost at the pace the batch showed.  `unit_s`:
        a draft made together with others' (pooled), what a token of it
        would have cost alone (draft_s is its share of the draft batches)."""
        if not batch:
            self.cost.observe_verify(drafted + 1, verify_s)
        if not drafted:
            self._plain.append((1, verify_s))
            return
        if _lookup(proposer):
            self._learn_shift(proposer, drafted, accepted)
        self._acc(proposer).observe(drafted, accepted)
        old = self.draft_s.get(proposer)
        per = draft_s / drafted if unit_s is None else unit_s
        self.draft_s[proposer] = per if old is None else old + EMA * (per - old)
        g = _group(proposer)  # the safeguard judges each kind of lookup as one, whatever the match length
        steps = self._steps.setdefault(g, deque(maxlen=WINDOW))
        steps.append((accepted + 1, draft_s + verify_s))
        self._judge(g, steps)

    def _learn_shift(self, source: str, drafted: int, accepted: int) -> None:
        """How far this text copies from where `source` matched, learned
        from every match length at once: each token the draft reached moves
        the origin's shift by its surprise (hit minus predicted chance)."""
        g, chances = origin(source), self.chances(source)
        shift = self._shift.get(g, 0.0)
        for i in range(min(drafted, accepted + 1, len(chances))):
            shift += SHIFT_RATE * ((1.0 if i < accepted else 0.0) - chances[i])
        self._shift[g] = max(-SHIFT_MAX, min(SHIFT_MAX, shift))

    def _judge(self, g: str, steps: deque) -> None:
        """The safeguard: stop a proposer whose drafting steps realise fewer
        tokens a second than plain steps; let it back after probes win."""
        # the bar: plain steps' realised rate; until there are enough of them
        # (while drafting, one step in plain_every is plain), the cost model's
        # c(1), which every step's timing moves with the machine's pace
        plain = _realised(self._plain) if len(self._plain) >= MIN_PLAIN else 1.0 / self.cost.c(1)
        if g not in self.stopped:
            if len(steps) >= MIN_DRAFTING and _realised(steps) < plain:
                self.stopped.add(g)
                steps.clear()
        elif len(steps) >= MIN_BACK and _realised(list(steps)[-MIN_BACK:]) >= plain:
            self.stopped.discard(g)  # the latest probes win on the clock
            steps.clear()
