"""The `spec-cli` command.  Each command parses, calls one function, renders.

Heavy modules (llama_cpp, numpy, huggingface_hub) are imported inside the
commands so that `spec-cli --help` is instant.
"""

from __future__ import annotations

import json
import sys
import time
from typing import List, Optional

import typer

from .errors import SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact speculative decoding for local GGUF models on llama.cpp.")

DEFAULT_TARGET = "qwen2.5-coder-1.5b"


def _version(value: bool) -> None:
    if value:
        from . import __version__
        print(f"spec-cli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Exact speculative decoding for local GGUF models on llama.cpp."""


@app.command()
def generate(
    prompt: Optional[str] = typer.Argument(None, help="The prompt; read from stdin when left out."),
    target: str = typer.Option(DEFAULT_TARGET, "--target", "-t", help="Target model: name, name:QUANT or .gguf path."),
    draft: Optional[str] = typer.Option(None, "--draft", "-d", help="Draft model (default: the target's suggested draft)."),
    proposer: str = typer.Option("draft", help="draft | ngram | none (the target alone)."),
    temp: float = typer.Option(0.0, "--temp", min=0.0, help="Temperature; 0 is greedy."),
    top_k: int = typer.Option(0, "--top-k", min=0, help="Keep the k most likely tokens (0 = off)."),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1 = off)."),
    min_p: float = typer.Option(0.0, "--min-p", min=0.0, max=1.0, help="Drop tokens below min_p x the top probability."),
    seed: Optional[int] = typer.Option(None, help="Random seed (default: a fresh one, reported with --json)."),
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1, help="Most tokens to generate."),
    draft_max: int = typer.Option(6, "--draft-max", min=0, help="Most tokens drafted per step."),
    p_min: float = typer.Option(0.0, "--p-min", min=0.0, max=1.0, help="Stop drafting when the draft's top probability falls below this."),
    ctx: int = typer.Option(4096, "--ctx", min=64, help="Context size in tokens, for both models."),
    threads: int = typer.Option(0, "--threads", min=0, help="CPU threads (0 = all cores)."),
    gpu_layers: int = typer.Option(0, "--gpu-layers", help="Target layers on the GPU (-1 = all)."),
    draft_gpu_layers: int = typer.Option(0, "--draft-gpu-layers", help="Draft layers on the GPU (-1 = all)."),
    stop: List[str] = typer.Option([], "--stop", help="Stop at this string (repeatable)."),
    system: Optional[str] = typer.Option(None, "--system", help="System message (chat template only)."),
    raw: bool = typer.Option(False, "--raw", help="No chat template: continue the prompt text as is."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming text."),
) -> None:
    """Generate text after a prompt, speculatively."""
    from . import render
    from .engine import GenConfig, generate as run
    from .runner import PairConfig, load_pair, new_seed, prompt_tokens
    from .sampling import SamplingConfig
    from .stats import Stats

    text = prompt if prompt is not None else _read_stdin()
    try:
        sampling = SamplingConfig(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p)
    except ValueError as e:
        raise SpecError(str(e)) from e
    seed = new_seed() if seed is None else seed
    pair_cfg = PairConfig(target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                          gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, p_min=p_min)
    with render.download_progress() as progress:
        pair = load_pair(pair_cfg, progress=progress)
    try:
        tokens = prompt_tokens(pair.target, text, raw=raw, system=system)
        gen = GenConfig(sampling=sampling, max_tokens=max_tokens, draft_max=draft_max,
                        stop=tuple(stop), seed=seed)
        stats, out_tokens, out_text = Stats(), [], []
        finish = None
        t0 = time.perf_counter()
        try:
            for step in run(pair.target, pair.proposer(sampling, seed), tokens, gen):
                stats.add(n_tokens=len(step.tokens), drafted=step.drafted, accepted=step.accepted,
                          draft_s=step.draft_s, verify_s=step.verify_s)
                stats.prefill_s += step.prefill_s
                out_tokens.extend(step.tokens)
                out_text.append(step.text)
                if not as_json and step.text:
                    sys.stdout.write(step.text)
                    sys.stdout.flush()
                finish = step.finish_reason
        except KeyboardInterrupt:
            finish = "interrupted"
        stats.wall_s = time.perf_counter() - t0
        if as_json:
            print(json.dumps({"text": "".join(out_text), "tokens": out_tokens,
                              "finish_reason": finish, "seed": seed,
                              "stats": stats.as_dict()}, ensure_ascii=False))
        else:
            if out_text and not "".join(out_text).endswith("\n"):
                sys.stdout.write("\n")
            sys.stdout.flush()
            render.note(render.summary_line(stats, proposer, finish))
        if finish == "interrupted":
            raise typer.Exit(130)
    finally:
        pair.close()


