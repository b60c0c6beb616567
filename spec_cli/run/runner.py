"""Load a target (and draft), build the proposer, turn text into tokens.

Every command goes through here, so model loading, pair checks and prompt
formatting happen one way; a `Session` (session.py) then runs one
generation on the pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..llama.backend import LoadConfig, Model
from ..errors import SpecError
from .proposers import DraftModel, Hybrid, MTPDraft, NoDraft, Proposer
from .suffix import Lookup
from .config import PairConfig

PROPOSERS = ("hybrid", "draft", "mtp", "ngram", "none")
NEEDS_DRAFT = ("hybrid", "draft")


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
        name = name or self.config.proposer
        if name not in PROPOSERS:
            raise SpecError(f"unknown proposer {name!r}", hint=f"Choose one of: {', '.join(PROPOSERS)}.")
        if name == "draft" and self.draft is None:
            raise SpecError(f"proposer {name} needs a draft model", hint="Pass --draft NAME|PATH.")
        if name == "mtp" and not self.mtp:
            raise _no_mtp(self.target.path.name, in_file=self.target.mtp_layers > 0)
        if name == "none":
            return NoDraft()
        if self.mtp and (name == "mtp" or (name == "hybrid" and self.draft is None)):
            mtp = MTPDraft(self.target, p_min=self.config.p_min)
            mtp.clock = clock
            return mtp if name == "mtp" else Hybrid(Lookup(store=store), mtp)
        # this machine's costs may say the draft can never pay; a simulated clock prices it instead
        if name == "ngram" or self.draft is None or (name == "hybrid" and not self.draft_pays and clock is None):
            return Lookup(store=store)  # hybrid without a draft model that could pay
        assert self.draft is not None
        draft = DraftModel(self.draft, p_min=self.config.p_min)
        draft.clock = clock
        return Hybrid(Lookup(store=store), draft) if name == "hybrid" else draft

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

    def use(self, seq: int) -> None:
        """Both models decode in sequence `seq` from now on (backend.Model.use)."""
        self.target.use(seq)
        if self.draft is not None:
            self.draft.use(seq)

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
    """Resolve names (downloading what is missing), load, check the pair."""
    from ..models.download import resolve
    from ..models.registry import load_registry

    if cfg.proposer not in PROPOSERS:
        raise SpecError(f"unknown proposer {cfg.proposer!r}",
                        hint=f"Choose one of: {', '.join(PROPOSERS)}.")
    from ..llama.gguf import mtp_layers, token_digest

    registry = load_registry()
    draft_arg, no_draft = cfg.draft, None
    if cfg.proposer in NEEDS_DRAFT and draft_arg is None:
        try:
            draft_arg = _suggested_draft(cfg.target, registry)
        except SpecError as e:
            no_draft = e  # unless the target drafts for itself
            if cfg.proposer == "draft" or not _may_have_mtp(cfg.target, registry):
                raise  # before anything is downloaded
    target_path = resolve(cfg.target, registry=registry,
                          progress=progress(cfg.target) if progress else None)
    # the target's own multi-token-prediction layers draft where asked, and
    # by default where no draft model is given (no second file to fetch)
    n_mtp = mtp_layers(target_path) if cfg.proposer in ("mtp", "hybrid") else 0
    if cfg.proposer == "mtp" and not n_mtp:
        raise _no_mtp(target_path.name)
    use_mtp = n_mtp > 0  # its layers are loaded (one block); bench may ask for "mtp" beside "hybrid"
    if use_mtp and cfg.draft is None:
        draft_arg = None  # the registry's draft is not needed
    elif no_draft is not None:
        raise no_draft
    draft_path = None
    if draft_arg is not None and cfg.proposer in NEEDS_DRAFT:
        draft_path = resolve(draft_arg, registry=registry,
                             progress=progress(draft_arg) if progress else None)
    from ..llama import cores, cpucheck, probe

    verdict = cpucheck.verdict(min((p for p in (target_path, draft_path) if p is not None), key=_size))
    target_cfg = LoadConfig(n_ctx=cfg.ctx, n_threads=cfg.threads, gpu_layers=cfg.gpu_layers,
                            deterministic=cfg.deterministic, extra_bufts=verdict.bufts, n_seq=cfg.seqs,
                            mtp=use_mtp)
    # the draft's numerics decide acceptance, never the output; the same
    # mode as the target's keeps a model drafting for itself always right
    draft_cfg = LoadConfig(n_ctx=cfg.ctx, n_threads=cfg.threads, gpu_layers=cfg.draft_gpu_layers,
                           deterministic=cfg.deterministic, extra_bufts=verdict.bufts, n_seq=cfg.seqs)
    notes = [n for n in (verdict.note, cores.note(cfg.threads)) if n]
    if use_mtp and draft_arg is None:
        notes.append(f"note: {target_path.name} drafts with its own multi-token-prediction layers "
                     f"({n_mtp} block{'s' if n_mtp > 1 else ''}; no draft model)")
    draft_pays, defer = True, False

    def leave_out_if_unpaying() -> None:
        nonlocal draft_pays, draft_path
        unpaying = probe.draft_cannot_pay(target_path, target_cfg, draft_path, draft_cfg)
        # left out only once it is known to fit (else it loads, and the pair check says why not)
        if unpaying and token_digest(target_path) == token_digest(draft_path) is not None:
            draft_pays = False
            if cfg.draft_if_it_pays:
                notes.append(f"note: {draft_arg} is not loaded: {unpaying}; the lookup drafts alone "
                             "(--proposer draft runs it anyway)")
                draft_path = None

    if draft_path is not None and cfg.proposer == "hybrid":
        # nothing known of this target here yet (a first run): the draft waits for
        # the target's first costs, which may show it could never pay, so that a
        # first run on a CPU does not pay for loading it beside the target
        defer = cfg.draft_if_it_pays and probe.recall(target_path, target_cfg) is None
        if not defer:
            leave_out_if_unpaying()
    target, draft, why = _load_both((target_path, target_cfg), None if defer else draft_path and (draft_path, draft_cfg))

    def refuse_unfitting() -> None:
        if why:
            raise SpecError(f"{draft_arg} cannot draft for {cfg.target}: {why}",
                            hint=_fitting_drafts_hint(cfg.target, registry))

    try:
        refuse_unfitting()
        probe.load(target)  # the cost model's prior: what earlier runs learned (timed briefly the first time)
        if defer:
            leave_out_if_unpaying()
            if draft_path is not None:
                draft, same_tokens = _load_draft(target_path, (draft_path, draft_cfg))
                why = target.vocab_difference(draft, texts=not same_tokens)
                refuse_unfitting()
        if draft is not None:
            probe.load(draft, like=target)  # the draft's cost per token
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    return Pair(target, draft, cfg, draft_arg if draft is not None else None, notes, draft_pays,
                mtp=use_mtp)


def _load_draft(target_path: Path, draft_args) -> tuple[Model, bool]:
    """The draft model, and whether its token array is byte for byte the target's."""
    from ..llama.gguf import token_digest

    draft = Model(*draft_args)
    return draft, token_digest(target_path) == token_digest(draft_args[0]) is not None


