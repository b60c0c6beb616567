"""What a request starts with, before its first round: its prompt's
tokens, the token ids it names checked against the vocabulary, its proposer (the server's, or the
one its `speculation` names, with its `p_min` and `prediction`), and an
echoed prompt's logprobs.  Run in the worker's thread (they may decode)."""

from __future__ import annotations

import functools

from ..errors import SpecError
from .api import ApiError, Request, fill_in
from .replies import Reply

ECHO_CHUNK = 64  # prompt rows read at once for an echoed prompt's logprobs (echo)


def prompt_of(target, req: Request, budget: int, *, special: bool = True,
              reasoning: tuple[str, int | None] = ("auto", None)) -> tuple[list[int], bool, str]:
    """The request's prompt as tokens, whether it was cut to `budget` (an
    editor's context), and the field it came from.  A raw prompt's special
    tokens are read as the model's (`special`; a chat message's never are).
    A chat's reply is planned for its thinking (thinking.plan, with the
    server's `reasoning` format and budget): `req.thinking`, and its
    constraint made to start after the thinking."""
    from ..run.editor import fim_prompt

    vocab = target.vocab
    if req.kind == "chat":
        from .thinking import plan, template_kwargs

        use = req.tools
        tools = [t.as_openai() for t in use.tools] if use is not None and use.choice != "none" else None
        kwargs, ignored = template_kwargs(vocab.chat_template(), req.reasoning)
        if ignored and "reasoning_effort" not in req.ignored:
            req.ignored.append("reasoning_effort")  # the template has no notion of it: the header says so
        tokens = vocab.tokenize_chat(req.messages, tools, kwargs)
        req.thinking, tokens, req.grammar = plan(vocab, req.reasoning, tokens, *reasoning, req.grammar)
        return tokens, False, "messages"
    if req.kind == "completion":
        if req.prompt_ids is not None:
            return list(req.prompt_ids), False, "prompt"
        return vocab.tokenize(req.prompt, add_special=True, parse_special=special), False, "prompt"
    if req.fim_text is not None:  # the client's own FIM template, as written
        return vocab.tokenize(req.fim_text, add_special=True, parse_special=True), False, "prompt"
    fim = fim_prompt(vocab, req.input_prefix, req.input_suffix, middle=req.prompt,
                     extra=req.input_extra, budget=budget)
    if not fim.fim and req.fim_from is not None:
        raise ApiError(400, f"'{req.fim_from}' asks for fill-in-the-middle, but {vocab.name} has no "
                            "fill-in-the-middle tokens: leave it out, or serve a model that has them "
                            "(a coder model: spec-cli models list)", param=req.fim_from)
    return fim.tokens, fim.truncated, "input_prefix"


@functools.lru_cache(maxsize=4)
def fim_markers(vocab) -> tuple[str, str, str] | None:
    """The texts of the vocabulary's FIM prefix, suffix and middle tokens, or None."""
    sp = vocab.special_tokens()
    ids = (sp["fim_pre"], sp["fim_suf"], sp["fim_mid"])
    return None if min(ids) < 0 else tuple(vocab.token_text(t) for t in ids)


def recognize_fim(markers: tuple[str, str, str] | None, req: Request) -> None:
    """A raw completion prompt written in the model's own FIM template
    (prefix-suffix-middle or suffix-prefix-middle, each marker once, the
    middle so far after the last) goes the editor's way, read as written."""
    if markers is None or req.kind != "completion" or req.prompt_ids is not None or req.echo:
        return
    text = req.prompt
    if any(text.count(m) != 1 for m in markers):
        return
    pre, suf, mid = (text.find(m) for m in markers)
    n_pre, n_suf, n_mid = (len(m) for m in markers)
    if pre < suf < mid:      # PSM: <pre> prefix <suf> suffix <mid> middle
        prefix, suffix = text[pre + n_pre:suf], text[suf + n_suf:mid]
    elif suf < pre < mid:    # SPM: <suf> suffix <pre> prefix <mid> middle
        prefix, suffix = text[pre + n_pre:mid], text[suf + n_suf:pre]
    else:
        return
    fill_in(req, prefix + text[mid + n_mid:], suffix, "prompt", text)