models_app = typer.Typer(no_args_is_help=True, help="List, download and inspect models.")
app.add_typer(models_app, name="models")


@models_app.command("list")
def models_list(as_json: bool = typer.Option(False, "--json", help="One JSON array on stdout.")) -> None:
    """Registered models: name, family, size, suggested draft, downloaded or not."""
    from rich.console import Console
    from rich.table import Table

    from .download import local_path
    from .registry import load_registry

    reg = load_registry()
    rows = []
    for e in reg.entries.values():
        path = local_path(e)
        rows.append({"name": e.name, "aliases": list(e.aliases), "family": e.family, "params": e.params,
                     "draft": e.draft, "repo": e.repo, "file": e.file, "quants": sorted(e.quants),
                     "mirror": e.mirror is not None, "path": str(path) if path else None})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"models from {', '.join(str(p) for p in reg.files)}", title_justify="left")
    for col in ("name", "aliases", "family", "params", "draft"):
        table.add_column(col, no_wrap=True)
    table.add_column("downloaded", overflow="fold")
    for r in rows:
        table.add_row(r["name"], ", ".join(r["aliases"]), r["family"], r["params"], r["draft"] or "",
                      r["path"] or "no")
    console = Console()
    if not console.is_terminal:  # a pipe: no wrapping at 80 columns
        console = Console(width=250)
    console.print(table)


@models_app.command("pull")
def models_pull(names: List[str] = typer.Argument(..., help="Model names (name or name:QUANT)."),
                ) -> None:
    """Download models into the Hugging Face cache (or assemble a mirror);
    prints each file's path on stdout."""
    from . import render
    from .download import fetch, local_path, split_quant
    from .registry import load_registry

    reg = load_registry()
    entries = [(reg.lookup(split_quant(n)[0]), split_quant(n)[1]) for n in names]
    with render.download_progress() as progress:
        for entry, quant in entries:
            path = local_path(entry, quant) or fetch(entry, quant, progress=progress(entry.name))
            print(path, flush=True)


@models_app.command("info")
def models_info(model: str = typer.Argument(..., help="A registered name or a .gguf path."),
                as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.")) -> None:
    """Architecture, size, quantization, vocabulary, context, chat template
    and FIM tokens, read from the GGUF itself."""
    from . import render
    from .backend import LoadConfig, Model
    from .download import resolve

    with render.download_progress() as progress:
        path = resolve(model, progress=progress(model))
    with Model(path, LoadConfig(n_ctx=256, n_batch=256)) as m:
        info = m.describe()
    if as_json:
        print(json.dumps(info, indent=1, ensure_ascii=False))
        return
    width = max(len(k) for k in info)
    for k, v in info.items():
        if k == "parameters":
            v = f"{v:,} ({v / 1e9:.2f} B)"
        elif k == "size_bytes":
            v = f"{v:,} ({v / 2**30:.2f} GiB)"
        elif k == "fim_tokens":
            v = ", ".join(f"{a}={b}" for a, b in v.items()) or "none (no fill-in-the-middle)"
        print(f"{k.replace('_', ' '):<{width}}  {v}")


def _read_stdin() -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise SpecError("no prompt given", hint="Pass the prompt as an argument, or pipe it on stdin.")
    text = sys.stdin.read()
    if not text.strip():
        raise SpecError("the prompt on stdin is empty")
    return text


def main() -> None:
    """Entry point: expected failures print one message, no traceback."""
    try:
        code = app(standalone_mode=False)  # click hands back typer.Exit codes
        if isinstance(code, int):
            sys.exit(code)
    except SpecError as e:
        from . import render
        render.error(e.message, e.hint)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except Exception as e:  # click usage errors and friends
        import click
        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.stderr.write("\naborted\n")
            sys.exit(130)
        raise