def _load_both(target_args, draft_args) -> tuple[Model, Model | None, str | None]:
    """Load the target here and the draft in a thread beside it (llama.cpp
    releases the GIL while it loads), so the draft costs no wait of its
    own; the thread also compares the two files' token arrays.  Returns the
    models and why the draft cannot draft for the target (None: it can)."""
    import threading

    if not draft_args:
        return Model(*target_args), None, None
    box: dict = {}

    def load_draft():
        try:
            box["draft"], box["same_tokens"] = _load_draft(target_args[0], draft_args)
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    thread = threading.Thread(target=load_draft, name="spec-cli-draft-load", daemon=True)
    thread.start()
    try:
        target = Model(*target_args)
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
    return target, draft, target.vocab_difference(draft, texts=not box["same_tokens"])


def _entry(target: str, registry):
    """The registry entry a model argument names, None for a path (an
    unknown name raises)."""
    from ..models.download import is_path, split_quant

    return None if is_path(target) else registry.lookup(split_quant(target)[0])


def _may_have_mtp(target: str, registry) -> bool:
    """Whether the target may draft for itself: a file (read once found) or
    a registry entry marked `mtp`."""
    try:
        entry = _entry(target, registry)
    except SpecError:
        return False
    return entry is None or entry.mtp


def _no_mtp(name: str, *, in_file: bool = False) -> SpecError:
    """--proposer mtp on a file without such layers (or one loaded without them)."""
    if in_file:
        return SpecError(f"{name}'s multi-token-prediction layers were not loaded",
                         hint="Load the pair with --proposer mtp.")
    return SpecError(f"{name} has no multi-token-prediction (NextN) layers for --proposer mtp",
                     hint="Use a model whose GGUF keeps them (Qwen3.5/3.6, GLM-4.5, DeepSeek-V3; "
                          "`spec-cli models info` shows mtp_layers), or another --proposer.")


def _size(path) -> float:
    try:
        return path.stat().st_size
    except OSError:
        return float("inf")


def _suggested_draft(target: str, registry) -> str:
    entry = _entry(target, registry)
    if entry is not None and entry.draft:
        return entry.draft
    raise SpecError(f"no draft model given for {target}, and the registry suggests none",
                    hint="Pass --draft NAME|PATH, or use --proposer ngram (no draft model needed).")


def _fitting_drafts_hint(target: str, registry) -> str:
    try:
        entry = _entry(target, registry)
    except SpecError:
        entry = None
    if entry is not None:
        same = [e.name for e in registry.entries.values()
                if e.family == entry.family and e.name != entry.name]
        if entry.draft:
            return f"The registry's draft for {entry.name} is {entry.draft}."
        if same:
            return f"Models of the same family: {', '.join(same)}."
    return "A draft must share the target's tokenizer: use a smaller model of the same family."


def prompt_tokens(target: Model, text: str, *, raw: bool, system: str | None = None) -> list[int]:
    """Raw text (BOS added as the model wants), or a user turn in the GGUF's
    own chat template."""
    if raw:
        tokens = target.tokenize(text, add_special=True, parse_special=False)
        if not tokens:
            raise SpecError("the prompt is empty")
        return tokens
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}]
    return target.tokenize_chat(messages)
