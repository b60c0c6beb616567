"""One reply, read the same way by every front door (OpenAI, Anthropic,
Responses, Ollama): a job's events as `Text` pieces (tool-call text held
back while a call may be coming), then one `Done` with the calls read from
the whole reply, or one `Failed`.  A door turns these into its own events;
a non-streamed answer is `answer(session, req)`.  No HTTP here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from ..core.tools import Parsed, StreamFilter, parse
from .api import ApiError, Request


@dataclass(frozen=True)
class Text:
    """Text that may go out now: `segments`, its (piece, drafted?) pairs
    where it is a step's whole text (the `spec_segments` extension), and
    `probs`, the logprobs of the tokens it completes."""

    text: str
    segments: tuple | None = None
    probs: tuple = ()


@dataclass(frozen=True)
class Done:
    """The end: the finished Session (text, finish, stats, stop_type,
    stop_word), the logprobs not sent yet, and the tool calls read."""

    session: object
    probs: tuple = ()
    calls: Parsed | None = None


@dataclass(frozen=True)
class Failed:
    error: ApiError


@dataclass(frozen=True)
class Answer:
    """A finished reply as every door says it: the text that is not a call
    (None where the reply is only calls), the calls in OpenAI's shape, the
    form they came in, and why it ended: "stop" (an end token), "word" (a
    stop string: `stop_word`), "length" (max tokens or the context),
    "tool_calls", or "cancelled"."""

    content: str | None
    calls: tuple[dict, ...]
    form: str | None
    reason: str
    stop_word: str | None = None


def ending(session, calls: Parsed | None) -> str:
    if calls is not None and calls.calls:
        return "tool_calls"
    if session.finish in ("length", "context"):
        return "length"
    if session.finish in ("cancelled", "interrupted"):
        return "cancelled"
    return "word" if session.stop_type == "word" else "stop"


def answer(session, req: Request) -> Answer:
    """The non-streamed reply of `req` read for calls (where it had tools)."""
    text = session.text
    parsed = parse(text, req.tools) if req.tools is not None else None
    if parsed is not None and parsed.calls:
        return Answer(parsed.content, parsed.calls, parsed.form, "tool_calls")
    return Answer(text, (), None, ending(session, None), session.stop_word)


async def pieces(job, req: Request) -> AsyncIterator[Text | Done | Failed]:
    """The job's events after "start", as Text pieces and one Done or Failed."""
    calls = None if req.tools is None else StreamFilter(req.tools)
    probs: list = []  # logprobs of tokens whose text has not gone out yet
    while True:
        kind, payload = await job.events.get()
        if kind == "probs":
            probs.extend(payload)
        elif kind == "step":
            text = "".join(text for text, _ in payload)
            shown = text if calls is None else calls.feed(text)
            if shown:
                yield Text(shown, payload if shown == text else None, tuple(probs))
                probs = []
        elif kind == "done":
            parsed = None
            if calls is not None:
                rest, parsed = calls.finish()
                if rest:
                    yield Text(rest)
            yield Done(payload, tuple(probs), parsed)
            return
        elif kind == "error":
            yield Failed(payload)
            return
