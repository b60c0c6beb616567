"""One reply, read the same way by every front door (OpenAI, Anthropic,
Responses, Ollama): a job's events as `Text` pieces (tool-call text held
back while a call may be coming), then one `Done` with the calls read from
the whole reply, or one `Failed`.  A door turns these into its own events;
a non-streamed answer is `answer(session, req)`.  No HTTP here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from ..core.reasoning import Split, split
from ..core.calls import Parsed, StreamFilter, parse
from .api import ApiError, Request


@dataclass(frozen=True)
class Text:
    """Text that may go out now: `segments`, its (piece, drafted?) pairs
    where it is a step's whole text (the `spec_segments` extension), and
    `probs`, the logprobs of the tokens it completes."""

    text: str
    segments: tuple | None = None
    probs: tuple = ()
    reasoning: str = ""   # thinking that may go out now (a reasoning model's: core/reasoning.py)


@dataclass(frozen=True)
class Done:
    """The end: the finished Session (text, finish, stats, stop_type,
    stop_word), the logprobs not sent yet, and the tool calls read."""

    session: object
    probs: tuple = ()
    calls: Parsed | None = None
    thinking: Split | None = None   # the reply's reasoning read apart (None: not a reasoning template)


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
    reasoning: str | None = None   # the thinking, apart (None: none)
    unfinished: bool = False       # the reply ended inside its thinking (no answer yet)


@dataclass(frozen=True)
class Read:
    """A whole reply read: its thinking (None: none), the answer's text,
    the calls in it (None: no tools), and whether it ended mid-thought."""

    reasoning: str | None
    content: str
    calls: Parsed | None
    unfinished: bool = False


def read(text: str, req: Request) -> Read:
    """A whole reply of `req` read for its thinking (req.thinking), then for calls."""
    reasoning, unfinished, plan = None, False, req.thinking
    if plan is not None:
        s = split(text, plan.markers, plan.start)
        text, reasoning, unfinished = s.content, s.reasoning if s.opened else None, s.unfinished
    parsed = parse(text, req.tools) if req.tools is not None else None
    return Read(reasoning, text, parsed, unfinished)


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
    r = read(session.text, req)
    parsed = r.calls
    if parsed is not None and parsed.calls:
        return Answer(parsed.content, parsed.calls, parsed.form, "tool_calls", reasoning=r.reasoning)
    return Answer(r.content, (), None, ending(session, None), session.stop_word, r.reasoning, r.unfinished)


async def pieces(job, req: Request) -> AsyncIterator[Text | Done | Failed]:
    """The job's events after "start", as Text pieces and one Done or Failed.
    The steps already queued when one is read go out with it, as one Text:
    a client that reads slower than the worker writes (or an event loop
    busy a moment) gets one write for them, not one each."""
    calls = None if req.tools is None else StreamFilter(req.tools)
    plan = req.thinking
    thinking = None if plan is None else Split(plan.markers, plan.start)
    probs: list = []  # logprobs of tokens whose text has not gone out yet
    while True:
        events = [await job.events.get()]
        while events[-1][0] in ("probs", "step") and not job.events.empty():
            events.append(job.events.get_nowait())
        segments: list = []
        for kind, payload in events:
            if kind == "probs":
                probs.extend(payload)
            elif kind == "step":
                segments.extend(payload)
        if segments:
            text = "".join(text for text, _ in segments)
            thought, answer_text = thinking.feed(text) if thinking is not None else ("", text)
            shown = answer_text if calls is None else calls.feed(answer_text)
            if shown or thought:
                yield Text(shown, tuple(segments) if shown == text else None, tuple(probs), thought)
                probs = []
        kind, payload = events[-1]
        if kind == "done":
            parsed, thought, rest = None, "", ""
            if thinking is not None:
                thought, answer_text = thinking.finish()
                rest = answer_text if calls is None else calls.feed(answer_text)
            if calls is not None:
                tail, parsed = calls.finish()
                rest += tail
            if rest or thought:
                yield Text(rest, None, (), thought)
            yield Done(payload, tuple(probs), parsed, thinking)
            return
        elif kind == "error":
            yield Failed(payload)
            return
