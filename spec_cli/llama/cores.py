"""How many threads llama.cpp gets: the cores other programs leave free.

llama.cpp's CPU threads meet at a barrier after every operation of the
graph, so one thread that the kernel has put aside stalls the others: with
a thread on every core of a machine where another program keeps one core
busy, a token costs 2-4x what it costs on the cores left, and a small
draft model, with as many barriers as the target and a tenth of the work
between them, loses most (measured on a 2-core VM with one core spinning:
the 1.5B target's token 86-108 ms on two threads, 78-81 on one; the 0.5B
draft's batch of four 99-207 ms against 83-100).

So where the user gives no `--threads`, spec-cli counts what other
programs used of this process's cores while it started (imports, before any
model loads: a window it spends anyway, timed by no extra wait) and gives
llama.cpp the cores left, at least one.  /proc/stat's per-core busy time
(steal included: a hypervisor's share is not ours either) less this
process's own CPU time and its ended children's (cpucheck.py's), over the
wall time since this module was imported (a process that began more than
MAX_WINDOW_S before its first model -- a download first, a library caller
-- counts over a fresh quarter second instead).  Linux only; elsewhere
every core.  The count is part of a model's key in the state files
(facts.fingerprint), so what a busy machine taught the cost model is
kept apart from what a quiet one did.  A server counts again in its idle
spells (`Recount`) and takes more threads where two windows in a row
find the cores others had taken free again (never fewer: see Recount).
"""

from __future__ import annotations

import os
import time

MIN_WINDOW_S = 0.25   # a shorter start is waited out to this (only a library caller sees it)
MAX_WINDOW_S = 5.0    # a longer one is not counted from: a fresh window of MIN_WINDOW_S is
# a core counts as taken when others used this much of it: a wrong "busy" costs
# more than a wrong "quiet" (docs/results.md, "Behind the code"), so only a
# steady load -- a build, a spinning program -- takes a core, not a moment's blip
FREE_AT = 0.8


def _cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _busy_ticks(cores: list[int]) -> int | None:
    """Busy clock ticks (user, nice, system, irq, softirq, steal) summed
    over `cores`, from /proc/stat; None where it cannot be read."""
    want = {f"cpu{c}" for c in cores}
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except OSError:
        return None
    total, seen = 0, 0
    for fields in lines:
        if fields[0] in want and len(fields) >= 9:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
            total += user + nice + system + irq + softirq + steal
            seen += 1
    return total if seen else None


def _own_seconds() -> float:
    """This process's CPU time, with its children's that have ended (the
    AMX check's, which run in the window on a first run)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class _Mark:
    """A point to count others' use from."""

    def __init__(self) -> None:
        self.cores = _cores()
        self.wall = time.monotonic()
        self.ticks = _busy_ticks(self.cores)
        self.own = _own_seconds()


_START = _Mark()  # spec_cli/__init__.py imports this module first thing


def started() -> float:
    """When this process's count began (monotonic seconds)."""
    return _START.wall
_chosen: dict[int, tuple[int, float]] = {}  # what threads(0) decided, once per process


def others_busy(since: _Mark = _START) -> float | None:
    """Cores' worth of CPU time other programs (and the hypervisor) took of
    this process's cores since `since`; None where /proc/stat is not
    there.  Waits until the window is MIN_WINDOW_S long."""
    if since.ticks is None:
        return None
    wait = MIN_WINDOW_S - (time.monotonic() - since.wall)
    if wait > 0:
        time.sleep(wait)
    now = _Mark()
    if now.ticks is None:
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    wall = now.wall - since.wall
    busy = (now.ticks - since.ticks) / hz - (now.own - since.own)
    return max(0.0, busy / wall)


def threads(requested: int = 0) -> int:
    """The thread count for llama.cpp: `requested` where it is given, else
    this process's cores less those others kept busy while it started (at
    least one); decided once per process, so the target and its draft
    agree and every model of the run has the same key."""
    if requested > 0:
        return requested
    if 0 not in _chosen:
        # a process that started long ago (a library caller, a download
        # first) counts afresh: what ran minutes before says little of now
        fresh = time.monotonic() - _START.wall > MAX_WINDOW_S
        busy = others_busy(_Mark() if fresh else _START)
        _chosen[0] = (free(len(_START.cores), busy), busy or 0.0)
    return _chosen[0][0]


def free(cores: int, busy: float | None) -> int:
    """Threads for `cores` cores of which others used `busy` cores' worth
    (None: not known, every core): a core counts as taken from FREE_AT of
    it used; at least one."""
    taken = 0 if busy is None else int(busy) + (busy % 1.0 >= FREE_AT)
    return max(1, cores - taken)


def note(requested: int = 0) -> str | None:
    """One line for the user where fewer threads than cores were chosen."""
    n = threads(requested)
    cores = len(_START.cores)
    if requested > 0 or n >= cores:
        return None
    busy = _chosen[0][1]
    return (f"note: other programs kept {busy:.1f} of this process's {cores} cores busy as it started, "
            f"so llama.cpp runs {n} thread{'s' if n > 1 else ''} (a thread on a busy core stalls the "
            f"others); --threads {cores} uses every core")


# -- a long-running process (serve) counts again in its idle spells ----------
RECOUNT_S = 10.0   # an idle window this long is counted; a change must show in two in a row


def rechoose(n: int, busy: float) -> None:
    """The thread count from now on (Recount found it): every model's key
    (facts.fingerprint) follows, so the costs learned at each count stay
    apart."""
    threads()
    _chosen[0] = (n, busy)


class Recount:
    """More threads once other programs leave this process's cores free
    again, counted over its idle spells: a server started beside a build or
    another model's load would otherwise keep the count it started with
    for its whole life.  Only upward: what others do while this process is
    idle says nothing of what they do while it computes (two servers used
    in turn each see the other busy in their idle spells, and would each
    drop a thread for nothing), whereas a machine quiet while it is idle is
    the machine a fresh start would have counted.  Only an idle spell is
    counted: while this process computes, its own threads crowd the others
    off the cores.  `idle()` opens a window (a no-op while one is open),
    `busy()` drops it, `check(current)` after RECOUNT_S of it gives the
    count to change to (None: none), once two windows in a row said the
    same."""

    def __init__(self) -> None:
        self._mark: _Mark | None = None
        self._seen: int | None = None

    def idle(self) -> None:
        if self._mark is None:
            self._mark = _Mark()

    def busy(self) -> None:
        self._mark = None

    def check(self, current: int) -> tuple[int, float] | None:
        """(threads, others' busy cores) to change to, else None."""
        if self._mark is None or time.monotonic() - self._mark.wall < MIN_WINDOW_S:
            return None
        busy = others_busy(self._mark)
        self._mark = _Mark()
        n = free(len(self._mark.cores), busy)
        if busy is None or n <= current:
            self._seen = None
            return None
        if self._seen != n:
            self._seen = n  # once: a spell's blip; twice in a row: the machine changed
            return None
        self._seen = None
        return n, busy