def editor_stops(req: Request):
    """Where an editor's middle ends (run.editor.EditorStops), or None for
    a request that is not one."""
    from ..run.editor import EditorStops

    if req.kind != "infill":
        return None
    return EditorStops(n_indent=req.n_indent, suffix=req.input_suffix, t_max_predict_ms=req.t_max_predict_ms,
                       prefix=req.input_prefix + req.prompt, insertion=req.editor_stops)


def check_ids(req: Request, n_vocab: int) -> None:
    """Token ids a request names are the vocabulary's (a 400 naming the field)."""
    if req.adjust is not None and req.adjust.bias and req.adjust.bias[-1][0] >= n_vocab:
        raise ApiError(400, f"'logit_bias' names token {req.adjust.bias[-1][0]}, but the vocabulary has "
                            f"{n_vocab} (POST /tokenize gives a text's ids)", param="logit_bias")
    if req.prompt_ids is not None and not all(0 <= t < n_vocab for t in req.prompt_ids):
        raise ApiError(400, f"'prompt' holds a token id outside the vocabulary (0 to {n_vocab - 1})",
                       param="prompt")


def echo(target, reply: Reply, tokens: list[int]) -> None:
    """The prompt written back (`echo`), with each token's logprob after
    the ones before it where logprobs are asked for: the target reads the
    prompt but its last token afresh in its sequence, every row kept (the
    generation then finds it in the cache)."""
    from ..core.adjust import TokenLogprob, logprob_of

    n, vocab = reply.req.logprobs, target.vocab
    reply.echo_text = b"".join(vocab.piece(t, special=False) for t in tokens).decode("utf-8", "replace") \
        if reply.req.prompt_ids is not None else reply.req.prompt
    if n is None:
        return
    probs, body = [TokenLogprob(tokens[0], None, None)], tokens[:-1]
    target.candidates_k = None
    target.truncate(0)
    for start in range(0, len(body), ECHO_CHUNK):
        chunk = body[start:start + ECHO_CHUNK]
        rows = target.decode(chunk, logits_from=0, copy=False)
        probs += [logprob_of(rows[j], tokens[start + j + 1], n) for j in range(len(chunk))]
    reply.echo_probs = probs


def proposer_for(pair, req: Request, default: str | None, store):
    """(what drafts for `req`, its name): the server's (`default`, else the
    pair's own), or the one its `speculation` names (a 400 naming the field
    where the server did not load what it needs), with its `p_min` and
    `prediction`."""
    from ..run.proposers.registry import PROPOSERS

    spec = req.speculation
    name = default or pair.config.proposer
    if spec is not None and spec.proposer is not None and spec.proposer != name:
        if spec.proposer not in PROPOSERS:
            raise ApiError(400, f"'speculation.proposer' must be one of {', '.join(PROPOSERS)}, not "
                                f"{spec.proposer!r}", param="speculation.proposer")
        name = spec.proposer
    try:
        proposer = pair.new_proposer(name=name, store=store)
    except SpecError as e:
        raise ApiError(400, f"'speculation.proposer' {name!r} cannot draft on this server: {e.message}",
                       param="speculation.proposer") from None
    if spec is not None and spec.p_min is not None:
        for part in (proposer, getattr(proposer, "draft_model", None)):
            if hasattr(part, "p_min"):
                part.p_min = spec.p_min
    if req.prediction and name != "none":
        proposer = _predicting(pair, proposer, req.prediction)
    return proposer, name


def _predicting(pair, proposer, prediction: str):
    """`proposer` drafting from the client's prediction too: its lookup's
    source, or a lookup beside a drafter that has none."""
    from ..run.proposers.hybrid import Hybrid
    from ..run.suffix import Lookup

    lookup = proposer if isinstance(proposer, Lookup) else getattr(proposer, "lookup", None)
    if lookup is None:
        lookup = Lookup()
        proposer = Hybrid(lookup, proposer)
    lookup.predict(pair.target.vocab.tokenize(prediction, add_special=False))
    return proposer
