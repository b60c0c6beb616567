"""One generation at a time on the pair, a bounded FIFO queue behind it.

The HTTP side (app.py, on the event loop) submits a `Job` and reads its
events; the worker thread owns the models.  Nothing is reset between
requests: both models' KV caches keep the last request's tokens, so the
next turn of a chat or the next completion in the same file evaluates
only what is new, and the lookup drafts from earlier outputs too
(suffix.Store).
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

from ..core.config import SamplingConfig
from ..errors import SpecError
from ..run.editor import EditorStops, fim_prompt
from ..run.engine import GenConfig
from ..run.runner import Pair
from ..run.session import Session
from ..run.suffix import Store
from .api import ApiError, Reply, Request

log = logging.getLogger("spec_cli.serve")


@dataclass(frozen=True)
class ServeConfig:
    model: str                 # the name responses carry
    queue: int = 16            # requests waiting behind the running one
    draft_max: int = 16
    adaptive: bool = True
    store_tokens: int = 1 << 16   # earlier outputs kept for the lookup (suffix.Store)


class Job:
    """One request: events go from the worker thread to the event loop as
    ("start", Reply) | ("step", text) | ("done", Session) | ("error", ApiError)."""

    def __init__(self, req: Request, loop: asyncio.AbstractEventLoop):
        self.req, self.loop = req, loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancel = threading.Event()

    def emit(self, kind: str, payload) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, payload))
        except RuntimeError:  # the loop is closed: nobody is listening
            self.cancel.set()


class Worker:
    def __init__(self, pair: Pair, cfg: ServeConfig):
        self.pair, self.cfg = pair, cfg
        self.store = Store(max_tokens=cfg.store_tokens)
        self._jobs: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self.running: Job | None = None
        self._seconds = 1.0  # a request's usual duration, for Retry-After
        self.served = 0
        self._thread = threading.Thread(target=self._loop, name="spec-cli-worker", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._jobs)

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closed:
                raise ApiError(503, "the server is shutting down", kind="unavailable_error")
            if len(self._jobs) >= self.cfg.queue + (self.running is None):  # the idle models take one
                retry = max(1, math.ceil(self._seconds * (len(self._jobs) + 1)))
                raise ApiError(503, f"the server is busy: {len(self._jobs)} requests are waiting "
                                    f"(--queue {self.cfg.queue}); retry in about {retry} s",
                               kind="unavailable_error", headers={"Retry-After": str(retry)})
            self._jobs.append(job)
            self._cv.notify()

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking requests, end the running one at its next step, answer
        the waiting ones 503, and wait for the models to be free."""
        with self._cv:
            self._closed = True
            while self._jobs:
                self._jobs.popleft().emit("error", ApiError(503, "the server is shutting down",
                                                            kind="unavailable_error"))
            if self.running is not None:
                self.running.cancel.set()
            self._cv.notify_all()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if not self._jobs:
                    return
                job = self.running = self._jobs.popleft()
            t0 = time.perf_counter()
            try:
                if not job.cancel.is_set():
                    self._run(job)
            except ApiError as e:
                job.emit("error", e)
            except SpecError as e:
                job.emit("error", ApiError(400, e.message + (f" {e.hint}" if e.hint else "")))
            except Exception as e:  # a bug: say so, keep serving
                log.exception("request failed")
                job.emit("error", ApiError(500, f"internal error: {e}", kind="server_error"))
            finally:
                with self._cv:
                    self.running = None
                self._seconds += 0.2 * (time.perf_counter() - t0 - self._seconds)
                self.served += 1

    def _prompt(self, req: Request, budget: int) -> tuple[list[int], bool, str]:
        """(tokens, truncated, the field the prompt came from)."""
        target = self.pair.target
        if req.kind == "chat":
            return target.tokenize_chat(target.apply_chat_template(req.messages)), False, "messages"
        if req.kind == "completion":
            return target.tokenize(req.prompt, add_special=True, parse_special=False), False, "prompt"
        fim = fim_prompt(target, req.input_prefix, req.input_suffix, middle=req.prompt,
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
        try:
            sampling = SamplingConfig(temperature=req.temperature, top_k=req.top_k, top_p=req.top_p,
                                      min_p=req.min_p)
        except ValueError as e:
            raise ApiError(400, str(e)) from e
        seed = req.seed if req.seed is not None else secrets.randbits(31)
        if not req.cache_prompt:
            pair.reset()
        reply = Reply(req, self.cfg.model, pair.config.proposer, seed, len(tokens), truncated)
        if req.max_tokens == 0:  # llama.vim's warm-up: read the prompt into the cache, write nothing
            job.emit("start", reply)
            job.emit("done", self._prefill_only(pair, tokens))
            return
        gen = GenConfig(sampling=sampling, max_tokens=req.max_tokens or n_ctx, draft_max=self.cfg.draft_max,
                        stop=req.stop, seed=seed, adaptive=self.cfg.adaptive, rule=pair.config.rule)
        stops = (EditorStops(n_indent=req.n_indent, suffix=req.input_suffix, t_max_predict_ms=req.t_max_predict_ms)
                 if req.kind == "infill" else None)
        session = Session(pair, tokens, gen, pair.new_proposer(store=self.store),
                          stops=stops, cancelled=job.cancel.is_set)
        job.emit("start", reply)
        session.run(lambda step, stats: job.emit("step", step.text) if step.text else None)
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
