"""One generation at a time on the pair, a bounded queue behind it, editors
first.

The HTTP side (app.py, on the event loop) submits a `Job` and reads its
events; the worker thread owns the models.  Nothing is reset between
requests: both models' KV caches keep the last request's tokens, so the
next turn of a chat or the next completion in the same file evaluates
only what is new, and the lookup drafts from earlier outputs too
(suffix.Store).

Editors (`/infill`) wait in a queue of their own, served before the
others.  With an editor sequence (the models loaded with two, as `serve`
does by default) an editor request that arrives while a chat generates is
served between two of the chat's steps, in its own sequence, and the chat
goes on where it was: a completion's latency does not depend on a chat
streaming beside it, and neither request's KV prefix is lost.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass

from ..errors import SpecError
from ..run.editor import EditorStops, fim_prompt
from ..run.engine import GenConfig
from ..run.runner import Pair
from ..run.session import Session
from ..run.suffix import Store
from .api import ApiError, Reply, Request, internal, shutting_down

log = logging.getLogger("spec_cli.serve")


@dataclass(frozen=True)
class ServeConfig:
    model: str                 # the name responses carry
    queue: int = 16            # requests waiting behind the running one
    draft_max: int = 16
    adaptive: bool = True
    rule: str = "gumbel"       # the acceptance rule (engine.GenConfig.rule)
    store_tokens: int = 1 << 16   # earlier outputs kept for the lookup (suffix.Store)


class Job:
    """One request: events go from the worker thread to the event loop as
    ("start", Reply) | ("step", ((text, drafted?), ...)) | ("done", Session) | ("error", ApiError)."""

    def __init__(self, req: Request, loop: asyncio.AbstractEventLoop):
        self.req, self.loop = req, loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancel = threading.Event()

    def emit(self, kind: str, payload) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, payload))
        except RuntimeError:  # the loop is closed: nobody is listening
            self.cancel.set()


EDITOR_SEQ = 1  # the editors' sequence in both models (0: everything else)


class Worker:
    def __init__(self, pair: Pair, cfg: ServeConfig):
        self.pair, self.cfg = pair, cfg
        self.store = Store(max_tokens=cfg.store_tokens)
        self._editors: collections.deque[Job] = collections.deque()
        self._others: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self.running: Job | None = None
        self.nested: Job | None = None  # an editor's request served between a running one's steps
        self._seconds = 1.0  # a request's usual duration, for Retry-After
        self.served = 0
        self._thread = threading.Thread(target=self._loop, name="spec-cli-worker", daemon=True)
        self._thread.start()

    @property
    def editor_seq(self) -> bool:
        """Whether editors have a sequence of their own (and so can be served
        between a running request's steps)."""
        return self.pair.target.n_seq > EDITOR_SEQ

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
        if self.waiting >= self.cfg.queue + (self.running is None):  # the idle models take one
            retry = max(1, math.ceil(self._seconds * (self.waiting + 1)))
            raise ApiError(503, f"the server is busy: {self.waiting} requests are waiting "
                                f"(--queue {self.cfg.queue}); retry in about {retry} s",
                           kind="unavailable_error", headers={"Retry-After": str(retry)})

    def submit(self, job: Job) -> None:
        with self._cv:
            self._check_room()
            (self._editors if job.req.kind == "infill" else self._others).append(job)
            self._cv.notify()

    def withdraw(self, job: Job) -> None:
        """The client went away: stop its generation at the next step, or
        give up its place in the queue."""
        job.cancel.set()
        with self._cv:
            for queue in (self._editors, self._others):
                try:
                    queue.remove(job)
                except ValueError:
                    pass

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking requests, end the running ones at their next step,
        answer the waiting ones 503, and wait for the models to be free."""
        with self._cv:
            self._closed = True
            for queue in (self._editors, self._others):
                while queue:
                    queue.popleft().emit("error", shutting_down())
            for job in (self.running, self.nested):
                if job is not None:
                    job.cancel.set()
            self._cv.notify_all()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self.waiting and not self._closed:
                    self._cv.wait()
                if not self.waiting:
                    return
                job = self.running = (self._editors or self._others).popleft()
            try:
                self._serve(job)
            finally:
                with self._cv:
                    self.running = None

    def _serve(self, job: Job) -> None:
        """Run one request to its end, in its sequence; every error is an event."""
        t0 = time.perf_counter()
        seq = EDITOR_SEQ if job.req.kind == "infill" and self.editor_seq else 0
        self.pair.use(seq)
        try:
            if not job.cancel.is_set():
                self._run(job)
        except ApiError as e:
            job.emit("error", e)
        except SpecError as e:
            job.emit("error", ApiError(400, e.message + (f" {e.hint}" if e.hint else "")))
        except Exception as e:  # a bug: say so, keep serving
            log.exception("request failed")
            job.emit("error", internal(e))
        finally:
            self.pair.use(0)
            self._seconds += 0.2 * (time.perf_counter() - t0 - self._seconds)
            self.served += 1

    def _between_steps(self) -> None:
        """Serve the editors waiting now, each in the editors' sequence,
        while the running request waits at a step boundary."""
        while True:
            with self._cv:
                if not self._editors or self._closed:
                    return
                job = self.nested = self._editors.popleft()
            try:
                self._serve(job)
            finally:
                with self._cv:
                    self.nested = None

    def _prompt(self, req: Request, budget: int) -> tuple[list[int], bool, str]:
        """(tokens, truncated, the field the prompt came from)."""
        target = self.pair.target
        if req.kind == "chat":
            return target.vocab.tokenize_chat(req.messages), False, "messages"
        if req.kind == "completion":
            return target.vocab.tokenize(req.prompt, add_special=True, parse_special=False), False, "prompt"
        fim = fim_prompt(target.vocab, req.input_prefix, req.input_suffix, middle=req.prompt,
                         extra=req.input_extra, budget=budget)
        return fim.tokens, fim.truncated, "input_prefix"

    def _run(self, job: Job) -> None:
        req, pair = job.req, self.pair
        n_ctx = pair.target.n_ctx
        # an infill prompt is cut to fit (as llama-server does), leaving room to answer
        room = min(req.max_tokens if req.max_tokens is not None else 256, n_ctx // 4)
        tokens, truncated, where = self._prompt(req, n_ctx - room)
        if len(tokens) >= n_ctx:
            raise ApiError(400, f"the prompt is {len(tokens)} tokens but the context holds {n_ctx}: "
                                "shorten it, or restart the server with a larger --ctx", param=where)
        sampling = req.sampling
        seed = req.seed if req.seed is not None else secrets.randbits(31)
        if not req.cache_prompt:
            pair.reset()
        reply = Reply(req, self.cfg.model, pair.config.proposer, seed, len(tokens), truncated)
        if req.max_tokens == 0:  # llama.vim's warm-up: read the prompt into the cache, write nothing
            job.emit("start", reply)
            job.emit("done", self._prefill_only(pair, tokens))
            return
        gen = GenConfig(sampling=sampling, max_tokens=req.max_tokens or n_ctx, draft_max=self.cfg.draft_max,
                        stop=req.stop, seed=seed, adaptive=self.cfg.adaptive, rule=self.cfg.rule)
        stops = (EditorStops(n_indent=req.n_indent, suffix=req.input_suffix, t_max_predict_ms=req.t_max_predict_ms)
                 if req.kind == "infill" else None)
        session = Session(pair, tokens, gen, pair.new_proposer(store=self.store),
                          stops=stops, cancelled=job.cancel.is_set)
        job.emit("start", reply)
        between = self._between_steps if self.editor_seq and req.kind != "infill" else None

        def on_step(step, stats):
            if step.text:
                job.emit("step", step.segments)  # the text by origin: drafted and accepted, or the target's
            if between is not None and step.finish_reason is None:
                between()

        session.run(on_step)
        self.store.add(tokens, session.tokens)
        job.emit("done", session)

    @staticmethod
    def _prefill_only(pair: Pair, tokens: list[int]) -> Session:
        from ..core.stats import Stats

        t0 = time.perf_counter()
        stats = Stats(prefill_tokens=pair.target.catch_up(tokens[:-1]))
        stats.prefill_s = stats.wall_s = time.perf_counter() - t0
        session = Session(pair, tokens, GenConfig(max_tokens=0), proposer=None, stats=stats)
        session.finish = "length"
        return session
