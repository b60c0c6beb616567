"""Load a target (and draft), build the proposer, turn text into tokens.

Every command goes through here, so model loading, pair checks and prompt
formatting happen one way; a `Session` (session.py) then runs one
generation on the pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..llama.backend import LoadConfig, Model
from ..errors import SpecError
from .proposers import DraftModel, Hybrid, NoDraft, Proposer
from .suffix import Lookup
from ..core.sampling import SamplingConfig
from .config import PairConfig

PROPOSERS = ("hybrid", "draft", "ngram", "none")
NEEDS_DRAFT = ("hybrid", "draft")


@dataclass
class Pair:
    target: Model
    draft: Model | None
    config: PairConfig
    draft_name: str | None = None  # as given, or the registry's suggestion
    notes: list[str] = field(default_factory=list)  # one line each, for stderr (how the models loaded)

    def new_proposer(self, sampling: SamplingConfig, seed: int, *, name: str | None = None,
                     rule: str | None = None, store=None, clock=None) -> Proposer:
        """A fresh proposer object: the configured one, or `name`.  With a
        `store` (suffix.Store) the lookup drafts from earlier outputs too;
        with a simulated `clock` (clock.py) a draft model is priced by it."""
        name = name or self.config.proposer
        if name not in PROPOSERS:
            raise SpecError(f"unknown proposer {name!r}", hint=f"Choose one of: {', '.join(PROPOSERS)}.")
        if name in NEEDS_DRAFT and self.draft is None:
            raise SpecError(f"proposer {name} needs a draft model", hint="Pass --draft NAME|PATH.")
        if name == "none":
            return NoDraft()
        if name == "ngram":
            return Lookup(store=store)
        assert self.draft is not None
        draft = DraftModel(self.draft, sampling, np.random.default_rng([seed, 1]), p_min=self.config.p_min,
                           rule=rule or self.config.rule, seed=seed)
        draft.clock = clock
        return Hybrid(Lookup(store=store), draft) if name == "hybrid" else draft

    def remember(self) -> None:
        """Keep what the steps taught about both models' costs for the next run."""
        from ..llama import probe

        probe.remember(self.target)
        if self.draft is not None:
            probe.remember(self.draft)

    def reset(self) -> None:
        """Empty both KV caches."""
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
    registry = load_registry()
    draft_arg = cfg.draft
    if cfg.proposer in NEEDS_DRAFT and draft_arg is None:
        draft_arg = _suggested_draft(cfg.target, registry)
    target_path = resolve(cfg.target, registry=registry,
                          progress=progress(cfg.target) if progress else None)
    draft_path = None
    if cfg.proposer in NEEDS_DRAFT:
        draft_path = resolve(draft_arg, registry=registry,
                             progress=progress(draft_arg) if progress else None)
    from ..llama import cpucheck, probe

    verdict = cpucheck.verdict(min((p for p in (target_path, draft_path) if p is not None), key=_size))
    # the draft's numerics decide acceptance, never the output; the same
    # mode as the target's keeps a model drafting for itself always right
    target, draft, why = _load_both(
        (target_path, LoadConfig(n_ctx=cfg.ctx, n_threads=cfg.threads, gpu_layers=cfg.gpu_layers,
                                 deterministic=cfg.deterministic, extra_bufts=verdict.extra_bufts)),
        draft_path and (draft_path, LoadConfig(n_ctx=cfg.ctx, n_threads=cfg.threads,
                                               gpu_layers=cfg.draft_gpu_layers, deterministic=cfg.deterministic,
                                               extra_bufts=verdict.extra_bufts)))
    try:
        if why:
            raise SpecError(f"{draft_arg} cannot draft for {cfg.target}: {why}",
                            hint=_fitting_drafts_hint(cfg.target, registry))
        probe.load(target)  # the cost model's prior: what earlier runs learned (timed briefly the first time)
        if draft is not None:
            probe.load(draft, draft=True)  # the draft's cost per token
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    pair = Pair(target, draft, cfg, draft_arg if draft is not None else None)
    if verdict.note:
        pair.notes.append(verdict.note)
    return pair


def _load_both(target_args, draft_args) -> tuple[Model, Model | None, str | None]:
    """Load the target here and, in a thread beside it, the draft and the
    pair check against the target's vocabulary (llama.cpp releases the GIL
    while it loads): the draft costs no wait of its own.  Returns the
    models and why the draft cannot draft for the target (None: it can)."""
    import threading

    if not draft_args:
        return Model(*target_args), None, None
    box: dict = {}

    def load_draft():
        try:
            box["draft"] = Model(*draft_args)
            box["why"] = _vocab_difference(target_args[0], box["draft"])
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
        if "draft" in box:
            box["draft"].close()
        raise box["error"]
    return target, box["draft"], box["why"]


def _size(path) -> float:
    try:
        return path.stat().st_size
    except OSError:
        return float("inf")


def _vocab_difference(target_path, draft: Model) -> str | None:
    """Why `draft` cannot draft for the target file, remembered per pair of
    files once they match (the check reads every token)."""
    import json

    from ..files import atomic_write, state_dir
    from ..llama.backend import Vocab, vocab_difference

    path = state_dir() / "pairs.json"
    st = Path(target_path).stat()
    key = f"{Path(target_path).resolve()}|{st.st_size}|{int(st.st_mtime)}||{draft.fingerprint()}"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if known.get(key) == "same":
        return None
    with Vocab(target_path) as target:
        why = vocab_difference(target._vocab, draft._vocab)
    if why is None:
        known[key] = "same"
        try:
            atomic_write(path, json.dumps(known, indent=1))
        except OSError:
            pass
    return why


def _suggested_draft(target: str, registry) -> str:
    from ..models.download import is_path, split_quant

    if not is_path(target):
        entry = registry.lookup(split_quant(target)[0])
        if entry.draft:
            return entry.draft
    raise SpecError(f"no draft model given for {target}, and the registry suggests none",
                    hint="Pass --draft NAME|PATH, or use --proposer ngram (no draft model needed).")


def _fitting_drafts_hint(target: str, registry) -> str:
    from ..models.download import is_path, split_quant

    if not is_path(target):
        try:
            entry = registry.lookup(split_quant(target)[0])
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
    return target.tokenize_chat(target.apply_chat_template(messages))
