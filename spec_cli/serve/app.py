"""The HTTP side of `spec-cli serve` (Starlette, run by uvicorn): a chat
page at `/`, the front doors (door.py: the OpenAI API and llama-server's
`/completion` and `/infill`; doors.py: Anthropic's Messages, OpenAI's
Responses, Ollama's API), `/health`; API key, body limit and
read timeouts, server-sent events, and a client that goes away stopping
its generation at the next step (or leaving the queue).  Who may connect
at all is access.py's.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..core.config import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P
from .access import READ_S
from .api import ApiError, Request, internal, parse_chat, parse_completion, parse_infill
from . import doors, utility
from .door import Door, OpenAI
from .shapes import error_body
from .metrics import slot_views
from .replies import Reply
from .worker import Job, Worker

MAX_BODY = 8 << 20  # bytes; llama.vim's extra context is ~100 kB
BODY_S = 60.0       # seconds a client has to send the whole body (at most `read_s` between two pieces)

log = logging.getLogger("spec_cli.serve")


class _Gone(Exception):
    """The client disconnected."""


def create_app(worker: Worker, *, api_key: str | None = None, max_body: int = MAX_BODY,
               read_s: float = READ_S) -> Starlette:
    """The routes over `worker`, with the API key, body limit and read
    timeout given."""
    r = _Routes(worker, api_key.encode() if api_key else None, max_body, read_s)
    chat, completion, infill = (r.endpoint(OpenAI(p)) for p in (parse_chat, parse_completion, parse_infill))
    native = r.endpoint(OpenAI(lambda body: parse_completion(body, native=True)))
    routes = [
        Route("/", _page), Route("/index.html", _page),
        Route("/health", r.health), Route("/v1/health", r.health),
        Route("/metrics", r.metrics), Route("/slots", r.slots),
        Route("/v1/models", r.models), Route("/models", r.models),
        Route("/v1/chat/completions", chat, methods=["POST"]), Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completion, methods=["POST"]), Route("/completions", completion, methods=["POST"]),
        Route("/infill", infill, methods=["POST"]), Route("/completion", native, methods=["POST"]),
        Route("/tokenize", r.utility(utility.tokenize), methods=["POST"]),
        Route("/detokenize", r.utility(utility.detokenize), methods=["POST"]),
        Route("/apply-template", r.utility(utility.apply_template), methods=["POST"]),
        Route("/props", r.props), Route("/tokenizer_info", r.tokenizer_info),
        *doors.routes(r, worker),
    ]
    return Starlette(routes=routes, exception_handlers={ApiError: _api_error, HTTPException: _http_error,
                                                        Exception: _internal_error})


class _Routes:
    """What each route does, over one worker."""

    def __init__(self, worker: Worker, key: bytes | None, max_body: int, read_s: float):
        self.worker, self.key, self.max_body, self.read_s = worker, key, max_body, read_s
        self._compiling = asyncio.Semaphore(1)  # constraints compile one at a time, beside the rounds

    def guard(self, request: HttpRequest) -> None:
        if self.key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer":  # Anthropic's clients send the key as x-api-key
            token = request.headers.get("x-api-key", "")
        if not hmac.compare_digest(token.strip().encode(), self.key):
            raise ApiError(401, "invalid or missing API key: send 'Authorization: Bearer <key>' "
                                "(or 'x-api-key: <key>')",
                           kind="authentication_error", headers={"WWW-Authenticate": "Bearer"})

    async def read_body(self, request: HttpRequest) -> bytes:
        """The whole body, within the size limit and the read timeouts."""
        max_body, read_s = self.max_body, self.read_s
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > max_body:
            raise ApiError(413, f"the request body is over {max_body} bytes")
        body, size = [], 0
        deadline = time.monotonic() + BODY_S
        chunks = request.stream().__aiter__()
        while True:
            wait = min(read_s, deadline - time.monotonic())
            try:
                chunk = await asyncio.wait_for(chunks.__anext__(), max(wait, 0.0))
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise ApiError(408, f"the request body did not arrive in time (at most {BODY_S:.0f} s in all, "
                                    f"{read_s:g} s between pieces)", kind="timeout_error") from None
            size += len(chunk)
            if size > max_body:
                raise ApiError(413, f"the request body is over {max_body} bytes")
            body.append(chunk)
        return b"".join(body)

    def endpoint(self, door: Door):
        async def handle(request: HttpRequest) -> Response:
            self.guard(request)
            self.worker.admit()  # a full queue says so before the body is read
            try:
                body = _json(await self.read_body(request))
            except ClientDisconnect:
                log.info("a client left while sending its request body")
                return Response(status_code=499)
            req = door.parse(body)
            if isinstance(req, dict):  # answered without generating
                return JSONResponse(req)
            self.worker.recognize(req)
            spec = self.worker.constraint_of(req)
            if spec is not None:
                req.grammar = await self.compile(spec)
            return await self.serve(request, Job.on_loop(req, asyncio.get_running_loop()), door)
        return handle

    def utility(self, answer: Callable[[object, object], dict]):
        """A route answered from the target's vocabulary alone (utility.py), in a thread."""
        async def handle(request: HttpRequest) -> Response:
            self.guard(request)
            body = _json(await self.read_body(request))
            return JSONResponse(await asyncio.to_thread(answer, self.worker.pair.target.vocab, body))
        return handle

    async def props(self, request: HttpRequest) -> Response:
        self.guard(request)
        return JSONResponse(utility.props(self.worker))

    async def tokenizer_info(self, request: HttpRequest) -> Response:
        self.guard(request)
        return JSONResponse(utility.tokenizer_info(self.worker))

    async def compile(self, spec):
        """A request's constraint compiled in a thread of its own, one at a
        time, within COMPILE_S; a 400 naming the field where it cannot be."""
        from ..core.constraint import ConstraintError
        from .constrain import COMPILE_S, refused

        async with self._compiling:
            try:
                return await asyncio.wait_for(asyncio.to_thread(self.worker.compile, spec), COMPILE_S)
            except ConstraintError as e:
                raise refused(spec, e) from None
            except asyncio.TimeoutError:
                raise refused(spec) from None

    async def serve(self, request: HttpRequest, job: Job, door: Door) -> Response:
        """Queue `job`, then stream its events or answer once it is done."""
        worker = self.worker
        worker.submit(job)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            kind, payload = await _next_event(job, gone)  # queued, then started (or refused)
            if kind == "error":
                raise payload
            reply: Reply = payload
            if job.req.stream:
                gone.cancel()  # the streaming response listens for the disconnect itself
                return StreamingResponse(_events(door, job, reply), media_type=door.media_type,
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                                                  **_ignored(job.req)})
            while True:
                kind, payload = await _next_event(job, gone)
                if kind == "error":
                    raise payload
                if kind == "done":
                    return JSONResponse(door.full(reply, payload), headers=_ignored(job.req))
        except _Gone:
            worker.withdraw(job)
            return Response(status_code=499)
        except BaseException:
            worker.withdraw(job)
            raise
        finally:
            gone.cancel()

    async def health(self, request: HttpRequest) -> Response:
        w = self.worker
        return JSONResponse({"status": "ok", "busy": w.busy > 0, "running": w.busy, "slots": w.parallel,
                             "waiting": w.waiting, "served": w.served})

    async def metrics(self, request: HttpRequest) -> Response:
        """Prometheus' text format (metrics.py)."""
        self.guard(request)
        w = self.worker
        text = w.metrics.render(queue=w.waiting, busy=w.busy, slots=w.parallel, served=w.served) \
            + w.metrics.render_llamacpp(busy=w.busy, waiting=w.waiting)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def slots(self, request: HttpRequest) -> Response:
        """Each slot (a KV sequence of its own): idle, or whom it serves now
        and how far it got -- llama-server's /slots, in spec-cli's words."""
        self.guard(request)
        return JSONResponse(slot_views(self.worker))

    async def models(self, request: HttpRequest) -> Response:
        self.guard(request)
        pair = self.worker.pair
        t = pair.target
        return JSONResponse({"object": "list", "data": [{
            "id": self.worker.cfg.model, "object": "model", "created": 0, "owned_by": "spec-cli",
            "meta": {"n_ctx": t.n_ctx, "n_ctx_train": t.n_ctx_train, "draft": pair.draft_name,
                     "mtp": pair.mtp,  # the target drafts with its own multi-token-prediction layers
                     "proposer": pair.config.proposer,
                     # what a request that sets none samples with (llama-server's defaults)
                     "sampling_defaults": {"top_k": DEFAULT_TOP_K, "top_p": DEFAULT_TOP_P,
                                           "min_p": DEFAULT_MIN_P}}}]})


