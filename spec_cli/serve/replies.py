"""The wire formats of responses: a finished or running Session as
OpenAI's response, its stream chunks (with the tool calls read from the
text where the request had tools), and llama-server's `/infill` and
`timings`.  Pure functions, no HTTP."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.stats import Stats
from .api import Request


FINISH = {"stop": "stop", "length": "length", "context": "length", "cancelled": "stop",
          "interrupted": "stop", None: None}


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def speculation(stats: Stats, proposer: str, seed: int) -> dict:
    """The extra field every response carries: what drafted and how much of
    it the target kept, overall, by draft position (1, 2, ...) and by where
    the drafts came from ("prompt", "output", "hist": the lookup; "draft",
    "mtp"), and the generation's time split between drafting and verifying
    (its tokens a second count the end token, as usage does)."""
    return {"proposer": proposer, "drafted": stats.drafted, "accepted": stats.accepted,
            "acceptance": round(stats.acceptance_rate, 4), "mean_accepted": round(stats.mean_accepted, 4),
            "steps": stats.steps, "seed": seed,
            "per_position": [round(r, 4) for r in stats.position_rates()], "by_source": stats.source_rates(),
            "draft_ms": round(stats.draft_s * 1000, 3), "verify_ms": round(stats.verify_s * 1000, 3),
            "tokens_per_s": round(stats.generated_per_s, 3), "mask_ms": round(stats.mask_s * 1000, 3)}


def timings(stats: Stats, n_cached: int) -> dict:
    """llama-server's `timings` object, with its draft counts."""
    prompt_ms = stats.prefill_s * 1000
    predicted_ms = stats.gen_s * 1000
    return {
        "cache_n": n_cached,
        "prompt_n": stats.prefill_tokens, "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / stats.prefill_tokens, 3) if stats.prefill_tokens else 0.0,
        "prompt_per_second": round(stats.prefill_tokens / stats.prefill_s, 3) if stats.prefill_s > 0 else 0.0,
        "predicted_n": stats.generated, "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / stats.generated, 3) if stats.generated else 0.0,
        "predicted_per_second": round(stats.generated * 1000 / predicted_ms, 3) if predicted_ms > 0 else 0.0,
        "draft_n": stats.drafted, "draft_n_accepted": stats.accepted,
    }


def usage(n_prompt: int, stats: Stats, predicted: bool = False) -> dict:
    """OpenAI's usage; with a prediction (Predicted Outputs), its drafted
    tokens the target accepted and rejected."""
    out = {"prompt_tokens": n_prompt, "completion_tokens": stats.generated, "total_tokens": n_prompt + stats.generated,
           "prompt_tokens_details": {"cached_tokens": cached(n_prompt, stats)}}
    if predicted:
        _, drafted, accepted = stats.by_source.get("prediction", (0, 0, 0))
        out["completion_tokens_details"] = {"accepted_prediction_tokens": accepted,
                                            "rejected_prediction_tokens": drafted - accepted}
    return out


def cached(n_prompt: int, stats: Stats) -> int:
    """Prompt tokens the KV cache already held (the last one is always fed
    with the first batch)."""
    return max(0, n_prompt - stats.prefill_tokens - 1) if stats.steps else n_prompt - stats.prefill_tokens


