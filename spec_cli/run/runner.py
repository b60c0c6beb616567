"""Load a target (and draft), build the proposer, turn text into tokens.

Every command goes through here, so model loading, pair checks and prompt
formatting happen one way; a `Session` (session.py) then runs one
generation on the pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..errors import SpecError
from .config import PairConfig
from .plan import Plan, _fitting_drafts_hint, plan_pair
from .proposers.base import Proposer

if TYPE_CHECKING:
    from ..llama.model import Model


@dataclass
class Pair:
    target: Model
    draft: Model | None
    config: PairConfig
    draft_name: str | None = None  # as given, or the registry's suggestion
    notes: list[str] = field(default_factory=list)  # one line each, for stderr (how the models loaded)
    # False where remembered costs say the draft model can never pay here:
    # hybrid is then the lookup alone (load_pair leaves the draft out unless bench needs it)
    draft_pays: bool = True
    # the target's own multi-token-prediction layers are loaded: "mtp" drafts
    # with them, and "hybrid" where no draft model was given
    mtp: bool = False

    def new_proposer(self, *, name: str | None = None, store=None, clock=None) -> Proposer:
        """A fresh proposer object: the configured one, or `name`.  With a
        `store` (suffix.Store) the lookup drafts from earlier outputs too;
        with a simulated `clock` (clock.py) a draft model is priced by it.
        Sampling, seed and rule reach it with each generation (`prepare`)."""
        from .proposers.registry import spec

        return spec(name or self.config.proposer).build(self, store=store, clock=clock)

    @property
    def drafter(self) -> str | None:
        """What drafts beside the lookup, for the user: the draft model's
        name, or the target's own MTP layers."""
        if self.mtp and (self.draft is None or self.config.proposer == "mtp"):
            return "its own multi-token-prediction layers"
        return self.draft_name

    def remember(self) -> None:
        """Keep what the steps taught about both models' costs for the next run."""
        from ..llama import probe

        probe.remember(self.target)
        if self.draft is not None:
            probe.remember(self.draft)

    def rethread(self, n: int, busy: float) -> None:
        """Both models run `n` threads from now on (cores.Recount: the cores
        other programs leave free changed).  What the old count taught is
        kept under its key, and the costs are the new count's: remembered
        from an earlier run at it, else timed now (probe.load)."""
        from ..llama import cores, probe

        self.remember()
        cores.rechoose(n, busy)
        for m in (self.target, self.draft):
            if m is not None:
                m.set_threads(n)
                m.curve = m.costs = None
        probe.load(self.target)
        if self.draft is not None:
            probe.load(self.draft, like=self.target)

    def use(self, seq: int) -> None:
        """Both models decode in sequence `seq` from now on (llama.Model.use)."""
        self.target.use(seq)
        if self.draft is not None:
            self.draft.use(seq)

    def _copyable(self) -> list[Model] | None:
        """Both models (the draft where there is one), or None where either
        cannot copy a sequence's cache to another (llama.Model.copyable)."""
        models = [m for m in (self.target, self.draft) if m is not None]
        return models if all(m.copyable for m in models) else None

    def copy_seq(self, src: int, dst: int) -> bool:
        """Both models' sequence `dst` a copy of `src` (llama.Model.copy_seq);
        False, nothing done, where either model cannot."""
        models = self._copyable()
        return src != dst and models is not None and all([m.copy_seq(src, dst) for m in models])

    def swap_seq(self, a: int, b: int, spare: int) -> bool:
        """Both models' sequences `a` and `b` exchange their caches, through
        `spare` (llama.Model.swap_seq); False, nothing done, where either
        model cannot."""
        models = self._copyable()
        return len({a, b, spare}) == 3 and models is not None and all([m.swap_seq(a, b, spare) for m in models])

    def reset(self) -> None:
        """Empty both KV caches (of the sequence in use)."""
        self.target.reset()
        if self.draft is not None:
            self.draft.reset()

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()