# the page may run only its own inline script and style and talk only to this server
_PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
             "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def _page(request: HttpRequest) -> Response:
    """The chat page (page.html): one static file, no build step, nothing
    fetched from elsewhere; same-origin, so access.py's checks hold."""
    from importlib.resources import files

    html = files("spec_cli.serve").joinpath("page.html").read_bytes()
    return Response(html, media_type="text/html; charset=utf-8",
                    headers={"Content-Security-Policy": _PAGE_CSP, "X-Content-Type-Options": "nosniff",
                             "Cache-Control": "no-cache"})


IGNORED_HEADER = "spec-cli-ignored-fields"


def _ignored(req: Request) -> dict[str, str]:
    """The header naming the request's fields no rule knows (serve/fields.py): ignored, and said so."""
    return {IGNORED_HEADER: ", ".join(req.ignored)[:2000]} if req.ignored else {}


def _json(body: bytes):
    """A request body as JSON text, or a 400 naming what is wrong with it."""
    try:
        obj = json.loads(body)
        # a lone surrogate ("\\ud800") is valid JSON but no text: refused here, before anything tokenizes it
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # before ValueError, its base
        raise ApiError(400, "the request body holds a lone surrogate (\\ud800-\\udfff without its pair): "
                            "not valid Unicode text") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {str(e)[:200]}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    return obj


async def _next_event(job: Job, gone: asyncio.Future):
    """The job's next event; _Gone as soon as the client disconnects."""
    get = asyncio.ensure_future(job.events.get())
    done, _ = await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
    if get in done:
        return get.result()
    get.cancel()
    raise _Gone()


async def _api_error(request: HttpRequest, exc: ApiError) -> Response:
    return JSONResponse(error_body(request.url.path, exc), status_code=exc.status, headers=exc.headers)


async def _internal_error(request: HttpRequest, exc: Exception) -> Response:
    # a bug: the log has the traceback, the client the error's kind (never its input)
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body(request.url.path, internal(exc)), status_code=500)


async def _http_error(request: HttpRequest, exc: HTTPException) -> Response:
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return JSONResponse(error_body(request.url.path, ApiError(exc.status_code, f"{request.method} "
                                                              f"{request.url.path}: {exc.detail}", kind=kind)),
                        status_code=exc.status_code)


async def _disconnected(request: HttpRequest) -> None:
    """Returns when the client disconnects (the body has been read: the
    next message uvicorn gives is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _events(door: Door, job: Job, reply: Reply):
    """The door's stream of the job's reply."""
    try:
        async for piece in door.events(reply, job):
            yield piece
    finally:
        job.cancel.set()  # a client that went away stops its generation at the next step
