"""What loading a pair will do, decided before anything heavy loads: the
names resolved (downloading what is missing, a draft only once it could
pay), how each model loads, whether the target drafts for itself, and
whether the draft model loads now, later or not at all (`Plan`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..llama.config import LoadConfig
from .config import PairConfig


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
    # costs say it could pay here (`decide_draft`): its estimated size
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

    def decide_draft(self, cfg: PairConfig, progress=None, registry=None) -> None:
        """Once the target's costs are known: the draft left out where they
        say it cannot pay (`leave_out_if_unpaying`), else, where its
        download waited for them (`fetch_bytes`), downloaded now."""
        from ..models.download import resolve

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
    seqs = _seqs(cfg, [p for p in (target_path, draft_path) if p is not None], fetch_bytes or 0)
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
            plan.decide_draft(cfg, progress, registry)
    return plan


def _deferred_bytes(cfg: PairConfig, draft_arg: str, target_path: Path, registry) -> int | None:
    """The estimated size of a draft whose download waits for the target's
    costs (Plan.decide_draft), or None where it is fetched now: one the
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
        target = _entry(cfg.target, registry)
        ratio = _params(entry.params) / _params(target.params) if target is not None else None
        return int(target_path.stat().st_size * ratio) if ratio else None
    except (SpecError, OSError, ValueError, ZeroDivisionError):
        return None


def _params(text: str) -> float:
    """"1.5B" -> 1.5e9, "135M" -> 1.35e8 (a registry entry's `params`)."""
    text = text.strip().upper()
    scale = {"B": 1e9, "M": 1e6, "K": 1e3}.get(text[-1:], None)
    return float(text[:-1]) * scale if scale else float(text)


def _seqs(cfg: PairConfig, paths: list[Path], later_bytes: int = 0) -> int:
    """The sequences each context gets: `cfg.seqs`, or fewer where it asks
    that memory decide (PairConfig.fit_memory), a draft whose download
    waits (`later_bytes`) counted as if it were here."""
    if not cfg.fit_memory or cfg.seqs <= 1:
        return cfg.seqs
    from ..llama.memory import seqs_that_fit

    return seqs_that_fit(cfg.seqs, cfg.ctx, paths, later_bytes=later_bytes)


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
