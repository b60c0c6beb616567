"""`spec-cli bench --concurrency 1,4,8`: the prompts sent several at a
time, as a server's clients send them.

At concurrency C, C clients each send a prompt, wait for its answer and
send the next, until every prompt is answered (a closed loop, as a chat
UI's or an agent's clients); the requests run in one batch a round
(run/batch.py), as `spec-cli serve --parallel C` runs them.  Each
proposer is measured next to the target alone (`none`) at the same
concurrency, one after the other, every run from empty KV caches.  Reported:
aggregate tokens a second over the run (all tokens / the run's seconds),
each request's latency (from its start to its last token) as median and
worst, and the acceptance.  On a simulated clock (--clock) a round is
charged the profile's price of each pass llama.cpp makes over its rows
(core.batching.passes: sequences that follow each other with as many rows
each share one), plus the drafting.  A request that ends before the
others leaves no gap between their sequences (Batch.compact).

Agreement: each request's tokens against the target alone's, generated
one at a time with its margins; a divergence wider than rounding is a bug
(bench.problems)."""

from __future__ import annotations

import collections
import dataclasses
import statistics
import time
from dataclasses import dataclass, field

from ..batch import Batch
from ..engine import Generation
from . import Run, Variant, divergence, problem


def run_concurrent(pair, items: list[tuple[str, list[int]]], variants: list[Variant], levels: list[int],
                   gen_base, *, on_progress=None) -> list[dict]:
    """One row per (concurrency, proposer), the target alone first at each."""
    refs = _references(pair, items, gen_base, on_progress)
    rows = []
    for c in levels:
        for v in [Variant("none"), *variants]:
            if on_progress:
                on_progress(f"concurrency {c}: {v.label}")
            rows.append(_burst(pair, items, c, v, gen_base, refs))
    return rows


def _references(pair, items, gen_base, on_progress) -> dict[str, Run]:
    """Each prompt's target alone, one at a time, with its margins."""
    from ..session import Session

    refs = {}
    cfg = dataclasses.replace(gen_base, adaptive=False, margins=True, draft_max=0)
    for i, (pid, tokens) in enumerate(items):
        if on_progress:
            on_progress(f"the target alone, prompt {i + 1}/{len(items)}")
        pair.use(0)
        pair.reset()
        s = Session(pair, tokens, cfg, pair.new_proposer(name="none")).run()
        refs[pid] = Run(s.tokens, s.stats, s.margins)
    return refs


@dataclass(eq=False)
class _Request:
    """One request of a burst, as its client sees it."""

    id: str
    started: float
    tokens: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    first_s: float | None = None   # its first token, after it started
    latency_s: float = 0.0


def _burst(pair, items, clients: int, v: Variant, gen_base, refs: dict[str, Run]) -> dict:
    clock = gen_base.clock
    cfg = dataclasses.replace(gen_base, adaptive=v.fixed is None,
                              draft_max=gen_base.draft_max if v.fixed is None else v.fixed, rule=v.rule)
    for seq in range(pair.target.n_seq):
        pair.use(seq)
        pair.reset()
    batch = Batch(pair, clock=clock, turns=pair.target.deterministic)
    pending = collections.deque(items)
    running: dict = {}  # stream -> _Request
    done: list[_Request] = []
    now, t0 = 0.0, time.perf_counter()
    rounds = rows = 0
    while pending or running:
        while pending and len(running) < clients:
            pid, tokens = pending.popleft()
            busy = {s.seq for s in running}
            free = next(seq for seq in range(pair.target.n_seq) if seq not in busy)
            g = Generation(pair.target, pair.new_proposer(name=v.proposer, clock=clock), tokens, cfg)
            running[batch.add(free, g)] = _Request(pid, now)
        steps = batch.round()
        rounds += 1
        rows += batch.last_rows
        now = now + batch.charged_s if clock is not None else time.perf_counter() - t0
        ended = False
        for stream, step in steps:
            r = running[stream]
            r.tokens += step.tokens
            r.drafted += step.drafted
            r.accepted += step.accepted
            if r.first_s is None and step.tokens:
                r.first_s = now - r.started
            if step.finish_reason is not None:
                batch.drop(stream)
                del running[stream]
                r.latency_s = now - r.started
                done.append(r)
                ended = True
        if ended:  # the others close the gap it left (Batch.compact)
            busy = {s.seq for s in running}
            batch.compact(seq for seq in range(pair.target.n_seq) if seq not in busy)
    latencies = [r.latency_s for r in done]
    tokens = sum(len(r.tokens) for r in done)
    drafted, accepted = sum(r.drafted for r in done), sum(r.accepted for r in done)
    margins = [m for r in done if (m := divergence(refs[r.id], Run(r.tokens))) is not None]
    return {"concurrency": clients, "proposer": v.label, "requests": len(done), "tokens": tokens,
            "seconds": now, "tok_s": tokens / now if now > 0 else 0.0,
            "latency_median_s": statistics.median(latencies) if latencies else 0.0,
            "latency_max_s": max(latencies, default=0.0),
            "ttft_median_s": statistics.median(r.first_s or 0.0 for r in done) if done else 0.0,
            "rounds": rounds, "rows_per_round": rows / rounds if rounds else 0.0,
            "drafted": drafted, "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None,
            "agree": len(done) - len(margins), "max_divergence_margin": max(margins, default=0.0)}


def add_ratios(rows: list[dict]) -> None:
    """Each row's aggregate tokens a second over the target alone's at the
    same concurrency."""
    alone = {r["concurrency"]: r["tok_s"] for r in rows if r["proposer"] == "none"}
    for r in rows:
        base = alone.get(r["concurrency"])
        r["vs_none"] = r["tok_s"] / base if base else None


def problems(rows: list[dict], *, deterministic: bool) -> list[str]:
    """Where a request parted from the target alone beyond rounding (bench.problem)."""
    found = (problem(f"concurrency {r['concurrency']}, {r['proposer']}", deterministic=deterministic,
                     differs=r["agree"] < r["requests"], margin=r["max_divergence_margin"]) for r in rows)
    return [p for p in found if p]
