"""`spec-cli complete`: editor completion -- the text before the cursor on
stdin, the rest from --suffix-file; prints only the middle."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import SpecError
from ..run.config import PairConfig
from .common import (load, sampling, seed_or_new, DEFAULT_TARGET, Ctx, Deterministic, Display, Draft, DraftGpuLayers, DraftMax, Fixed,
                     GpuLayers, MinP, ProposerName, Quiet, Rule, Seed, Target, Temp,
                     Threads, TopK, TopP, read_file, run_session, stdout_write)


def complete(
    suffix_file: Annotated[Optional[Path], typer.Option("--suffix-file", help="The text after the cursor, "
                                                                              "from a file.")] = None,
    suffix: Annotated[Optional[str], typer.Option("--suffix", help="The text after the cursor.")] = None,
    target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: ProposerName = "hybrid",
    temp: Temp = 0.0, top_k: TopK = 0, top_p: TopP = 1.0, min_p: MinP = 0.0, seed: Seed = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Most tokens to generate.")] = 128,
    max_lines: Annotated[int, typer.Option("--max-lines", min=0,
                                           help="Stop after this many lines (0 = no limit).")] = 0,
    draft_max: DraftMax = 16, fixed_draft: Fixed = False,
    ctx: Ctx = 4096, threads: Threads = 0, gpu_layers: GpuLayers = 0, draft_gpu_layers: DraftGpuLayers = 0,
    deterministic: Deterministic = False, rule: Rule = "gumbel", quiet: Quiet = False,
    as_json: Annotated[bool, typer.Option("--json", help='Print {"completion": ..., "stats": ...}.')] = False,
) -> None:
    """Editor completion: the text before the cursor on stdin, the rest with
    --suffix-file; prints only the middle (fill-in-the-middle when the model
    has FIM tokens, else a plain continuation)."""
    from ..run.engine import GenConfig
    from ..run.session import Session
    from ..term import render

    if sys.stdin is None or sys.stdin.isatty():
        raise SpecError("complete reads the text before the cursor on stdin",
                        hint="e.g. `head -c $OFFSET file.py | spec-cli complete --suffix-file rest.py`")
    prefix = sys.stdin.read()
    if suffix_file is not None and suffix is not None:
        raise SpecError("give --suffix or --suffix-file, not both")
    after = read_file(suffix_file, what="suffix file", allow_empty=True) if suffix_file is not None else (suffix or "")
    if not prefix and not after:
        raise SpecError("nothing to complete: the prefix on stdin and the suffix are both empty")
    gen = GenConfig(sampling=sampling(temp, top_k, top_p, min_p), max_tokens=max_tokens, draft_max=draft_max,
                    adaptive=not fixed_draft, seed=seed_or_new(seed), rule=rule)
    pair = load(PairConfig(target, draft, proposer, ctx, threads, gpu_layers, draft_gpu_layers,
                           deterministic=deterministic, rule=rule), quiet=quiet or as_json)
    try:
        tokens = fim_prompt(pair.target, prefix, after, quiet=quiet, name=target)
        until = (lambda text: text.count("\n") >= max_lines) if max_lines else None
        out = run_session(Session(pair, tokens, gen, pair.new_proposer(gen.sampling, gen.seed), until=until),
                          Display.decide(quiet=True), label=proposer)
        completion = out.text
        if max_lines:
            completion = "\n".join(completion.split("\n")[:max_lines])
        if as_json:
            print(json.dumps({"completion": completion, "finish_reason": out.finish,
                              "stats": out.stats.as_dict()}, ensure_ascii=False))
        else:
            stdout_write(completion)
            if not quiet:
                render.note(render.summary_line(out.stats, proposer, out.finish))
        if out.finish == "interrupted":
            raise typer.Exit(130)
    finally:
        pair.close()


def fim_prompt(m, prefix: str, after: str, *, quiet: bool, name: str) -> list[int]:
    """Fill-in-the-middle tokens where the GGUF has them, else the prefix."""
    from ..term import render

    fim = m.special_tokens()
    if min(fim["fim_pre"], fim["fim_suf"], fim["fim_mid"]) >= 0:
        tokens = ([fim["fim_pre"]] + m.tokenize(prefix, add_special=False)
                  + [fim["fim_suf"]] + m.tokenize(after, add_special=False) + [fim["fim_mid"]])
        if m.add_bos and m.bos >= 0:
            tokens.insert(0, m.bos)
        return tokens
    if not quiet:
        render.note(f"{name} has no fill-in-the-middle tokens: continuing the prefix, the suffix is not used")
    return m.tokenize(prefix or "\n")
