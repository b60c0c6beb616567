"""OpenAI's Responses API (`POST /v1/responses`, `GET` and `DELETE
/v1/responses/{id}`), as Codex CLI and the OpenAI Agents SDK speak it: its
`input` items, `instructions`, function tools and `text.format` translated
into the chat request every door shares (api.parse_chat: the same field
checks), and the one reply stream into its output items and typed events.
`previous_response_id` continues a stored conversation (`Store`).  What it
cannot do (built-in tools, background mode) is a 400 naming the field."""

from __future__ import annotations

import collections
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator

from .api import ApiError, Request, bad, json_object, number, parse_chat
from .door import Door, sse
from .messages import text_parts
from .replies import Reply, cached
from .stream import Done, Failed, Text, answer, pieces

STORE_N = 256          # responses kept for previous_response_id (the oldest go first)
STORE_S = 3600.0       # ... each for at most this long
# llama-server's reasoning fields, taken here as in its chat completions
THINKING = ("chat_template_kwargs", "reasoning_format", "reasoning_budget_tokens", "thinking_budget_tokens")
KNOWN = {*THINKING, "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
         "max_output_tokens", "temperature", "top_p", "stream", "store", "previous_response_id", "metadata", "user",
         "truncation", "reasoning", "include", "service_tier", "safety_identifier", "prompt_cache_key", "stream_options",
         "seed", "speculation"}  # the last two: spec-cli's own, as in its chat completions
REFUSED = {"background": "asks for background mode: this server answers while the client waits",
           "conversation": "names a stored conversation: this server keeps none (send previous_response_id)",
           "prompt": "names a stored prompt template: this server keeps none",
           "top_logprobs": "is not supported on /v1/responses: ask POST /v1/chat/completions for logprobs",
           "max_tool_calls": "is not supported: the model calls as many tools as it writes"}
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


@dataclass
class _Streamed:
    """A streamed response's state between pieces: its head, the message's
    and the reasoning's ids, their text so far, the open text part."""

    head: dict
    msg_id: str = field(default_factory=lambda: _rid("msg_"))
    rs_id: str = field(default_factory=lambda: _rid("rs_"))
    text: list = field(default_factory=list)
    thought: list = field(default_factory=list)
    at: dict = field(default_factory=dict)


