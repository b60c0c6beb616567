"""Requests on the pair: up to `--parallel` running at once in one target
batch a round (run/batch.py), a bounded queue behind them, editors first.

The HTTP side (app.py, on the event loop) submits a `Job` and reads its
events; the worker thread owns the models.  Each running request has a
sequence of its own in both models' contexts (a slot); a request that
arrives joins the batch at the next round, one that ends or whose client
went away leaves at once.  Nothing is reset between requests: a slot's
KV cache keeps its last request's tokens, and a new request goes to the
free slot whose cache holds at least half of its prompt (`_slot_for`),
so the next turn of a chat or the next completion in the same file
evaluates only what is new (moved first to a slot beside the busy ones
where its own would leave a gap between them: `choose_slot`); the lookup
drafts from every earlier output (suffix.Store).

Editors (fill-in-the-middle, from whichever door) wait in a queue of their
own and take the first free slot.  With --deterministic, the requests
running at once take turns, a target batch each (a batch holding another
sequence's rows is not bitwise one sequence's): each one's text is
`generate --deterministic`'s.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..core.tokens import common_prefix
from ..llama.cores import RECOUNT_S, Recount
from ..errors import SpecError
from ..run.batch import Batch, Stream
from ..run.config import DRAFT_MAX
from ..run.engine import GenConfig, Generation
from ..run.runner import Pair
from ..run.session import Session
from ..run.suffix import Store
from .api import ApiError, Request, internal, shutting_down
from .constrain import tool_spec
from .replies import Reply
from .start import check_ids, echo, editor_stops, fim_markers, prompt_of, proposer_for, recognize_fim
from .metrics import Metrics
from ..run.schedule import choose_slot

log = logging.getLogger("spec_cli.serve")


@dataclass(frozen=True)
class ServeConfig:
    model: str                 # the name responses carry
    queue: int = 16            # requests waiting behind the running ones
    draft_max: int = DRAFT_MAX
    adaptive: bool = True
    rule: str = "gumbel"       # the acceptance rule (engine.GenConfig.rule)
    store_tokens: int = 1 << 16   # earlier outputs kept for the lookup (suffix.Store)
    # the contexts hold one sequence more than the slots, to move a slot's cache
    # through (Pair.swap_seq: choose_slot)
    spare: bool = False
    proposer: str | None = None  # what drafts for every request (None: the pair's own; bench compares others)
    recount: bool = False  # count the free cores again in idle spells (llama.cores.Recount; serve, no --threads)
    parse_special: bool = True  # a raw prompt's special-token texts are the model's special tokens
    reasoning_format: str = "auto"     # a reasoning model's thinking apart ("auto") or in the text ("none")
    reasoning_budget: int | None = None  # thinking tokens a reply may spend (None: no bound)


class Job:
    """One request: the worker thread hands its events to `post` as
    ("start", Reply) | ("step", ((text, drafted?), ...)) | ("done", Session) | ("error", ApiError);
    `post` must not block.  The server's jobs post to the event loop
    (`on_loop`); `spec-cli batch`'s to a queue its main thread reads."""

    def __init__(self, req: Request, post: Callable[[str, object], None]):
        self.req, self.post = req, post
        self.cancel = threading.Event()
        self.queued_at = time.monotonic()

    @classmethod
    def on_loop(cls, req: Request, loop: asyncio.AbstractEventLoop) -> "Job":
        """A job whose events go to `job.events`, an asyncio queue on `loop`."""
        events: asyncio.Queue = asyncio.Queue()
        job = cls(req, lambda kind, payload: loop.call_soon_threadsafe(events.put_nowait, (kind, payload)))
        job.events = events
        return job

    def emit(self, kind: str, payload) -> None:
        try:
            self.post(kind, payload)
        except RuntimeError:  # the loop is closed: nobody is listening
            self.cancel.set()


@dataclass(eq=False)
class Running:
    """A request in a slot: its job, session and place in the batch."""

    job: Job
    session: Session
    stream: Stream
    started: float = field(default_factory=time.monotonic)


