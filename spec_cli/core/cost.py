"""c(n), what a target batch of n rows costs on this machine, learned online
from the target's own steps (core/policy.py's first bullet says how), and
E(k), the tokens a draft of k yields.  Pure, no I/O."""

from __future__ import annotations

EMA = 0.3
PACE_EMA = 0.3   # in log space


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
            elif below:  # past the last point: grow linearly at the slope of the last doubling
                (n0, s0) = below[-1]
                # (a row's share falls as batches grow: the slope from the first
                # point would price a batch of 64 as 64 batches of one's share)
                half = [p for p in known if p[0] <= n0 / 2] or known[:1]
                (nh, sh) = half[-1]
                slope = (s0 - sh) / max(n0 - nh, 1) if len(known) > 1 else s0
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
        got = self._from_seen(n, lambda m: self._seen[m][0] * self.pace / self._seen[m][1])
        return self._prior(n) * self.pace if got is None else got

    def _from_seen(self, n: int, at) -> float | None:
        """c(n) from the sizes measured, each read by `at`: a size's own;
        between two, the cheaper of the line between them (a first load's
        curve is one noisy timing of each size, and what was measured of its
        neighbours says more of a size than that) and the prior's shape
        held to both (where the prior is flat and then climbs, as a GPU's
        is, the line from 1 to 65 prices 17 rows a quarter dearer than they
        are: a size priced too cheap is tried and measured, one priced too
        dear never is); past the largest, the prior's shape from it (a first
        load times few sizes, and extrapolates the rest: where a size
        measured cheaper than said, the sizes past it are too).  None below
        every size measured."""
        if n in self._seen:
            return at(n)
        below = max((m for m in self._seen if m < n), default=0)
        above = min((m for m in self._seen if m > n), default=0)
        if below and above:
            lo, hi, f = at(below), at(above), (n - below) / (above - below)
            shape = self._prior(n) * (lo / self._prior(below) * (1 - f) + hi / self._prior(above) * f)
            return min(lo + (hi - lo) * f, shape)
        if below:
            return at(below) * self._prior(n) / self._prior(below)
        return None

    def remembered(self) -> dict[int, float]:
        """c(1..) to start the next run from: each size measured, what its
        steps measured (a busy spell moves that average, not the rest), and
        the others from those (`_from_seen`; below every measured size, the
        prior as the smallest measured moved from it) -- not at the pace the
        run ended at, which, carried from run to run, only ever grows a size
        never measured: one that looks dear is never drafted, so never
        measured again.  Bounded (`bounded`)."""
        at = lambda m: self._seen[m][0]  # noqa: E731
        low = min(self._seen, default=0)
        scale = at(low) / self._prior(low) if low else 1.0
        out = {}
        for n in range(1, len(self.prior) + 1):
            got = self._from_seen(n, at)
            out[n] = self._prior(n) * scale if got is None else got
        return bounded(out)

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


def bounded(curve: dict[int, float]) -> dict[int, float]:
    """`curve` (seconds a batch of n, for some sizes n) within what every
    machine's costs obey: a batch of n can always run as two, of m and
    n - m, so c(n) is at most c(m) + c(n - m).  A size above that holds a
    stall or a drift remembered, not the machine; it gets the bound."""
    out: dict[int, float] = {}
    for n in sorted(curve):
        splits = [out[m] + out[n - m] for m in out if n - m in out]
        out[n] = min([curve[n], *splits])
    return out


def can_pay(cost: CostModel, draft_s: float, k_max: int, *, margin: float = 1.0) -> bool:
    """Could a draft whose every token is accepted beat the target alone by
    `margin` at some length up to k_max?  (If not by much, a real draft,
    some of whose tokens are rejected, loses: not worth running.)"""
    return any(cost.rate([1.0] * k, draft_s) > margin / cost.c(1) for k in range(1, k_max + 1))
