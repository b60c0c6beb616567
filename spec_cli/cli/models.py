"""`spec-cli models list|pull|info`."""

from __future__ import annotations

import json
from typing import List

import typer

models_app = typer.Typer(no_args_is_help=True, help="List, download and inspect models.")


@models_app.command("list")
def models_list(as_json: bool = typer.Option(False, "--json", help="One JSON array on stdout.")) -> None:
    """Registered models: name, family, size, suggested draft, downloaded or not."""
    from rich.console import Console
    from rich.table import Table

    from ..models.download import local_path
    from ..models.registry import load_registry

    reg = load_registry()
    rows = []
    for e in reg.entries.values():
        path = local_path(e)
        rows.append({"name": e.name, "aliases": list(e.aliases), "family": e.family, "params": e.params,
                     "draft": e.draft, "mtp": e.mtp, "repo": e.repo, "file": e.file, "quants": sorted(e.quants),
                     "mirror": e.mirror is not None, "note": e.description, "path": str(path) if path else None})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"models from {', '.join(str(p) for p in reg.files)}", title_justify="left")
    for col in ("name", "aliases", "family", "params", "draft"):
        table.add_column(col, no_wrap=True)
    table.add_column("downloaded", overflow="fold")
    for r in rows:
        table.add_row(r["name"], ", ".join(r["aliases"]), r["family"], r["params"],
                      r["draft"] or ("its MTP layers" if r["mtp"] else ""), r["path"] or "no")
    console = Console()
    if not console.is_terminal:  # a pipe: no wrapping at 80 columns
        console = Console(width=250)
    console.print(table)


@models_app.command("pull")
def models_pull(names: List[str] = typer.Argument(..., help="Model names (name or name:QUANT)."),
                ) -> None:
    """Download models into the Hugging Face cache (or assemble a mirror);
    prints each file's path on stdout."""
    from ..term import render
    from ..models.download import resolve, split_quant
    from ..models.registry import load_registry

    reg = load_registry()
    for n in names:  # every name is checked before anything is downloaded
        reg.lookup(split_quant(n)[0])
    with render.download_progress() as progress:
        for n in names:
            print(resolve(n, registry=reg, progress=progress(n)), flush=True)


@models_app.command("info")
def models_info(model: str = typer.Argument(..., help="A registered name or a .gguf path."),
                as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.")) -> None:
    """Architecture, size, quantization, vocabulary, context, chat template,
    FIM tokens, memory kind (KV cache, recurrent, hybrid) and MTP layers,
    read from the GGUF itself."""
    from ..term import render
    from ..llama.facts import describe
    from ..llama.model import LoadConfig, Model
    from ..models.download import resolve

    with render.download_progress() as progress:
        path = resolve(model, progress=progress(model))
    with Model(path, LoadConfig(n_ctx=256, n_batch=256)) as m:
        info = describe(m)
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
        elif v is None:
            v = "-"
        print(f"{k.replace('_', ' '):<{width}}  {v}")