def load_pair(cfg: PairConfig, *, progress: Callable[[str], Callable[[int, int], None]] | None = None) -> Pair:
    """Plan (resolve, download, decide), load, check the pair."""
    from ..llama import probe
    from ..llama.lib import DecodeTimer

    plan = plan_pair(cfg, progress=progress)
    if cfg.rpc:  # checked and registered before either model loads: the draft then stays here
        from ..llama import rpc
        rpc.add_servers(cfg.rpc)
    timer = DecodeTimer()  # both models' decode time, for the host's share of a step
    target, draft, why = _load_both(plan, timer, with_draft=not plan.defer)

    def refuse_unfitting() -> None:
        if why:
            from ..models.registry import load_registry
            raise SpecError(f"{plan.draft_arg} cannot draft for {cfg.target}: {why}",
                            hint=_fitting_drafts_hint(cfg.target, load_registry()))

    try:
        refuse_unfitting()
        probe.load(target)  # the cost model's prior: what earlier runs learned (timed briefly the first time)
        if plan.defer:
            plan.decide_draft(cfg, progress)
            if plan.draft_path is not None:
                draft, same_tokens = _load_draft(plan, timer)
                why = target.vocab.difference(draft.vocab, texts=not same_tokens)
                refuse_unfitting()
        if draft is not None:
            probe.load(draft, like=target)  # the draft's cost per token
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    if cfg.rpc:
        plan.notes.append(f"note: {target.path.name}'s layers on {', '.join(target.devices)} "
                          f"(RPC: {', '.join(cfg.rpc)})" + (f"; {draft.path.name} here" if draft is not None else ""))
    return Pair(target, draft, cfg, plan.draft_arg if draft is not None else None, plan.notes, plan.draft_pays,
                mtp=plan.use_mtp)


def _load_draft(plan: Plan, timer) -> tuple[Model, bool]:
    """The draft model, and whether its token array is byte for byte the target's."""
    from ..llama.gguf import token_digest
    from ..llama.model import Model

    draft = Model(plan.draft_path, plan.draft_cfg, timer=timer)
    return draft, token_digest(plan.target_path) == token_digest(plan.draft_path) is not None


def _load_both(plan: Plan, timer, *, with_draft: bool) -> tuple[Model, Model | None, str | None]:
    """Load the target here and the draft in a thread beside it (llama.cpp
    releases the GIL while it loads), so the draft costs no wait of its
    own; the thread also compares the two files' token arrays.  Returns the
    models and why the draft cannot draft for the target (None: it can)."""
    import threading

    from ..llama.model import Model

    if not (with_draft and plan.draft_path is not None):
        return Model(plan.target_path, plan.target_cfg, timer=timer), None, None
    box: dict = {}

    def load_draft():
        try:
            box["draft"], box["same_tokens"] = _load_draft(plan, timer)
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    thread = threading.Thread(target=load_draft, name="spec-cli-draft-load", daemon=True)
    thread.start()
    try:
        target = Model(plan.target_path, plan.target_cfg, timer=timer)
    except BaseException:
        thread.join()
        if "draft" in box:
            box["draft"].close()
        raise
    thread.join()
    if "error" in box:
        target.close()
        raise box["error"]
    draft = box["draft"]
    # byte-identical token arrays: only the cheap checks are left to llama.cpp
    return target, draft, target.vocab.difference(draft.vocab, texts=not box["same_tokens"])


def prompt_tokens(target: Model, text: str, *, raw: bool, system: str | None = None) -> list[int]:
    """Raw text (BOS added as the model wants; special tokens' texts read as
    the model's, as llama-cli reads them), or a user turn in the GGUF's own
    chat template (the text a message's, never a special token)."""
    if raw:
        tokens = target.vocab.tokenize(text, add_special=True, parse_special=True)
        if not tokens:
            raise SpecError("the prompt is empty")
        return tokens
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}]
    return target.vocab.tokenize_chat(messages)
