"""The routes of the front doors beside OpenAI's: Anthropic's Messages
(anthropic.py), OpenAI's Responses (responses.py) and Ollama's API
(ollama.py).  Each generating route is app.py's one endpoint over its
door, so the key, the body limit, the queue, constraints and `/metrics`
hold on every one; the rest answer from the loaded model's facts."""

from __future__ import annotations

import asyncio

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import anthropic, ollama, responses


def routes(r, worker) -> list[Route]:
    """`r`: app.py's _Routes (endpoint, utility, guard)."""
    t = worker.pair.target
    store = responses.Store()
    said = responses.Responses(store)
    messages = r.endpoint(anthropic.Anthropic())
    respond = r.endpoint(said)
    chat, generate = r.endpoint(ollama.Chat(t.n_ctx)), r.endpoint(ollama.Generate(t.n_ctx))
    facts: dict = {}

    async def described() -> dict:
        if not facts:
            from ..llama.facts import describe
            facts.update(await asyncio.to_thread(describe, t))
        return facts

    def name() -> str:
        return worker.cfg.model if ":" in worker.cfg.model else worker.cfg.model + ":latest"

    async def tags(request: HttpRequest) -> Response:
        r.guard(request)
        return JSONResponse({"models": [ollama.model_entry(name(), await described())]})

    async def ps(request: HttpRequest) -> Response:
        r.guard(request)
        entry = ollama.model_entry(name(), await described())
        return JSONResponse({"models": [{**entry, "expires_at": "9999-12-31T00:00:00Z",
                                         "size_vram": 0, "context_length": t.n_ctx}]})

    async def show(request: HttpRequest) -> Response:
        r.guard(request)
        from ..core.tools import family_of

        template = t.vocab.chat_template() or ""
        return JSONResponse(ollama.show(name(), await described(), t.n_ctx, template,
                                        family_of(template) is not None))

    async def version(request: HttpRequest) -> Response:
        return JSONResponse({"version": ollama.VERSION})

    async def stored(request: HttpRequest) -> Response:
        r.guard(request)
        rid = request.path_params["rid"]
        return JSONResponse(said.delete(rid) if request.method == "DELETE" else said.get(rid))

    return [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", r.utility(anthropic.count_tokens), methods=["POST"]),
        Route("/v1/responses", respond, methods=["POST"]), Route("/responses", respond, methods=["POST"]),
        Route("/v1/responses/{rid}", stored, methods=["GET", "DELETE"]),
        Route("/api/chat", chat, methods=["POST"]), Route("/api/generate", generate, methods=["POST"]),
        Route("/api/tags", tags), Route("/api/ps", ps), Route("/api/version", version),
        Route("/api/show", show, methods=["GET", "POST"]),
    ]
