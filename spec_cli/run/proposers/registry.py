"""Every proposer a user can name, in one table: what it needs loaded, what
the CLI says of it, and how it is built on a loaded pair.  The CLI's
choices, bench, serve and the pair's loader read this table; a new
proposer is its module in this package plus one row here.

Each proposer's acceptance prior for the cost model is its own
(`acceptance_prior`: draft.PRIOR for a draft model, the lookup's by match
in suffix/priors.py); its cost prior is `cost_prior`.  Bench's references
(the oracle, the timed lookup) are bench's own (run/bench/references.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...errors import SpecError

# what a proposer needs loaded beside the target
NOTHING, DRAFT, MTP, DRAFT_OR_MTP = "nothing", "a draft model", "MTP layers", "a draft model or MTP layers"


@dataclass(frozen=True)
class Spec:
    name: str
    needs: str
    help: str
    build: Callable  # build(pair, *, store, clock) -> a Proposer


def _none(pair, *, store, clock):
    from .base import NoDraft
    return NoDraft()


def _ngram(pair, *, store, clock):
    from ..suffix import Lookup
    return Lookup(store=store)


def _draft(pair, *, store, clock):
    from .draft import DraftModel
    if pair.draft is None:
        raise SpecError("proposer draft needs a draft model", hint="Pass --draft NAME|PATH.")
    drafter = DraftModel(pair.draft, p_min=pair.config.p_min)
    drafter.clock = clock  # a simulated clock prices it
    return drafter


def _mtp(pair, *, store, clock):
    from .mtp import mtp_drafter
    if not pair.mtp:
        raise no_mtp(pair.target.path.name, in_file=pair.target.mtp_layers > 0)
    drafter = mtp_drafter(pair.target, p_min=pair.config.p_min)
    drafter.clock = clock
    return drafter


def _hybrid(pair, *, store, clock):
    """The lookup beside the target's MTP layers (no draft model given), or
    beside the draft model, or alone where remembered costs say the draft
    model can never pay here (another machine's simulated clock prices it
    instead; this one's, `measured`, says what the costs here said)."""
    from .hybrid import Hybrid
    if pair.mtp and pair.draft is None:
        return Hybrid(_ngram(pair, store=store, clock=clock), _mtp(pair, store=store, clock=clock))
    if pair.draft is None or (not pair.draft_pays and (clock is None or clock.here)):
        return _ngram(pair, store=store, clock=clock)
    return Hybrid(_ngram(pair, store=store, clock=clock), _draft(pair, store=store, clock=clock))


def no_mtp(name: str, *, in_file: bool = False) -> SpecError:
    """--proposer mtp on a file without such layers (or one loaded without them)."""
    if in_file:
        return SpecError(f"{name}'s multi-token-prediction layers were not loaded",
                         hint="Load the pair with --proposer mtp.")
    return SpecError(f"{name} has no multi-token-prediction (NextN) layers for --proposer mtp",
                     hint="Use a model whose GGUF keeps them (Qwen3.5/3.6, GLM-4.5, DeepSeek-V3; "
                          "`spec-cli models info` shows mtp_layers), or another --proposer.")


PROPOSERS: dict[str, Spec] = {s.name: s for s in (
    Spec("hybrid", DRAFT_OR_MTP, "n-gram lookup, else the draft model, or the target's own MTP layers where "
                                 "its GGUF has them and no --draft is given", _hybrid),
    Spec("draft", DRAFT, "the draft model alone", _draft),
    Spec("mtp", MTP, "the target's own multi-token-prediction layers", _mtp),
    Spec("ngram", NOTHING, "the n-gram lookup over the prompt, the output and earlier outputs", _ngram),
    Spec("none", NOTHING, "the target alone", _none),
)}
NAMES = tuple(PROPOSERS)


def spec(name: str) -> Spec:
    """The row for `name`; an unknown name is one clear error."""
    try:
        return PROPOSERS[name]
    except KeyError:
        raise SpecError(f"unknown proposer {name!r}", hint=f"Choose one of: {', '.join(NAMES)}.") from None


def cli_help() -> str:
    return " | ".join(f"{s.name} ({s.help})" for s in PROPOSERS.values())