class Worker:
    """`pair`: the loaded pair, or a function that loads it, called in the
    worker's thread (so that every llama.cpp call comes from that thread);
    the constructor returns once it is loaded, or raises what loading raised."""

    def __init__(self, pair: "Pair | Callable[[], Pair]", cfg: ServeConfig):
        self.cfg = cfg
        self.store = Store(max_tokens=cfg.store_tokens)
        self.metrics = Metrics()
        self._editors: collections.deque[Job] = collections.deque()
        self._others: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self._seconds = 1.0  # a request's usual duration, for Retry-After
        self.served = 0
        self._used: dict[int, int] = {}  # slot -> when it last took a request
        self._tick = 0
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        loader = pair if callable(pair) else (lambda: pair)
        self._thread = threading.Thread(target=self._run, args=(loader,), name="spec-cli-worker", daemon=True)
        self._thread.start()
        self._loaded.wait()
        if self._load_error is not None:
            raise self._load_error

    def _run(self, loader) -> None:
        try:
            self.pair = loader()
            self.batch = Batch(self.pair, turns=self.pair.target.deterministic)
            n_seq = self.pair.target.n_seq
            self._spare = n_seq - 1 if self.cfg.spare and n_seq > 2 else None
            self.slots: list[Running | None] = [None] * (n_seq if self._spare is None else n_seq - 1)
        except BaseException as e:  # handed to the constructor's thread
            self._load_error = e
            return
        finally:
            self._loaded.set()
        self._loop()

    @property
    def parallel(self) -> int:
        return len(self.slots)

    @property
    def busy(self) -> int:
        return sum(r is not None for r in self.slots)

    @property
    def running(self) -> list[Running]:
        return [r for r in self.slots if r is not None]

    @property
    def waiting(self) -> int:
        return len(self._editors) + len(self._others)

    def admit(self) -> None:
        """Raise the 503 a new request would get now (asked before its body
        is read)."""
        with self._cv:
            self._check_room()

    def _check_room(self) -> None:
        if self._closed:
            raise shutting_down()
        if self.waiting >= self.cfg.queue + self.parallel - self.busy:  # free slots take one each
            retry = max(1, math.ceil(self._seconds * (self.waiting + 1) / self.parallel))
            self.metrics.rejected += 1
            raise ApiError(503, f"the server is busy: {self.busy} requests are running and {self.waiting} "
                                f"waiting (--parallel {self.parallel}, --queue {self.cfg.queue}); "
                                f"retry in about {retry} s",
                           kind="unavailable_error", headers={"Retry-After": str(retry)})

    def compile(self, spec):
        """`spec` compiled against the target's vocabulary, from a request's own thread."""
        from ..llama.grammar import compile_for

        return compile_for(self.pair.target.vocab, spec)

    def recognize(self, req: Request) -> None:
        """A raw prompt in the model's own FIM template goes the editor's way (start.recognize_fim)."""
        recognize_fim(fim_markers(self.pair.target.vocab) if self.cfg.parse_special else None, req)

    def constraint_of(self, req: Request):
        """What constrains `req`: its own constraint, or its tools' (constrain.tool_spec)."""
        if req.tools is None:
            return req.constraint
        return tool_spec(self.pair.target.vocab, self.cfg.model, req.tools, req.constraint)

    def submit(self, job: Job) -> None:
        with self._cv:
            self._check_room()
            (self._editors if job.req.kind == "infill" else self._others).append(job)
            self._cv.notify()

    def withdraw(self, job: Job) -> None:
        """The client went away: its request leaves the batch at the next
        round, or gives up its place in the queue."""
        job.cancel.set()
        with self._cv:
            for queue in (self._editors, self._others):
                try:
                    queue.remove(job)
                except ValueError:
                    pass
            self._cv.notify()

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking requests, end the running ones at the next round,
        answer the waiting ones 503, and wait for the models to be free."""
        with self._cv:
            self._closed = True
            for queue in (self._editors, self._others):
                while queue:
                    queue.popleft().emit("error", shutting_down())
            for r in self.running:
                r.job.cancel.set()
            self._cv.notify_all()
        self._thread.join(timeout)

    # -- the loop -----------------------------------------------------------------
    def _loop(self) -> None:
        recount = Recount() if self.cfg.recount else None
        while True:
            change = None
            with self._cv:
                while not self.waiting and not self.busy and not self._closed and change is None:
                    if recount is None:
                        self._cv.wait()
                        continue
                    recount.idle()
                    if not self._cv.wait(RECOUNT_S):
                        change = recount.check(self.pair.target.n_threads)
                if self._closed and not self.busy:
                    return
                if recount is not None and change is None:
                    recount.busy()
                arrived = []
                while change is None and self.waiting and self.busy + len(arrived) < self.parallel and not self._closed:
                    arrived.append((self._editors or self._others).popleft())
            if change is not None:  # idle: the requests that come meanwhile wait in the queue
                self._rethread(*change)
                continue
            for i, job in enumerate(arrived):
                self._start(job, coming=len(arrived) - i - 1 + self.waiting)
            self._round()

    def _rethread(self, n: int, busy: float) -> None:
        """The pair runs `n` threads from now on (Pair.rethread), said in the log."""
        log.warning("other programs now keep %.1f of this process's cores busy: llama.cpp runs %d thread%s "
                    "from now on", busy, n, "s" if n > 1 else "")
        try:
            self.pair.rethread(n, busy)
        except Exception:  # a bug: say so, keep serving at whatever count the models have
            log.exception("changing the thread count failed")

    def _start(self, job: Job, coming: int = 0) -> None:
        """`job` takes a slot and joins the batch; every error is an event."""
        self.metrics.waited(time.monotonic() - job.queued_at)
        if job.cancel.is_set():
            return
        try:
            self._begin(job, coming)
        except ApiError as e:
            job.emit("error", e)
        except SpecError as e:
            job.emit("error", ApiError(400, e.message + (f" {e.hint}" if e.hint else "")))
        except Exception as e:  # a bug: say so, keep serving
            log.exception("request failed")
            job.emit("error", internal(e))

    def _slot_for(self, tokens: list[int], coming: int = 0) -> tuple[int, int | None]:
        """(the slot `tokens` runs in, the slot whose cache it takes first or
        None): `choose_slot` over the slots now, `coming` requests behind it."""
        t = self.pair.target
        free = [seq for seq, r in enumerate(self.slots) if r is None]
        busy = [seq for seq, r in enumerate(self.slots) if r is not None]
        held = {seq: common_prefix(t.held(seq), tokens) for seq in free}
        return choose_slot(free, busy, held, self._used, len(tokens),
                           filling=len(busy) + 1 + coming >= len(self.slots) or self._spare is None)

    def _begin(self, job: Job, coming: int = 0) -> None:
        req, pair = job.req, self.pair
        n_ctx = pair.target.n_ctx
        check_ids(req, pair.target.n_vocab)
        # an infill prompt is cut to fit (as llama-server does), leaving room to answer
        room = min(req.max_tokens if req.max_tokens is not None else 256, n_ctx // 4)
        tokens, truncated, where = prompt_of(self.pair.target, req, n_ctx - room, special=self.cfg.parse_special,
                                             reasoning=(self.cfg.reasoning_format, self.cfg.reasoning_budget))
        if len(tokens) >= n_ctx:
            raise ApiError(400, f"the prompt is {len(tokens)} tokens but the context holds {n_ctx}: "
                                "shorten it, or run with a larger --ctx", param=where)
        seq, cached = self._slot_for(tokens, coming)
        if cached is not None:
            if pair.swap_seq(cached, seq, self._spare):  # the two slots' caches, recency and all, change places
                self._used[cached] = self._used.get(seq, 0)
            else:
                seq = cached  # a model whose sequences cannot be copied: the prefix where it is
        self._used[seq] = self._tick = self._tick + 1
        pair.use(seq)
        if not req.cache_prompt:
            pair.reset()
        sampling = req.sampling
        seed = req.seed if req.seed is not None else secrets.randbits(31)
        proposer, name = proposer_for(pair, req, self.cfg.proposer, self.store)
        vocab = pair.target.vocab
        reply = Reply(req, self.cfg.model, name, seed, len(tokens), truncated, piece=vocab.piece,
                      tokenize=lambda text: vocab.tokenize(text, add_special=False))
        if req.echo:
            echo(pair.target, reply, tokens)
        if req.max_tokens == 0:  # llama.vim's warm-up: read the prompt into the cache, write nothing
            job.emit("start", reply)
            job.emit("done", self._prefill_only(pair, tokens))
            self.served += 1
            return
        spec = req.speculation
        draft_max = self.cfg.draft_max if spec is None or spec.draft_max is None else \
            min(self.cfg.draft_max, spec.draft_max)
        gen = GenConfig(sampling=sampling, max_tokens=req.max_tokens or n_ctx, draft_max=draft_max,
                        stop=req.stop, seed=seed, adaptive=self.cfg.adaptive, rule=self.cfg.rule,
                        grammar=req.grammar, adjust=req.adjust, logprobs=req.logprobs,
                        draft_min=spec.draft_min if spec is not None else 0)
        session = Session(pair, tokens, gen, proposer, stops=editor_stops(req), cancelled=job.cancel.is_set)
        stream = self.batch.add(seq, Generation(pair.target, proposer, tokens, gen), editor=req.kind == "infill")
        session.begin()
        self.slots[seq] = Running(job, session, stream)
        job.emit("start", reply)

    def _round(self) -> None:
        """One round of the batch; each request's step goes to its client."""
        for r in self.running:  # a client that went away leaves before the round
            if r.job.cancel.is_set():
                r.session.finish = "cancelled"
                self._end(r)
        if not len(self.batch):
            return
        by_stream = {r.stream: r for r in self.running}
        try:
            steps = self.batch.round()
        except Exception as e:  # the round's batch failed: every request in it ends
            if isinstance(e, SpecError):
                err = ApiError(500, e.message + (f" {e.hint}" if e.hint else ""), kind="server_error")
                log.error("a round failed: %s", e.message)
            else:
                log.exception("a round failed")
                err = internal(e)
            for r in self.running:
                r.job.emit("error", err)
                self._end(r, done=False)
            return
        self.metrics.round(self.batch.last_rows, self.batch.last_s)
        for stream, step in steps:
            r = by_stream.get(stream)
            if r is None:
                continue
            self.metrics.step(step)

            def show(step, stats, job=r.job):
                if step.logprobs:
                    job.emit("probs", step.logprobs)  # they go out with the next text
                if step.text:
                    job.emit("step", step.segments)  # the text by origin: drafted and accepted, or the target's

            # a request answered at once needs no event a step: each wakes the event
            # loop's thread, which takes a core from llama.cpp's threads mid-decode
            if r.session.take(step, show if r.job.req.stream else None):
                self._end(r)
        if self._spare is not None:
            # one that ended left a gap: the others close it, each slot's cache kept (Batch.compact)
            free = [seq for seq, r in enumerate(self.slots) if r is None]
            for src, dst in self.batch.compact(free, self._spare):
                self.slots[dst], self.slots[src] = self.slots[src], None
                self._used[src], self._used[dst] = self._used.get(dst, 0), self._used.get(src, 0)

    def _end(self, r: Running, done: bool = True) -> None:
        """`r` leaves its slot: its output is kept for the lookup, its
        client told."""
        self.batch.drop(r.stream)
        self.slots[r.stream.seq] = None
        session = r.session.end()
        if done:
            self.store.add(session.prompt, session.tokens)
            self.metrics.finished(session, r.job.req.kind)
            r.job.emit("done", session)
        t = time.monotonic() - r.started
        self._seconds += 0.2 * (t - self._seconds)
        self.served += 1

    @staticmethod
    def _prefill_only(pair: Pair, tokens: list[int]) -> Session:
        from ..core.stats import Stats

        t0 = time.perf_counter()
        stats = Stats(prefill_tokens=pair.target.catch_up(tokens[:-1]))
        stats.prefill_s = stats.wall_s = time.perf_counter() - t0
        session = Session(pair, tokens, GenConfig(max_tokens=0), proposer=None, stats=stats)
        session.finish = "length"
        return session
