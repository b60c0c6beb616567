"""What a request starts with, before its first round: its prompt's
tokens, the token ids it names checked against the vocabulary, its proposer (the server's, or the
one its `speculation` names, with its `p_min` and `prediction`), and an
echoed prompt's logprobs.  Run in the worker's thread (they may decode)."""

from __future__ import annotations

from ..errors import SpecError
from .api import ApiError, Request
from .replies import Reply

ECHO_CHUNK = 64  # prompt rows read at once for an echoed prompt's logprobs (echo)


def prompt_of(target, req: Request, budget: int) -> tuple[list[int], bool, str]:
    """The request's prompt as tokens, whether it was cut to `budget` (an
    editor's context), and the field it came from."""
    from ..run.editor import fim_prompt

    if req.kind == "chat":
        use = req.tools
        tools = [t.as_openai() for t in use.tools] if use is not None and use.choice != "none" else None
        return target.vocab.tokenize_chat(req.messages, tools), False, "messages"
    if req.kind == "completion":
        if req.prompt_ids is not None:
            return list(req.prompt_ids), False, "prompt"
        return target.vocab.tokenize(req.prompt, add_special=True, parse_special=False), False, "prompt"
    fim = fim_prompt(target.vocab, req.input_prefix, req.input_suffix, middle=req.prompt,
                     extra=req.input_extra, budget=budget)
    return fim.tokens, fim.truncated, "input_prefix"


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
