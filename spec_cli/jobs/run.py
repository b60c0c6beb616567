"""The requests of a batch on serve's worker (serve/worker.py), in this
process: the same multi-sequence engine, scheduler, checks and response
bodies as `spec-cli serve --parallel N`, with no HTTP between.

The main thread keeps the worker's slots full (and as many requests
queued behind them, so that a slot that frees takes the next at the next
round), compiles each request's constraint as it is handed over, and
hands each finished request to `on_answer`.  Stopping (`Stop`): at level
1 nothing new starts and the running requests finish; at level 2 they are
abandoned at their next step and nothing of them is written."""

from __future__ import annotations

import collections
import concurrent.futures
import queue
from dataclasses import dataclass
from typing import Callable

from ..core.stats import Stats
from ..serve.api import ApiError, parse_chat, parse_completion, parse_infill
from ..serve.replies import Reply
from ..serve.worker import Job, Worker
from .inputs import Item

PARSE = {"chat": parse_chat, "completion": parse_completion, "infill": parse_infill}
TICK_S = 0.25      # how often the progress is told while nothing finishes


@dataclass(frozen=True)
class Answer:
    """One finished request: the response body the server would have sent
    (or its error body), and what it generated."""

    item: Item
    status: int
    body: dict
    text: str = ""
    stats: Stats | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


class Stop:
    """How far a stop was asked: 0 not, 1 finish what runs, 2 abandon it.
    Set from a signal handler (a plain int: nothing there may block)."""

    level = 0


@dataclass
class _Live:
    item: Item
    started: bool = False
    reply: Reply | None = None


def parse(item: Item):
    """`item`'s request, checked as the server checks it (an ApiError where
    the server would answer 4xx)."""
    req = PARSE[item.kind](item.body)
    req.stream = False  # a batch's answers are written whole
    return req


def failed(item: Item, e: ApiError) -> Answer:
    return Answer(item, e.status, e.body())


def run(worker: Worker, items: list[Item], on_answer: Callable[[Answer], None], *, stop: Stop,
        on_tick: Callable[[], None] = lambda: None, on_abandon: Callable[[Item], None] = lambda item: None) -> int:
    """Run `items` on `worker`; each answer goes to `on_answer` as it
    finishes; each one not answered (never started, or abandoned) to
    `on_abandon`.  Returns the stop level it ended at."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    pending = collections.deque(items)
    live: dict[Job, _Live] = {}
    level = 0
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spec-cli-compile") as compiler:
        while live or (pending and level == 0):
            if stop.level > level:
                level = stop.level
                _withdraw(worker, live, on_abandon, started_too=level >= 2)
                continue
            while level == 0 and pending and worker.waiting < worker.parallel:
                item = pending.popleft()
                job = _hand_over(worker, item, events, on_answer, compiler)
                if job is not None:
                    live[job] = _Live(item)
            if not live:
                continue
            try:
                job, kind, payload = events.get(timeout=TICK_S)
            except queue.Empty:
                on_tick()
                continue
            _event(live, job, kind, payload, on_answer)
            on_tick()
    for item in pending:
        on_abandon(item)
    return level


def _hand_over(worker: Worker, item: Item, events: queue.SimpleQueue, on_answer, compiler) -> Job | None:
    """`item` parsed, its constraint compiled and submitted; None where it
    failed (its answer given)."""
    try:
        req = parse(item)
        worker.recognize(req)  # a completion in the model's FIM template: the editor's way, as the server
        spec = worker.constraint_of(req)
        if spec is not None:
            req.grammar = _compile(worker, spec, compiler)
        job = Job(req, lambda kind, payload: events.put((job, kind, payload)))
        worker.submit(job)
        return job
    except ApiError as e:
        on_answer(failed(item, e))
        return None


def _compile(worker: Worker, spec, compiler):
    """`spec` compiled in `compiler`'s thread within serve's limit, or serve's 400."""
    from ..core.constraint import ConstraintError
    from ..serve.constrain import COMPILE_S, refused

    future = compiler.submit(worker.compile, spec)
    try:
        return future.result(timeout=COMPILE_S)
    except ConstraintError as e:
        raise refused(spec, e) from None
    except concurrent.futures.TimeoutError:
        raise refused(spec) from None


def _event(live: dict[Job, _Live], job: Job, kind: str, payload, on_answer) -> None:
    state = live.get(job)
    if state is None:  # a withdrawn job's late events
        return
    if kind == "start":
        state.started, state.reply = True, payload
    elif kind == "error":
        del live[job]
        on_answer(failed(state.item, payload))
    elif kind == "done":
        del live[job]
        session = payload
        if session.finish == "cancelled":
            return
        body = state.reply.full(session.text, session.finish, session.stats, session.stop_type, session.logprobs)
        on_answer(Answer(state.item, 200, body, session.text, session.stats))


def _withdraw(worker: Worker, live: dict[Job, _Live], on_abandon, *, started_too: bool) -> None:
    """Take back the requests not yet started (and, with `started_too`, the
    running ones too): none of them is answered."""
    for job, state in list(live.items()):
        if started_too or not state.started:
            worker.withdraw(job)
            del live[job]
            on_abandon(state.item)
