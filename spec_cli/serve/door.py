"""A front door: one API's requests translated into the engine's `Request`
(api.py's record, checked with its field checks), and the one reply stream
(stream.py) translated into that API's answer, stream events and errors.
Every door goes through the same worker: the batch, the exact rule,
constraints, the queue, the access checks, the limits and `/metrics`.

`OpenAI` is the first door (chat completions, completions, llama-server's
`/completion` and `/infill`); anthropic.py, responses.py and ollama.py are
the others."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable

from .api import ApiError, Request
from .replies import Reply
from .stream import Done, Failed, Text, pieces


def sse(obj: dict, event: str | None = None) -> str:
    """One server-sent event (named, where the API names them)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class Door:
    """What an API route does with a request and its reply."""

    media_type = "text/event-stream"

    def parse(self, body: Any) -> Request | dict:
        """The request, or a dict answered at once without generating."""
        raise NotImplementedError

    def full(self, reply: Reply, session) -> dict:
        """The non-streamed answer."""
        raise NotImplementedError

    def events(self, reply: Reply, job) -> AsyncIterator[str]:
        """The streamed answer, piece by piece."""
        raise NotImplementedError

    def error(self, e: ApiError) -> dict:
        return e.body()


class OpenAI(Door):
    """OpenAI's chat completions and completions, llama-server's
    `/completion` and `/infill` (replies.py's shapes)."""

    def __init__(self, parse: Callable[[Any], Request]):
        self._parse = parse

    def parse(self, body: Any) -> Request:
        return self._parse(body)

    def full(self, reply: Reply, session) -> dict:
        return reply.full(session.text, session.finish, session.stats, session.stop_type, session.logprobs)

    async def events(self, reply: Reply, job) -> AsyncIterator[str]:
        """OpenAI's chunks ending in `data: [DONE]`, or llama-server's
        pieces ending in one with `"stop": true`."""
        req = reply.req
        if req.kind == "chat":
            yield sse(reply.chunk(None, None, first=True))
        async for p in pieces(job, req):
            if isinstance(p, Text):
                if p.reasoning and p.text:  # a step across the thinking's end: the thinking's chunk first
                    yield (sse(reply.chunk(None, None, reasoning=p.reasoning))
                           + sse(reply.chunk(p.text, None, segments=p.segments, probs=p.probs)))
                else:
                    yield sse(reply.chunk(p.text, None, segments=p.segments, probs=p.probs, reasoning=p.reasoning))
            elif isinstance(p, Done):  # the end's chunks in one write
                s = p.session
                final = reply.chunk(None, s.finish, s.stats, stop_type=s.stop_type, probs=p.probs)
                if p.thinking is not None and p.thinking.unfinished:
                    final["reasoning_unfinished"] = True
                out = []
                if p.calls is not None and p.calls.calls:
                    out.append(sse(reply.tool_chunk(p.calls.calls)))
                    final["choices"][0]["finish_reason"] = "tool_calls"
                    final["tool_call_form"] = p.calls.form
                out.append(sse(final))
                if req.include_usage and not reply.native:
                    out.append(sse(reply.usage_chunk(s.stats)))
                if not reply.native:
                    out.append("data: [DONE]\n\n")
                yield "".join(out)
            elif isinstance(p, Failed):
                yield sse(p.error.body())
