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
  * a_j follows the acceptance seen at each draft position, per proposer,
    starting where the earlier generations on the same target left it
    (acceptance.Learned: a server's requests, a chat's turns); a draft
    model's own confidence (its top probability) refines it token by
    token, so a draft stops early where it is unsure.  A lookup's
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

from collections import deque

from .acceptance import SHIFT_MAX, SHIFT_RATE, Acceptance, Learned, group_of, is_lookup, shifted, unknown_prior
from .batching import ALONE, Load, passes, pooled_s
from .cost import EMA, CostModel, expected_tokens
from .stats import origin

PACE_CHANGE = 1.5  # a pace this much off since the last look makes the next look come soon


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
                 prior=unknown_prior, probe_every: int = 64, plain_every: int = 16, learned: Learned | None = None):
        self.cost = cost
        self.prior = prior  # prior(source, n): acceptance chances of a source before any is seen
        self.learned = learned  # what earlier generations on the target saw (acceptance.Learned)
        self.draft_s = dict(draft_s or {})  # per proposer, seconds per draft token (its prior, then learned)
        self.k_max = k_max
        self.probe_every = probe_every
        self.plain_every = plain_every
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
            prior = self.prior(proposer, self.k_max)
            self.accept[proposer] = Acceptance(self.learned.start(proposer, prior) if self.learned else prior)
        return self.accept[proposer]

    def chances(self, source: str) -> list[float]:
        """Per-position acceptance chances of `source` now: its own learned
        rates, moved by what its origin's other sources taught."""
        rates = self._acc(source).rates
        shift = self._shift.get(origin(source), 0.0) if is_lookup(source) else 0.0
        return [shifted(r, shift) for r in rates] if shift else rates

    # -- a step's time and yield, the batch around this sequence included --
    def step_s(self, k: int, d: float, pooled: bool = False, load: Load = ALONE) -> float:
        """Seconds of a step in which this sequence drafts k tokens: the
        target batch of its k + 1 rows and the others', and every drafting
        (the requests that follow drafting as this one); a `pooled` draft
        is made together with the others' pooled ones (Load.pool)."""
        c = self.cost.c
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

    def plain_s(self, load: Load = ALONE) -> float:
        """Seconds of the step with this sequence not drafting."""
        return self.step_s(0, 0.0, load=load)

    def rate(self, rates: list[float], d: float, pooled: bool = False, load: Load = ALONE,
             setup_s: float = 0.0) -> float:
        """This sequence's tokens a second at draft chances `rates` (in a
        step that also pays a one-time `setup_s`)."""
        return expected_tokens(rates) / (self.step_s(len(rates), d, pooled, load) + setup_s)

    def _batch_gains(self, rates: list[float], d: float, pooled: bool, load: Load) -> bool:
        """Does the whole batch make more tokens a second with this draft
        than with this sequence plain?  (Alone: the same as `rate` beating
        the target alone.)  Speculation pays less as the batch grows: its
        rows cost the others' time as well."""
        if not load.rows:
            return True
        k = len(rates)  # this request's draft, and as long a one for those that follow
        follow = sum(expected_tokens(list(r[:k])) for _, r in load.following)
        n = len(load.following)
        return ((load.tokens + expected_tokens(rates) + follow) / self.step_s(k, d, pooled, load)
                > (load.tokens + 1.0 + n) / self.plain_s(load))

    def _saves(self, rates: list[float], d: float, setup_s: float, pooled: bool, load: Load) -> bool:
        """Does drafting len(rates) tokens a step beat the target alone over
        the tokens still to come, a one-time `setup_s` included?"""
        per_token = self.step_s(len(rates), d, pooled, load) / expected_tokens(rates)
        saved = self.plain_s(load) - per_token
        return saved > 0 and saved * load.horizon > setup_s * (1 + load.others)

    def _best(self, rates: list[float], d: float, limit: int, pooled: bool, load: Load) -> int:
        best_k, best = 0, 1.0 / self.plain_s(load)
        total, chain = 1.0, 1.0  # expected_tokens(rates[:k]), grown a position at a time
        for k in range(1, min(limit, len(rates)) + 1):  # (past the rates a step only costs more)
            chain *= rates[k - 1]
            total += chain
            r = total / self.step_s(k, d, pooled, load)
            if r > best:
                best_k, best = k, r
        while best_k and not self._batch_gains(rates[:best_k], d, pooled, load):
            best_k -= 1  # a shorter draft costs the others less
        return best_k

    def could_pay(self, source: str, load: Load = ALONE, setup_s: float = 0.0, pooled: bool = False) -> bool:
        """Would `source` draft at all at `load` (alone unless told), on what
        is known of it now, its one-time `setup_s` (a draft model's catch-up
        on the request's text, which stalls the whole batch) paid back over
        the tokens still to come?  A draft model that would not need not
        read the request's text (run/batch.py: Batch._follow)."""
        if group_of(source) in self.stopped:
            return False
        rates, d = self.chances(source), self.draft_s.get(source, 0.0)
        k = self._best(rates, d, self.k_max, pooled, load)
        return k > 0 and (setup_s <= 0.0 or self._saves(rates[:k], d, setup_s, pooled, load))

    def outlook(self, candidates, limit: int) -> tuple[float, ...]:
        """The chances of the likeliest draft among `candidates` (of up to
        `limit` tokens), for the requests planned before this one in a batch
        (Load.following); () where none may draft."""
        best: tuple[float, ...] = ()
        for cand in candidates:
            n = min(limit, cand.limit, self.k_max)
            if n <= 0 or group_of(cand.source) in self.stopped:
                continue
            rates = tuple(self.chances(cand.source)[:n])
            if expected_tokens(list(rates)) > expected_tokens(list(best)):
                best = rates
        return best

    def choose(self, candidates, limit: int, load: Load = ALONE):
        """Once per step: which candidate drafts, and how far.

        `candidates` are what the proposers could draft now (each with
        `source`, `limit` and `setup_s`, see proposers.Candidate).  Returns
        (candidate, k), or (None, 0) for a plain step.  A `sure` candidate
        (tokens a constraint forces) drafts as far as it and `limit` go.
        `load`: what shares the batch, and the tokens still to come."""
        self._wide = 0
        if not candidates:
            return None, 0
        for cand in candidates:
            if getattr(cand, "sure", False) and min(limit, cand.limit, self.k_max) > 0:
                return cand, min(limit, cand.limit, self.k_max)
        best, best_rate = None, 1.0 / self.plain_s(load)
        for cand in candidates:
            n = min(limit, cand.limit, self.k_max)
            if n <= 0 or group_of(cand.source) in self.stopped:
                continue
            d = self.draft_s.get(cand.source, 0.0)
            rates = self.chances(cand.source)
            pooled = cand.pooled
            if pooled:
                self.pooled.add(cand.source)
            k = self._best(rates, d, n, pooled, load)
            if (k > 0 and self._saves(rates[:k], d, cand.setup_s, pooled, load)
                    and self.rate(rates[:k], d, pooled, load) > best_rate):
                best, best_rate = (cand, k), self.rate(rates[:k], d, pooled, load)
        if best is not None:
            self._idle[best[0].source] = 0
            self._wait[best[0].source] = self.probe_every
            self._drafting += 1
            if self._drafting % self.plain_every == 0:
                return None, 0  # a plain step now and then keeps c(1), the bar to beat, measured
            cand, k = best
            return cand, self._wider(cand, k, min(limit, cand.limit, self.k_max))
        for cand in candidates:
            k = self._probe(cand, min(limit, cand.limit, self.k_max), load)
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

    def _probe(self, cand, n: int, load: Load) -> int:
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
                      if self._saves([1.0] * k, d, PROBE_MARGIN * cand.setup_s, cand.pooled, load)), 0)
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

    def keep_going(self, proposer: str, chain: list[float], load: Load = ALONE, setup_s: float = 0.0) -> bool:
        """After drafting len(chain) tokens whose acceptance chances (the
        draft's confidences) are `chain`, is one more worth it at `load`,
        `setup_s` paid first to draft it (a draft model reading the text it
        lacks, to extend a lookup's draft)?"""
        k = len(chain)
        if k >= self.k_max:
            return False
        if k < self._wide:
            return True  # a wider look (see _wider) goes its whole length: that size is what it measures
        d, pooled = self.draft_s.get(proposer, 0.0), proposer in self.pooled
        nxt = self.chances(proposer)[k]
        return (self.rate(chain + [nxt], d, pooled, load, setup_s) > self.rate(chain, d, pooled, load)
                and self._batch_gains(chain + [nxt], d, pooled, load))

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
        if is_lookup(proposer):
            self._learn_shift(proposer, drafted, accepted)
        self._acc(proposer).observe(drafted, accepted)  # (_acc started the source in `learned`)
        if self.learned is not None:
            self.learned.observe(proposer, drafted, accepted)
        old = self.draft_s.get(proposer)
        per = draft_s / drafted if unit_s is None else unit_s
        self.draft_s[proposer] = per if old is None else old + EMA * (per - old)
        g = group_of(proposer)  # the safeguard judges each kind of lookup as one, whatever the match length
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
