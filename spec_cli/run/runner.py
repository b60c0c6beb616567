"""Load a target (and draft), build the proposer, turn text into tokens.

Every command goes through here, so model loading, pair checks and prompt
formatting happen one way; a `Session` (session.py) then runs one
generation on the pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import SpecError
from ..llama.config import LoadConfig
from .config import PairConfig
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


@dataclass
class Plan:
    """What loading a pair will do, decided before anything heavy loads:
    the files (downloaded as needed), how each model loads, whether the
    target's MTP layers draft, and whether the draft model is loaded now,
    after the target's first costs are known (`defer`), or not at all."""

    target_path: Path
    target_cfg: LoadConfig
    draft_arg: str | None        # as given, or the registry's suggestion
    draft_path: Path | None
    draft_cfg: LoadConfig
    use_mtp: bool
    notes: list[str]
    draft_pays: bool = True
    defer: bool = False
    # a registry draft not downloaded yet, fetched only once the target's
    # costs say it could pay here (`fetch_if_paying`): its estimated size
    fetch_bytes: int | None = None

    def leave_out_if_unpaying(self, cfg: PairConfig) -> None:
        """Where remembered costs say the draft model can never pay here,
        hybrid is the lookup alone (and with draft_if_it_pays the draft is
        not loaded, nor downloaded).  Left out only once it is known to fit
        (else it loads, and the pair check says why not); one not
        downloaded is the registry's, of the target's family."""
        from ..llama import probe
        from ..llama.gguf import token_digest

        unpaying = probe.draft_cannot_pay(self.target_path, self.target_cfg, self.draft_path, self.draft_cfg,
                                          together=min(cfg.together, self.target_cfg.n_seq),
                                          draft_bytes=self.fetch_bytes)
        fits = self.draft_path is None or token_digest(self.target_path) == token_digest(self.draft_path) is not None
        if unpaying and fits:
            self.draft_pays = False
            if cfg.draft_if_it_pays:
                if self.draft_path is None:
                    size = f" ({self.fetch_bytes / 1e6:,.0f} MB)" if self.fetch_bytes else ""
                    would = probe.draft_would_pay(self.target_path, self.target_cfg)
                    self.notes.append(
                        f"note: {self.draft_arg} is not downloaded{size}: {unpaying}. The lookup drafts alone"
                        + (f"; {would}" if would else "") + f". `spec-cli models pull {self.draft_arg}` fetches "
                        "it; --proposer draft fetches and runs it")
                else:
                    self.notes.append(f"note: {self.draft_arg} is not loaded: {unpaying}; the lookup drafts alone "
                                      "(--proposer draft runs it anyway)")
                self.draft_path, self.fetch_bytes = None, None

    def fetch_if_paying(self, cfg: PairConfig, registry, progress=None) -> None:
        """The draft deferred by `fetch_bytes`: left out where the target's
        costs say it cannot pay, else downloaded now."""
        from ..models.download import resolve

        if self.fetch_bytes is None:
            return
        self.leave_out_if_unpaying(cfg)
        if self.fetch_bytes is not None:
            self.fetch_bytes = None
            self.draft_path = resolve(self.draft_arg, registry=registry,
                                      progress=progress(self.draft_arg) if progress else None)


