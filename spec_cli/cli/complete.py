"""`spec-cli complete`: editor completion -- the text before the cursor on
stdin, the rest from --suffix-file; prints only the middle.  It stops where
an editor wants it to (run/editor.py: the cursor line's indentation, the
suffix repeated, a time limit), and with --server (or SPEC_CLI_SERVER) asks
a running `spec-cli serve` instead of loading the models itself."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import SpecError
from ..run.config import PairConfig
from .common import FrequencyPenalty, MaxTokens, PresencePenalty, RepeatLastN, RepeatPenalty, penalties
from .common import (DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, load, sampling, seed_or_new, DEFAULT_TARGET, Ctx,
                     Deterministic, Display, Draft, DraftGpuLayers, DraftMax, DRAFT_MAX, Fixed, GpuLayers, MinP,
                     ProposerName, Quiet, Rule, Seed, Target, Temp, Threads, TopK, TopP, read_file, run_session,
                     stdout_write, placement, Rpc, TensorSplit)


SuffixFile = Annotated[Optional[Path], typer.Option("--suffix-file", help="The text after the cursor, from a file.")]
Suffix = Annotated[Optional[str], typer.Option("--suffix", help="The text after the cursor.")]
MaxLines = Annotated[int, typer.Option("--max-lines", min=0, help="Stop after this many lines (0 = no limit).")]
NIndent = Annotated[Optional[int], typer.Option(
    "--n-indent", min=0, help="Stop at the first new line indented less than this (default: the cursor "
                              "line's indentation; 0 = off).")]
TMaxPredict = Annotated[float, typer.Option(
    "--t-max-predict-ms", min=0, help="After this long, stop at the next line's end (0 = no limit).")]
Server = Annotated[Optional[str], typer.Option(
    "--server", envvar="SPEC_CLI_SERVER", show_envvar=True,
    help="Ask a running `spec-cli serve` at this URL (the model options are then the server's).")]
AsJson = Annotated[bool, typer.Option("--json", help='Print {"completion": ..., "stats": ...}.')]


def complete(
    suffix_file: SuffixFile = None, suffix: Suffix = None,
    target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: ProposerName = "hybrid",
    temp: Temp = 0.0, top_k: TopK = DEFAULT_TOP_K, top_p: TopP = DEFAULT_TOP_P, min_p: MinP = DEFAULT_MIN_P,
    seed: Seed = None, repeat_penalty: RepeatPenalty = 1.0, presence_penalty: PresencePenalty = 0.0,
    frequency_penalty: FrequencyPenalty = 0.0, repeat_last_n: RepeatLastN = 64,
    max_tokens: MaxTokens = 128, max_lines: MaxLines = 0, n_indent: NIndent = None, t_max_predict_ms: TMaxPredict = 0,
    server: Server = None, draft_max: DraftMax = DRAFT_MAX, fixed_draft: Fixed = False, ctx: Ctx = 4096,
    threads: Threads = 0,
    rpc: Rpc = None, tensor_split: TensorSplit = None, gpu_layers: GpuLayers = 0, draft_gpu_layers: DraftGpuLayers = 0,
    deterministic: Deterministic = False, rule: Rule = "gumbel", quiet: Quiet = False, as_json: AsJson = False,
) -> None:
    """Editor completion: the text before the cursor on stdin, the rest with
    --suffix-file; prints only the middle (fill-in-the-middle when the model
    has FIM tokens, else a plain continuation).

    \b
    Examples:
      head -c 1200 app.py | spec-cli complete --suffix-file rest.py
      head -c 1200 app.py | spec-cli complete --server http://127.0.0.1:8012
    """
    from ..run.editor import EditorStops, cursor_indent

    prefix, after = _read_input(suffix_file, suffix)
    indent = cursor_indent(prefix) if n_indent is None else n_indent
    adjust = penalties(repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n)
    if server:
        completion, finish, stats = _ask_server(server, prefix, after, max_tokens=max_tokens, n_indent=indent,
                                                t_max_predict_ms=t_max_predict_ms, temp=temp, top_k=top_k,
                                                top_p=top_p, min_p=min_p, seed=seed, adjust=adjust)
    else:
        completion, finish, stats = _complete_here(
            prefix, after, EditorStops(n_indent=indent, suffix=after, t_max_predict_ms=t_max_predict_ms, max_lines=max_lines,
                                       prefix=prefix),
            PairConfig(target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                       **placement(rpc, tensor_split),
                       gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, deterministic=deterministic), rule,
            sampling(temp, top_k, top_p, min_p), max_tokens=max_tokens, draft_max=draft_max,
            adaptive=not fixed_draft, seed=seed_or_new(seed), quiet=quiet or as_json, adjust=adjust)
    if max_lines:
        completion = "\n".join(completion.split("\n")[:max_lines])
    # an editor inserts the text before the suffix: no dangling new line or indentation
    completion = re.sub(r"\n[ \t\n]*$", "", completion)
    if as_json:
        print(json.dumps({"completion": completion, "finish_reason": finish, "stats": stats}, ensure_ascii=False))
    else:
        stdout_write(completion)
    if finish == "interrupted":
        raise typer.Exit(130)


def _read_input(suffix_file: Path | None, suffix: str | None) -> tuple[str, str]:
    """The text before the cursor (stdin) and after it."""
    if sys.stdin is None or sys.stdin.isatty():
        raise SpecError("complete reads the text before the cursor on stdin",
                        hint="e.g. `head -c $OFFSET file.py | spec-cli complete --suffix-file rest.py`")
    prefix = sys.stdin.read()
    if suffix_file is not None and suffix is not None:
        raise SpecError("give --suffix or --suffix-file, not both")
    after = read_file(suffix_file, what="suffix file", allow_empty=True) if suffix_file is not None else (suffix or "")
    if not prefix and not after:
        raise SpecError("nothing to complete: the prefix on stdin and the suffix are both empty")
    return prefix, after


def _complete_here(prefix: str, after: str, stops, cfg: PairConfig, rule: str, samp, *, max_tokens: int,
                   draft_max: int, adaptive: bool, seed: int, quiet: bool,
                   adjust=None) -> tuple[str, str | None, dict]:
    """Load the pair in this process and complete."""
    from ..run.editor import fim_prompt
    from ..run.engine import GenConfig
    from ..run.session import Session
    from ..term import render

    gen = GenConfig(adjust=adjust, sampling=samp, max_tokens=max_tokens, draft_max=draft_max, adaptive=adaptive,
                    seed=seed, rule=rule)
    pair = load(cfg, quiet=quiet, rule=rule)
    try:
        fim = fim_prompt(pair.target.vocab, prefix, after)
        if not fim.fim and not quiet:
            render.note(f"{cfg.target} has no fill-in-the-middle tokens: continuing the prefix, "
                        "the suffix is not used")
        out = run_session(Session(pair, fim.tokens, gen, pair.new_proposer(), stops=stops),
                          Display.decide(quiet=True), label=cfg.proposer)
        if not quiet:
            render.note(render.summary_line(out.stats, cfg.proposer, out.finish))
        return out.text, out.finish, out.stats.as_dict()
    finally:
        pair.close()


def _ask_server(url: str, prefix: str, after: str, *, max_tokens: int, n_indent: int, t_max_predict_ms: float,
                temp: float, top_k: int, top_p: float, min_p: float, seed: int | None,
                adjust=None) -> tuple[str, str | None, dict]:
    """POST /infill to a running `spec-cli serve`."""
    import urllib.error
    import urllib.request

    body = {"input_prefix": prefix, "input_suffix": after, "n_predict": max_tokens, "n_indent": n_indent,
            "t_max_predict_ms": t_max_predict_ms, "temperature": temp, "top_k": top_k, "top_p": top_p,
            "min_p": min_p, "seed": seed}
    if adjust is not None:
        body.update(repeat_penalty=adjust.repeat, presence_penalty=adjust.presence,
                    frequency_penalty=adjust.frequency, repeat_last_n=adjust.last_n)
    headers = {"Content-Type": "application/json"}
    if os.environ.get("SPEC_CLI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['SPEC_CLI_API_KEY']}"
    endpoint = url.rstrip("/") + "/infill"
    request = urllib.request.Request(endpoint, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            reply = json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read())["error"]["message"]
        except Exception:
            message = e.reason
        raise SpecError(f"the server at {url} answered {e.code}: {message}",
                        hint="Set SPEC_CLI_API_KEY to the server's --api-key." if e.code == 401 else None) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise SpecError(f"cannot reach spec-cli serve at {url}: {reason}",
                        hint="Start one with `spec-cli serve`, or leave out --server (and SPEC_CLI_SERVER).") from None
    except ValueError:
        raise SpecError(f"{endpoint} did not answer JSON: is that a spec-cli or llama.cpp server?") from None
    stats = dict(reply.get("speculation", {}), timings=reply.get("timings", {}))
    return reply.get("content", ""), reply.get("finish_reason"), stats