def _rid(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class Store:
    """Responses kept for `previous_response_id` and GET/DELETE: the last
    STORE_N, each for STORE_S seconds, in this process's memory only."""

    def __init__(self, n: int = STORE_N, seconds: float = STORE_S):
        self.n, self.seconds = n, seconds
        self._items: collections.OrderedDict[str, tuple[float, dict, list]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def put(self, response: dict, messages: list[dict]) -> None:
        with self._lock:
            self._items[response["id"]] = (time.monotonic(), response, messages)
            while len(self._items) > self.n:
                self._items.popitem(last=False)

    def get(self, rid: str) -> tuple[dict, list] | None:
        with self._lock:
            item = self._items.get(rid)
            if item is None or time.monotonic() - item[0] > self.seconds:
                self._items.pop(rid, None)
                return None
            return item[1], item[2]

    def delete(self, rid: str) -> bool:
        with self._lock:
            return self._items.pop(rid, None) is not None


def _text(content: Any, where: str) -> str:
    return text_parts(content, where, kinds=_TEXT_PARTS, shape="text part")


def _items(value: Any, history: list[dict]) -> list[dict]:
    """`input` as chat messages after `history`: messages, an assistant's
    function calls (one message), their outputs as tool messages."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("input", "must be a string or a non-empty list of items")
    issued = {c["id"] for m in history for c in m.get("tool_calls", ())}
    out: list[dict] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, "must be an item object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad(f"{where}.role", "must be user, assistant, system or developer")
            out.append({"role": "system" if role == "developer" else role,
                        "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            for name in ("call_id", "name", "arguments"):
                if not isinstance(item.get(name), str):
                    raise bad(f"{where}.{name}", "must be a string")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            issued.add(item["call_id"])
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            if item.get("call_id") not in issued:
                raise bad(f"{where}.call_id", f"is {str(item.get('call_id'))[:80]!r}, which no earlier "
                                              "function_call item issued")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _text(item.get("output", ""), f"{where}.output")})
        elif kind == "reasoning":
            continue  # an earlier turn's reasoning is not the model's to read again
        else:
            raise bad(f"{where}.type", f"is {str(kind)[:60]!r}: input items here are message, function_call, "
                                       "function_call_output")
    return out


def _tools(body: dict, chat: dict) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad("tools", "must be a list of function tools")
        out = []
        for i, t in enumerate(tools):
            kind = t.get("type") if isinstance(t, dict) else None
            if kind != "function":
                raise bad(f"tools[{i}].type", f"is {str(kind)[:60]!r}: this server runs no built-in tools; "
                                              "only {\"type\": \"function\", ...} tools")
            fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if t.get(k) is not None}
            out.append({"type": "function", "function": fn})
        if out:
            chat["tools"] = out
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function":
            raise bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"name\": ...}")
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        chat["tool_choice"] = choice
    if "parallel_tool_calls" in body:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]


def _format(body: dict, chat: dict) -> None:
    text = body.get("text")
    if text is None:
        return
    if not isinstance(text, dict):
        raise bad("text", "must be an object such as {\"format\": {\"type\": \"json_object\"}}")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_object", "json_schema"):
        raise bad("text.format", "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}")
    if fmt["type"] == "json_object":
        chat["response_format"] = {"type": "json_object"}
    else:
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": fmt.get("name", "answer"), "schema": fmt.get("schema"), "strict": fmt.get("strict")}}


class Responses(Door):
    """`POST /v1/responses`, over a Store."""

    def __init__(self, store: Store):
        self.store = store

    def parse(self, body: Any) -> Request:
        body = json_object(body)
        for name, why in REFUSED.items():
            if body.get(name):
                raise bad(name, why)
        history: list[dict] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            found = self.store.get(previous) if isinstance(previous, str) else None
            if found is None:
                raise ApiError(404, f"no stored response {str(previous)[:80]!r} (responses are kept for "
                                    f"{STORE_S / 60:.0f} minutes, the last {STORE_N}, while the server runs)",
                               kind="not_found_error", param="previous_response_id")
            history = found[1]
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise bad("instructions", "must be a string")
        turn = _items(body.get("input"), history)
        system = [{"role": "system", "content": instructions}] if instructions else []
        limit = number(body, "max_output_tokens", None, lo=1, integer=True)
        chat = {"messages": system + history + turn, "max_tokens": limit,
                **{k: body[k] for k in ("temperature", "top_p", "stream", "seed", "speculation", *THINKING)
                   if k in body}}
        _tools(body, chat)
        _format(body, chat)
        _reasoning(body, chat)
        req = parse_chat(chat)
        if not isinstance(body.get("store", True), bool):
            raise bad("store", "must be true or false")
        req.ignored = sorted(k for k in body if k not in KNOWN)
        req.door = {"body": body, "history": history + turn}
        return req

    def _response(self, reply: Reply, session, status: str = "completed") -> dict:
        """The response object; `session` None: as it starts (no output yet)."""
        body = reply.req.door["body"]
        out = {"id": "resp_" + reply.rid.rsplit("-", 1)[-1], "object": "response", "created_at": reply.created,
               "status": status, "error": None, "incomplete_details": None,
               "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
               "model": reply.model, "output": [], "parallel_tool_calls": body.get("parallel_tool_calls", True),
               "previous_response_id": body.get("previous_response_id"),
               "reasoning": body.get("reasoning") if isinstance(body.get("reasoning"), dict) else None,
               "store": body.get("store", True), "temperature": reply.req.sampling.temperature,
               "text": body.get("text") or {"format": {"type": "text"}},
               "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
               "top_p": reply.req.sampling.top_p, "truncation": "disabled", "usage": None,
               "user": body.get("user"), "metadata": body.get("metadata") or {}}
        if session is None:
            return out
        a = answer(session, reply.req)
        if a.reasoning:
            out["output"].append(_reasoning_item(a.reasoning))
        if a.content or not (a.calls or a.reasoning):  # the stream says no message where no text came
            out["output"].append(_message(a.content or ""))
        out["output"] += [_call(c) for c in a.calls]
        if a.unfinished or a.reason == "length":
            out["status"], out["incomplete_details"] = "incomplete", {"reason": "max_output_tokens"}
        hit = cached(reply.n_prompt, session.stats)
        out["usage"] = {"input_tokens": reply.n_prompt, "input_tokens_details": {"cached_tokens": hit},
                        "output_tokens": session.stats.generated,
                        "output_tokens_details": {"reasoning_tokens": reply.thinking_tokens(a.reasoning)},
                        "total_tokens": reply.n_prompt + session.stats.generated}
        out.update(reply.extras(session.stats))
        return out

    def _keep(self, reply: Reply, response: dict) -> dict:
        if response["store"]:
            said = []
            for item in response["output"]:
                if item["type"] == "reasoning":
                    continue  # the template shows an earlier turn's thinking or not: kept apart here
                if item["type"] == "message":
                    said.append({"role": "assistant", "content": item["content"][0]["text"]})
                else:
                    call = {"id": item["call_id"], "type": "function",
                            "function": {"name": item["name"], "arguments": item["arguments"]}}
                    if said:
                        said[-1].setdefault("tool_calls", []).append(call)
                    else:
                        said.append({"role": "assistant", "content": "", "tool_calls": [call]})
            self.store.put(response, reply.req.door["history"] + said)
        return response

    def full(self, reply: Reply, session) -> dict:
        return self._keep(reply, self._response(reply, session))

    async def events(self, reply: Reply, job) -> AsyncIterator[str]:
        """response.created, in_progress, the message item's text deltas,
        each function call's arguments, then response.completed (or
        .incomplete at the token limit, .failed on an error); what one
        piece of the job brings in one write."""
        n = iter(range(1 << 62))

        def event(kind: str, **fields) -> str:
            return sse({"type": kind, "sequence_number": next(n), **fields}, kind)

        head = self._response(reply, None, "in_progress")
        yield event("response.created", response=head) + event("response.in_progress", response=head)
        st = _Streamed(head)
        async for p in pieces(job, reply.req):
            out = "".join(self._events_of(p, reply, st, event))
            if out:
                yield out

    def _events_of(self, p, reply: Reply, st: "_Streamed", event) -> Iterator[str]:
        """The events of one piece of the job (stream.pieces)."""
        if isinstance(p, Text):
            if p.reasoning:
                if not st.thought:
                    yield event("response.output_item.added", output_index=0,
                                item={**_reasoning_item("", st.rs_id), "status": "in_progress", "content": []})
                st.thought.append(p.reasoning)
                yield event("response.reasoning_text.delta", item_id=st.rs_id, output_index=0, content_index=0,
                            delta=p.reasoning)
            if not p.text:
                return
            if not st.text:
                if st.thought:
                    yield from self._thought_done(event, st.rs_id, "".join(st.thought))
                st.at = dict(item_id=st.msg_id, output_index=1 if st.thought else 0, content_index=0)
                yield event("response.output_item.added", output_index=st.at["output_index"],
                            item={**_message("", st.msg_id), "status": "in_progress", "content": []})
                yield event("response.content_part.added", **st.at, part=_part(""))
            st.text.append(p.text)
            extra = {"spec_segments": [{"text": t, "drafted": bool(d)} for t, d in p.segments]} \
                if p.segments else {}
            yield event("response.output_text.delta", **st.at, delta=p.text, logprobs=[], **extra)
        elif isinstance(p, Done):
            final = self._response(reply, p.session)
            first = 0
            if st.thought:
                final["output"][0]["id"] = st.rs_id
                if not st.text:
                    yield from self._thought_done(event, st.rs_id, "".join(st.thought))
                first = 1
            if st.text:
                whole = "".join(st.text)
                yield event("response.output_text.done", **st.at, text=whole, logprobs=[])
                yield event("response.content_part.done", **st.at, part=_part(whole))
                final["output"][first]["id"] = st.msg_id
                yield event("response.output_item.done", output_index=first, item=final["output"][first])
                first += 1
            elif len(final["output"]) > first and final["output"][first]["type"] == "message":
                final["output"].pop(first)  # no text came: the stream said no message
            for i, item in enumerate(final["output"][first:], first):
                yield event("response.output_item.added", output_index=i,
                            item={**item, "arguments": "", "status": "in_progress"})
                yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
                            delta=item["arguments"])
                yield event("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                            name=item["name"], arguments=item["arguments"])
                yield event("response.output_item.done", output_index=i, item=item)
            self._keep(reply, final)
            done = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
            yield event(done, response=final)
        elif isinstance(p, Failed):
            failed = {**st.head, "status": "failed",
                      "error": {"code": "server_error" if p.error.status >= 500 else "invalid_prompt",
                                "message": p.error.message}}
            yield event("response.failed", response=failed)

    @staticmethod
    def _thought_done(event, rs_id: str, whole: str):
        yield event("response.reasoning_text.done", item_id=rs_id, output_index=0, content_index=0, text=whole)
        yield event("response.output_item.done", output_index=0, item=_reasoning_item(whole, rs_id))

    def get(self, rid: str) -> dict:
        found = self.store.get(rid)
        if found is None:
            raise ApiError(404, f"no stored response {rid[:80]!r}", kind="not_found_error")
        return found[0]

    def delete(self, rid: str) -> dict:
        if not self.store.delete(rid):
            raise ApiError(404, f"no stored response {rid[:80]!r}", kind="not_found_error")
        return {"id": rid, "object": "response", "deleted": True}


def _part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(text: str, mid: str | None = None) -> dict:
    return {"type": "message", "id": mid or _rid("msg_"), "status": "completed", "role": "assistant",
            "content": [_part(text)]}


def _reasoning_item(text: str, rid: str | None = None) -> dict:
    """A reasoning item: the model's own thinking as its content (no summary is made)."""
    return {"type": "reasoning", "id": rid or _rid("rs_"), "summary": [], "status": "completed",
            "content": [{"type": "reasoning_text", "text": text}]}


def _reasoning(body: dict, chat: dict) -> None:
    """Responses' `reasoning: {"effort": ...}` as the chat's reasoning_effort."""
    value = body.get("reasoning")
    if value is None:
        return
    if not isinstance(value, dict):
        raise bad("reasoning", "must be an object such as {\"effort\": \"low\"}")
    if value.get("effort") is not None:
        chat["reasoning_effort"] = value["effort"]


def _call(call: dict) -> dict:
    fn = call["function"]
    return {"type": "function_call", "id": _rid("fc_"), "call_id": call["id"], "name": fn["name"],
            "arguments": fn["arguments"], "status": "completed"}