@dataclass
class Reply:
    """Everything a response says about one finished (or running) request."""

    req: Request
    model: str
    proposer: str
    seed: int
    n_prompt: int
    truncated: bool = False
    rid: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    piece: Callable[..., bytes] | None = None   # a token's bytes (the target's vocabulary), for logprobs
    tokenize: Callable[[str], list] | None = None  # a text's tokens: the thinking's count in usage
    echo_text: str = ""     # `echo`: the prompt, written before the completion
    echo_probs: list = field(default_factory=list)  # ... and its tokens' logprobs (the first None)

    @property
    def native(self) -> bool:
        """llama-server's own response shape: /infill and /completion."""
        return self.req.native

    def logprobs(self, probs) -> Any:
        """Tokens' logprobs (core.adjust.TokenLogprob) in this endpoint's
        shape; None where the request asked for none."""
        if self.req.logprobs is None or self.piece is None:
            return None
        text = lambda t: self.piece(t, special=True)  # noqa: E731
        if self.native:
            return [{**_entry(p.token, p.logprob, text, ids=True),
                     "top_logprobs": [_entry(t, lp, text, ids=True) for t, lp in p.top]} for p in probs]
        if self.req.kind == "chat":
            return {"content": [{**_entry(p.token, p.logprob, text),
                                 "top_logprobs": [_entry(t, lp, text) for t, lp in p.top]} for p in probs],
                    "refusal": None}
        probs = [*self.echo_probs, *probs]  # the prompt's first token has no logprob (None), but a text
        tokens = [_text(text(p.token)) for p in probs]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        return {"tokens": tokens, "token_logprobs": [p.logprob for p in probs],
                "top_logprobs": [{_text(text(t)): lp for t, lp in p.top} if p.top is not None else None
                                 for p in probs]
                if self.req.logprobs else None, "text_offset": offsets}

    def thinking_tokens(self, reasoning: str | None) -> int:
        """The reply's thinking tokens, counted again from its text (the markers not counted)."""
        return len(self.tokenize(reasoning)) if reasoning and self.tokenize is not None else 0

    def __post_init__(self):
        self.rid = self.rid or new_id(self.req.kind)

    def extras(self, stats: Stats) -> dict:
        n_cached = cached(self.n_prompt, stats)
        out = {"speculation": speculation(stats, self.proposer, self.seed), "timings": timings(stats, n_cached)}
        g = self.req.grammar
        if g is not None and g.spec is not None:  # what constrained the output, and what of it was not enforced
            out["constraint"] = {"kind": g.spec.kind, "field": g.spec.where, "strict": g.spec.strict,
                                 "warnings": list(g.warnings), "compile_ms": round(g.compile_s * 1000, 3)}
        return out

    def full(self, text: str, finish: str | None, stats: Stats, stop_type: str | None = None, probs=()) -> dict:
        """The non-streamed response (`probs`: its tokens' logprobs, where asked)."""
        if self.native:
            return self.infill(text, finish, stats, final=True, stop_type=stop_type, probs=probs)
        choice: dict[str, Any] = {"index": 0, "finish_reason": FINISH.get(finish, "stop"),
                                  "logprobs": self.logprobs(probs)}
        extra: dict[str, Any] = {}
        used = usage(self.n_prompt, stats, self.req.prediction is not None)
        if self.req.kind == "chat":
            from .stream import read

            r = read(text, self.req)
            choice["message"] = {"role": "assistant", "content": r.content}
            parsed = r.calls
            if parsed is not None and parsed.calls:
                choice["message"] = {"role": "assistant", "content": parsed.content,
                                     "tool_calls": list(parsed.calls)}
                choice["finish_reason"] = "tool_calls"
                extra["tool_call_form"] = parsed.form  # the template's syntax, or a form it read besides
            if r.reasoning:  # llama-server's and DeepSeek's name, and vLLM's newer one
                choice["message"].update(reasoning_content=r.reasoning, reasoning=r.reasoning)
                used["completion_tokens_details"] = {"reasoning_tokens": self.thinking_tokens(r.reasoning)}
            if r.unfinished:
                extra["reasoning_unfinished"] = True  # cut inside its thinking: no answer came
            obj = "chat.completion"
        else:
            choice["text"] = self.echo_text + text
            obj = "text_completion"
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice], "usage": used, **self.extras(stats), **extra}

    def tool_chunk(self, calls) -> dict:
        """The streamed tool calls, each whole in one delta (OpenAI's clients
        join deltas by `index`)."""
        delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]}
        return {"id": self.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}]}

    def chunk(self, text: str | None, finish: str | None, stats: Stats | None = None, *,
              first: bool = False, stop_type: str | None = None, segments=None, probs=(),
              reasoning: str = "") -> dict:
        """One streamed chunk: text, or the final one with the finish reason.
        `segments`, the text by origin ((piece, drafted?) pairs), go out as
        the extension field `spec_segments` ([{"text", "drafted"}], which
        OpenAI clients ignore): drafted is true for text the draft proposed
        and the target accepted, false for the target's own tokens."""
        if self.native:
            return self.infill(text or "", finish, stats, final=stats is not None, stop_type=stop_type, probs=probs)
        choice: dict[str, Any] = {"index": 0, "finish_reason": FINISH.get(finish) if stats is not None else None,
                                  "logprobs": self.logprobs(probs) if probs else None}
        if self.req.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if reasoning:
                delta.update(reasoning_content=reasoning, reasoning=reasoning)
            if text:
                delta["content"] = text
            choice["delta"] = delta
            obj = "chat.completion.chunk"
        else:
            choice["text"] = text or ""
            obj = "text_completion"
        out = {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}
        if segments:
            out["spec_segments"] = [{"text": piece, "drafted": bool(drafted)} for piece, drafted in segments]
        if stats is not None:
            out.update(self.extras(stats))
        return out

    def usage_chunk(self, stats: Stats) -> dict:
        obj = "chat.completion.chunk" if self.req.kind == "chat" else "text_completion"
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": [],
                "usage": usage(self.n_prompt, stats, self.req.prediction is not None)}

    def infill(self, text: str, finish: str | None, stats: Stats | None, *, final: bool,
               stop_type: str | None = None, probs=()) -> dict:
        """llama-server's /infill response (or one streamed piece of it).
        `stop_type` as llama-server's ("eos", "word", "limit": a token
        budget, the context, n_indent, a time limit, the suffix repeated);
        `tokens_cached`: the tokens the context holds after it, the prompt's
        and the completion's."""
        out: dict[str, Any] = {"content": text, "stop": final, "model": self.model}
        if self.req.logprobs is not None and (probs or final):
            out["completion_probabilities"] = self.logprobs(probs)
        if final and stats is not None:
            stop_type = stop_type or ("none" if finish in ("cancelled", "interrupted") else "limit")
            out.update({
                "tokens_predicted": stats.generated, "tokens_evaluated": self.n_prompt,
                "tokens_cached": self.n_prompt + stats.tokens,
                "truncated": self.truncated, "stop_type": stop_type, "has_new_line": "\n" in text,
                "finish_reason": FINISH.get(finish, "stop"), **self.extras(stats)})
        if final and self.req.response_fields:
            return pick_fields(out, self.req.response_fields)
        return out


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _entry(token: int, logprob: float, text: Callable[[int], bytes], *, ids: bool = False) -> dict:
    """One token's logprob entry: OpenAI's {token, logprob, bytes}, with
    llama-server's `id` first (`ids`)."""
    b = text(token)
    out = {"id": token} if ids else {}
    out.update({"token": _text(b), "logprob": logprob, "bytes": list(b)})
    return out


def pick_fields(obj: dict, paths: list[str]) -> dict:
    """llama-server's `response_fields`: each path ("timings/prompt_n")
    that exists, as a flat key."""
    out = {}
    for path in paths:
        node: Any = obj
        for part in path.split("/"):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            out[path] = node
    return out