def plan_pair(cfg: PairConfig, *, progress=None) -> Plan:
    """Resolve names (downloading what is missing) and decide how to load."""
    from ..llama import cores, cpucheck, probe
    from ..llama.gguf import mtp_layers
    from ..models.download import resolve
    from ..models.registry import load_registry
    from .proposers import registry as proposers

    needs = proposers.spec(cfg.proposer).needs
    wants_draft, may_mtp = needs in (proposers.DRAFT, proposers.DRAFT_OR_MTP), needs in (proposers.MTP,
                                                                                         proposers.DRAFT_OR_MTP)
    registry = load_registry()
    draft_arg, no_draft = cfg.draft, None
    if wants_draft and draft_arg is None:
        try:
            draft_arg = _suggested_draft(cfg.target, registry)
        except SpecError as e:
            no_draft = e  # unless the target drafts for itself, or the default lookup drafts alone
            if cfg.proposer != "hybrid" and (not may_mtp or not _may_have_mtp(cfg.target, registry)):
                raise  # before anything is downloaded
    target_path = resolve(cfg.target, registry=registry, progress=progress(cfg.target) if progress else None)
    # the target's own multi-token-prediction layers draft where asked, and
    # by default where no draft model is given (no second file to fetch)
    n_mtp = mtp_layers(target_path) if may_mtp else 0
    if needs == proposers.MTP and not n_mtp:
        raise proposers.no_mtp(target_path.name)
    use_mtp = n_mtp > 0  # its layers are loaded (one block); bench may ask for "mtp" beside "hybrid"
    if use_mtp and cfg.draft is None:
        draft_arg = None  # the registry's draft is not needed
    elif no_draft is not None:
        if cfg.proposer != "hybrid":
            raise no_draft
        draft_arg = None  # the default serves what it was given: the lookup drafts alone (said below)
    draft_path = fetch_bytes = None
    if draft_arg is not None and wants_draft:
        fetch_bytes = _deferred_bytes(cfg, draft_arg, target_path, registry)
        if fetch_bytes is None:
            draft_path = resolve(draft_arg, registry=registry, progress=progress(draft_arg) if progress else None)
    verdict = cpucheck.verdict(min((p for p in (target_path, draft_path) if p is not None), key=_size))
    seqs = _seqs(cfg, [p for p in (target_path, draft_path) if p is not None])
    common = dict(n_ctx=cfg.ctx, n_threads=cfg.threads, deterministic=cfg.deterministic,
                  extra_bufts=verdict.bufts, n_seq=seqs)
    # the draft's numerics decide acceptance, never the output; the same
    # mode as the target's keeps a model drafting for itself always right
    plan = Plan(target_path, LoadConfig(gpu_layers=cfg.gpu_layers, mtp=use_mtp, rpc=cfg.rpc,
                                        tensor_split=cfg.tensor_split, **common), draft_arg, draft_path,
                LoadConfig(gpu_layers=cfg.draft_gpu_layers, **common), use_mtp,
                [n for n in (verdict.note, cores.note(cfg.threads)) if n], fetch_bytes=fetch_bytes)
    if seqs < cfg.seqs:
        plan.notes.append(f"note: the memory free now holds the KV caches of {seqs} sequences of {cfg.ctx} "
                          f"tokens, not {cfg.seqs}: fewer requests run at once (a smaller --ctx lets more)")
    if no_draft is not None and not use_mtp:
        plan.notes.append(f"note: no draft model for {target_path.name} (none given, none in the registry): the "
                          "lookup over the prompt and earlier outputs drafts alone (--draft NAME|PATH adds one)")
    if use_mtp and draft_arg is None:
        plan.notes.append(f"note: {target_path.name} drafts with its own multi-token-prediction layers "
                          f"({n_mtp} block{'s' if n_mtp > 1 else ''}; no draft model)")
    if (draft_path is not None or fetch_bytes is not None) and cfg.proposer == "hybrid":
        # nothing known of this target here yet (a first run): the draft waits for
        # the target's first costs, which may show it could never pay, so that a
        # first run on a CPU does not pay for downloading and loading it beside the target
        plan.defer = cfg.draft_if_it_pays and probe.recall(target_path, plan.target_cfg) is None
        if not plan.defer:
            plan.fetch_if_paying(cfg, registry, progress) if fetch_bytes is not None else \
                plan.leave_out_if_unpaying(cfg)
    return plan


def _deferred_bytes(cfg: PairConfig, draft_arg: str, target_path: Path, registry) -> int | None:
    """The estimated size of a draft whose download waits for the target's
    costs (Plan.fetch_if_paying), or None where it is fetched now: one the
    default proposer may leave out, named from the registry and not on disk
    yet.  Its size: the registry's mirror's, else the target's file scaled
    by the two entries' parameter counts."""
    from ..models.download import is_path, local_path, split_quant

    if cfg.proposer != "hybrid" or not cfg.draft_if_it_pays or is_path(draft_arg):
        return None
    try:
        name, quant = split_quant(draft_arg)
        entry = registry.lookup(name)
        if local_path(entry, quant) is not None:
            return None
        if entry.mirror is not None and quant is None:
            return entry.mirror.size
        target = None if is_path(cfg.target) else _entry(cfg.target, registry)
        ratio = _params(entry.params) / _params(target.params) if target is not None else None
        return int(target_path.stat().st_size * ratio) if ratio else None
    except (SpecError, OSError, ValueError, ZeroDivisionError):
        return None


def _params(text: str) -> float:
    """"1.5B" -> 1.5e9, "135M" -> 1.35e8 (a registry entry's `params`)."""
    text = text.strip().upper()
    scale = {"B": 1e9, "M": 1e6, "K": 1e3}.get(text[-1:], None)
    return float(text[:-1]) * scale if scale else float(text)


def _seqs(cfg: PairConfig, paths: list[Path]) -> int:
    """The sequences each context gets: `cfg.seqs`, or fewer where it asks
    that memory decide (PairConfig.fit_memory)."""
    if not cfg.fit_memory or cfg.seqs <= 1:
        return cfg.seqs
    from ..llama.memory import seqs_that_fit

    return seqs_that_fit(cfg.seqs, cfg.ctx, paths)


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
            if plan.fetch_bytes is not None:
                from ..models.registry import load_registry
                plan.fetch_if_paying(cfg, load_registry(), progress)
            else:
                plan.leave_out_if_unpaying(cfg)
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
