"""When drafting pays, and how far: an online cost model.  Pure, no I/O.

A step that drafts k tokens costs  T(k) = c(k+1) + k*d  -- c(n) the target's
batch of n, d the draft's cost per token -- and yields on average

    E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j

tokens, a_j the chance that draft token j is accepted once the ones before
it were.  The target alone makes 1/c(1) tokens a second.  Each step picks
the k that maximises E(k)/T(k), k = 0 (no drafting) included, so drafting
turns off when it does not pay and back on when it would:

  * c(n) starts from timings measured at load and follows the verify times
    seen: each measurement moves the whole curve a little (a busy machine
    slows every size alike) and its own size more; while drafting, one step
    in `plain_every` goes without, so c(1) stays measured too;
  * d follows the draft's measured cost per token (0 for n-gram lookup);
  * a_j follows the acceptance seen at each draft position, per proposer;
    a draft model's own confidence (its top probability) refines it token
    by token, so a draft stops early where it is unsure.

While drafting is off, a short draft now and then (after `probe_every` steps,
then twice as long after each look that changes nothing) keeps the
acceptance estimate honest -- unless even an always-accepted draft could
not pay, as for a draft model nearly as slow as its target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EMA = 0.3
LEVEL_EMA = 0.1


def expected_tokens(accept: list[float]) -> float:
    """E(k) for per-position acceptance chances a_1..a_k."""
    total, chain = 1.0, 1.0
    for a in accept:
        chain *= a
        total += chain
    return total


@dataclass
class CostModel:
    verify_s: list[float]              # c(n) at index n-1
    draft_s: dict[str, float] = field(default_factory=dict)  # per proposer, seconds per draft token

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

    def c(self, n: int) -> float:
        n = max(1, n)
        if n <= len(self.verify_s):
            return self.verify_s[n - 1]
        return self.verify_s[-1] * n / len(self.verify_s)

    def observe_verify(self, n: int, seconds: float) -> None:
        """Follow a measured batch: the whole curve moves with the machine's
        pace (a busy machine slows every size alike), then the size seen is
        corrected on its own."""
        if 1 <= n <= len(self.verify_s) and seconds > 0:
            ratio = seconds / self.verify_s[n - 1]
            level = 1.0 + LEVEL_EMA * (ratio - 1.0)
            self.verify_s = [c * level for c in self.verify_s]
            self.verify_s[n - 1] += EMA * (seconds - self.verify_s[n - 1])

    def observe_draft(self, proposer: str, n_tokens: int, seconds: float) -> None:
        if n_tokens > 0:
            per = seconds / n_tokens
            old = self.draft_s.get(proposer)
            self.draft_s[proposer] = per if old is None else old + EMA * (per - old)

    def rate(self, accept: list[float], draft_cost: float) -> float:
        k = len(accept)
        return expected_tokens(accept) / (self.c(k + 1) + k * draft_cost)


@dataclass
class Acceptance:
    """Per-position acceptance chances of one proposer, learned online."""

    prior: float
    n_max: int
    rates: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.rates:
            self.rates = [self.prior] * self.n_max

    def observe(self, drafted: int, accepted: int) -> None:
        for i in range(min(drafted, self.n_max)):
            if i > accepted:  # never reached: an earlier token was rejected
                break
            hit = 1.0 if i < accepted else 0.0
            self.rates[i] += EMA * (hit - self.rates[i])


# acceptance before anything is seen; n-gram matches by length
PRIORS = {"ngram1": 0.2, "ngram2": 0.4, "ngram3": 0.6, "ngram4": 0.8, "ngram8": 0.95, "draft": 0.8}


class Policy:
    """Decides, step by step, how many tokens each proposer should draft."""

    def __init__(self, cost: CostModel, *, k_max: int, probe_every: int = 64, plain_every: int = 16):
        self.cost = cost
        self.k_max = k_max
        self.probe_every = probe_every
        self.plain_every = plain_every
        self._drafting = 0
        self.accept: dict[str, Acceptance] = {}
        self._idle: dict[str, int] = {}
        self._wait: dict[str, int] = {}

    def _acc(self, proposer: str) -> Acceptance:
        if proposer not in self.accept:
            self.accept[proposer] = Acceptance(prior=PRIORS.get(proposer, 0.7), n_max=self.k_max)
        return self.accept[proposer]

    def _best(self, rates: list[float], d: float, limit: int) -> int:
        best_k, best = 0, 1.0 / self.cost.c(1)
        for k in range(1, limit + 1):
            r = self.cost.rate(rates[:k], d)
            if r > best:
                best_k, best = k, r
        return best_k

    def _cheapest_paying(self, rates: list[float], d: float, limit: int) -> int:
        """The shortest draft that beats the target alone at these rates (a
        probe: it risks the least when the draft is wrong)."""
        base = 1.0 / self.cost.c(1)
        return next((k for k in range(1, limit + 1) if self.cost.rate(rates[:k], d) > base), 0)

    def plan(self, proposer: str, limit: int) -> int:
        """The best k (0 = do not draft) for `proposer`, at most `limit`."""
        limit = min(limit, self.k_max)
        if limit <= 0:
            return 0
        d = self.cost.draft_s.get(proposer, 0.0)
        k = self._best(self._acc(proposer).rates, d, limit)
        if k > 0:
            self._idle[proposer] = 0
            self._wait[proposer] = self.probe_every
            self._drafting += 1
            if self._drafting % self.plain_every == 0:
                return 0  # a plain step now and then keeps c(1), the bar to beat, measured
            return k
        # Not worth it on what we know.  If even a draft that is always
        # accepted would not pay (the draft is too slow for this target),
        # there is nothing to learn; else look again now and then, waiting
        # twice as long after each look that did not change the answer.
        ideal = self._cheapest_paying([1.0] * limit, d, limit)
        if ideal == 0:
            return 0
        idle = self._idle.get(proposer, 0) + 1
        wait = self._wait.get(proposer, self.probe_every)
        if idle < wait:
            self._idle[proposer] = idle
            return 0
        self._idle[proposer] = 0
        self._wait[proposer] = min(wait * 2, 1024)
        return ideal

    def keep_going(self, proposer: str, chain: list[float]) -> bool:
        """After drafting len(chain) tokens whose acceptance chances (the
        draft's confidences) are `chain`, is one more worth it?"""
        k = len(chain)
        if k >= self.k_max:
            return False
        d = self.cost.draft_s.get(proposer, 0.0)
        nxt = self._acc(proposer).rates[k]
        return self.cost.rate(chain + [nxt], d) > self.cost.rate(chain, d)

    def observe(self, proposer: str, *, drafted: int, accepted: int, draft_s: float,
                verify_s: float) -> None:
        self.cost.observe_verify(drafted + 1, verify_s)
        if drafted:
            self._acc(proposer).observe(drafted, accepted)
            self.cost.observe_draft(proposer, drafted, draft_s)
