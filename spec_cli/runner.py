"""Load a target (and draft), build the proposer, turn text into tokens.

The glue between the CLI and the engine: every command goes through here,
so model loading, pair checks and prompt formatting happen one way.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .backend import LoadConfig, Model
from .errors import SpecError
from .proposers import DraftModel, Hybrid, NGram, NoDraft, Proposer
from .sampling import SamplingConfig

if TYPE_CHECKING:
    from .stats import Stats

PROPOSERS = ("hybrid", "draft", "ngram", "none")
NEEDS_DRAFT = ("hybrid", "draft")


@dataclass(frozen=True)
class PairConfig:
    target: str
    draft: str | None = None
    proposer: str = "hybrid"
    ctx: int = 4096
    threads: int = 0
    gpu_layers: int = 0
    draft_gpu_layers: int = 0
    p_min: float = 0.0
    deterministic: bool = False  # the target's numerics: see backend.LoadConfig
    rule: str = "gumbel"         # see engine.GenConfig


@dataclass
class Pair:
    target: Model
    draft: Model | None
    config: PairConfig
    draft_name: str | None = None  # as given, or the registry's suggestion

    def proposer(self, sampling: SamplingConfig, seed: int) -> Proposer:
        return self.proposer_named(self.config.proposer, sampling, seed)

    def proposer_named(self, name: str, sampling: SamplingConfig, seed: int, *,
                       rule: str | None = None) -> Proposer:
        if name not in PROPOSERS:
            raise SpecError(f"unknown proposer {name!r}", hint=f"Choose one of: {', '.join(PROPOSERS)}.")
        if name in NEEDS_DRAFT and self.draft is None:
            raise SpecError(f"proposer {name} needs a draft model", hint="Pass --draft NAME|PATH.")
        if name == "none":
            return NoDraft()
        if name == "ngram":
            return NGram()
        assert self.draft is not None
        draft = DraftModel(self.draft, sampling, np.random.default_rng([seed, 1]), p_min=self.config.p_min,
                           rule=rule or self.config.rule, seed=seed)
        return Hybrid(NGram(), draft) if name == "hybrid" else draft

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
    from .download import resolve
    from .registry import load_registry

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
    target = Model(target_path, LoadConfig(n_ctx=cfg.ctx, n_threads=cfg.threads,
                                           gpu_layers=cfg.gpu_layers, deterministic=cfg.deterministic))
    draft = None
    if draft_path is not None:
        try:
            # the draft's numerics decide acceptance, never the output; the same
            # mode as the target's keeps a model drafting for itself always right
            draft = Model(draft_path, LoadConfig(n_ctx=cfg.ctx, n_threads=cfg.threads,
                                                 gpu_layers=cfg.draft_gpu_layers,
                                                 deterministic=cfg.deterministic))
            why = target.vocab_difference(draft)
        except BaseException:
            target.close()
            raise
        if why is not None:
            target.close()
            draft.close()
            raise SpecError(
                f"{draft_arg} cannot draft for {cfg.target}: {why}",
                hint=_fitting_drafts_hint(cfg.target, registry))
    from . import probe

    try:
        probe.load(target)  # the cost model's prior, measured (or recalled) before the first request
        if draft is not None:
            probe.load(draft)  # the draft's cost per token
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    return Pair(target, draft, cfg, draft_arg if draft is not None else None)


def _suggested_draft(target: str, registry) -> str:
    from .download import is_path, split_quant

    if not is_path(target):
        entry = registry.lookup(split_quant(target)[0])
        if entry.draft:
            return entry.draft
    raise SpecError(f"no draft model given for {target}, and the registry suggests none",
                    hint="Pass --draft NAME|PATH, or use --proposer ngram (no draft model needed).")


def _fitting_drafts_hint(target: str, registry) -> str:
    from .download import is_path, split_quant

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


def new_seed() -> int:
    return secrets.randbits(31)


@dataclass
class Outcome:
    stats: "Stats"
    tokens: list[int]
    text: str
    finish: str | None
    segments: list | None = None  # (text, from draft) pairs, when a view kept them
    margins: list[float] = field(default_factory=list)  # with GenConfig.margins


def stream(pair: Pair, prompt: list[int], gen, *, proposer: Proposer,
           on_step: Callable | None = None, until: Callable[[str], bool] | None = None) -> Outcome:
    """Run the engine to the end, accumulating statistics; Ctrl-C ends the
    generation with finish "interrupted" and keeps what was written.
    `until(text so far)` returning True ends it with finish "stop"."""
    import time

    from .engine import generate
    from .stats import Stats

    stats, tokens, text, finish, margins = Stats(), [], [], None, []
    t0 = time.perf_counter()
    try:
        for step in generate(pair.target, proposer, prompt, gen):
            stats.add(n_tokens=len(step.tokens), drafted=step.drafted, accepted=step.accepted,
                      draft_s=step.draft_s, verify_s=step.verify_s)
            stats.prefill_s += step.prefill_s
            stats.prefill_tokens += step.prefill_tokens
            stats.wall_s = time.perf_counter() - t0
            if not stats.ttft_s and step.tokens:
                stats.ttft_s = stats.wall_s
            tokens.extend(step.tokens)
            margins.extend(step.margins)
            text.append(step.text)
            finish = step.finish_reason
            if on_step is not None:
                on_step(step, stats)
            if until is not None and finish is None and until("".join(text)):
                finish = "stop"
                break
    except KeyboardInterrupt:
        finish = "interrupted"
    stats.wall_s = time.perf_counter() - t0
    return Outcome(stats, tokens, "".join(text), finish, margins=margins)
