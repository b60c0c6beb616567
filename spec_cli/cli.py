"""The `spec-cli` command.  Each command parses, calls one function, renders.

Heavy modules (llama_cpp, numpy, huggingface_hub) are imported inside the
commands so that `spec-cli --help` is instant.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
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


# -- options shared by the commands that generate ---------------------------

def _target_opt(default=DEFAULT_TARGET):
    return typer.Option(default, "--target", "-t", help="Target model: name, name:QUANT or .gguf path.")


DraftOpt = typer.Option(None, "--draft", "-d", help="Draft model (default: the target's suggested draft).")
ProposerOpt = typer.Option("hybrid", help="hybrid (n-gram lookup, else the draft model) | draft | ngram | "
                                           "none (the target alone).")
FixedOpt = typer.Option(False, "--fixed-draft",
                        help="Always draft --draft-max tokens (no cost model; for comparisons).")
TempOpt = typer.Option(0.0, "--temp", min=0.0, help="Temperature; 0 is greedy.")
TopKOpt = typer.Option(0, "--top-k", min=0, help="Keep the k most likely tokens (0 = off).")
TopPOpt = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1 = off).")
MinPOpt = typer.Option(0.0, "--min-p", min=0.0, max=1.0, help="Drop tokens below min_p x the top probability.")
SeedOpt = typer.Option(None, help="Random seed (default: a fresh one, reported with --json).")
DraftMaxOpt = typer.Option(16, "--draft-max", min=0,
                           help="Most tokens drafted per step (the cost model drafts fewer where that pays).")
DeterministicOpt = typer.Option(
    False, "--deterministic",
    help="Bit-for-bit the target alone's output: llama.cpp's batch-invariant CPU settings and "
         "verification batches capped where their logits equal one-token decodes (slower, "
         "little speculation on a GPU). Default: llama.cpp's fast kernels; the acceptance rule "
         "is exact and the output is the target's up to floating-point rounding, as in every engine.")
RuleOpt = typer.Option(
    "gumbel", "--rule",
    help="gumbel: each token is fixed by the seed and the target alone, whatever was drafted | "
         "residual: the classic rule (higher acceptance for a sampled draft; the text then depends "
         "on the drafts). Both sample the target's distribution exactly.")
PMinOpt = typer.Option(0.0, "--p-min", min=0.0, max=1.0,
                       help="Stop drafting when the draft's top probability falls below this.")
CtxOpt = typer.Option(4096, "--ctx", min=64, help="Context size in tokens, for both models.")
ThreadsOpt = typer.Option(0, "--threads", min=0, help="CPU threads (0 = all cores).")
GpuOpt = typer.Option(0, "--gpu-layers", help="Target layers on the GPU (-1 = all).")
DraftGpuOpt = typer.Option(0, "--draft-gpu-layers", help="Draft layers on the GPU (-1 = all).")
QuietOpt = typer.Option(False, "--quiet", "-q", help="Nothing on stderr but errors.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object instead of streaming text.")


def _sampling(temp, top_k, top_p, min_p):
    from .sampling import SamplingConfig
    try:
        return SamplingConfig(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p)
    except ValueError as e:
        raise SpecError(str(e)) from e


def _rule(rule: str) -> str:
    from .engine import RULES

    if rule not in RULES:
        raise SpecError(f"unknown rule {rule!r}", hint=f"Choose one of: {', '.join(RULES)}.")
    return rule


def _load(quiet: bool, **pair_kw):
    from . import render
    from .runner import PairConfig, load_pair

    with render.download_progress(enabled=not quiet) as progress:
        return load_pair(PairConfig(**pair_kw), progress=progress)


def _run_shown(pair, tokens, gen, proposer, *, label: str, quiet: bool, as_json: bool,
               sink=None, progress_total: int | None = None, until=None):
    """Generate with the live view when stderr is a terminal.  `sink(text)`
    receives text as it comes (None: the caller prints it at the end)."""
    from . import render
    from .runner import stream

    live = not (quiet or as_json) and render.is_tty(sys.stderr)
    if not live:
        def on_step(step, stats):
            if sink is not None and step.text:
                sink(step.text)
        return stream(pair, tokens, gen, proposer=proposer, on_step=on_step, until=until)
    view = render.LiveView(proposer=label, show_text=progress_total is None,
                           progress_total=progress_total)

    def on_step(step, stats):
        if sink is not None and step.text:
            sink(step.text)
        view.update(stats, step.segments, step.drafted)

    with view:
        out = stream(pair, tokens, gen, proposer=proposer, on_step=on_step, until=until)
    out.segments = view.segments
    return out


@app.command()
def generate(
    prompt: Optional[str] = typer.Argument(None, help="The prompt; read from --file or stdin when left out."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Read the prompt from this file."),
    output: Optional[Path] = typer.Option(None, "--output", "-o",
                                          help="Write the text to this file (atomically) instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite --output if it exists."),
    target: str = _target_opt(),
    draft: Optional[str] = DraftOpt,
    proposer: str = ProposerOpt,
    temp: float = TempOpt,
    top_k: int = TopKOpt,
    top_p: float = TopPOpt,
    min_p: float = MinPOpt,
    seed: Optional[int] = SeedOpt,
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1, help="Most tokens to generate."),
    draft_max: int = DraftMaxOpt,
    fixed_draft: bool = FixedOpt,
    p_min: float = PMinOpt,
    ctx: int = CtxOpt,
    threads: int = ThreadsOpt,
    gpu_layers: int = GpuOpt,
    draft_gpu_layers: int = DraftGpuOpt,
    deterministic: bool = DeterministicOpt,
    rule: str = RuleOpt,
    stop: List[str] = typer.Option([], "--stop", help="Stop at this string (repeatable)."),
    system: Optional[str] = typer.Option(None, "--system", help="System message (chat template only)."),
    raw: bool = typer.Option(False, "--raw", help="No chat template: continue the prompt text as is."),
    quiet: bool = QuietOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Generate text after a prompt, speculatively: a chat turn by default,
    plain continuation with --raw; a document with --file/--output."""
    from . import render
    from .engine import GenConfig
    from .runner import new_seed, prompt_tokens

    if prompt is not None and file is not None:
        raise SpecError("give the prompt as an argument or with --file, not both")
    text = _read_file(file) if file is not None else prompt if prompt is not None else _read_stdin()
    out_file = _AtomicOutput(output, force) if output is not None else None  # refuse before loading
    sampling = _sampling(temp, top_k, top_p, min_p)
    seed = new_seed() if seed is None else seed
    pair = _load(quiet or as_json, target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                 gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, p_min=p_min,
                 deterministic=deterministic, rule=_rule(rule))
    try:
        tokens = prompt_tokens(pair.target, text, raw=raw, system=system)
        gen = GenConfig(sampling=sampling, max_tokens=max_tokens, draft_max=draft_max, adaptive=not fixed_draft,
                        stop=tuple(stop), seed=seed, rule=rule)
        to_terminal = out_file is None and not as_json and render.is_tty(sys.stdout) \
            and render.is_tty(sys.stderr) and not quiet
        if out_file is not None:
            sink = out_file.write
        elif as_json or to_terminal:
            sink = None  # printed at the end (the live view shows it meanwhile)
        else:
            sink = _stdout_write
        out = _run_shown(pair, tokens, gen, pair.proposer(sampling, seed), label=proposer, quiet=quiet,
                         as_json=as_json, sink=sink, progress_total=max_tokens if out_file else None)
        if out_file is not None:
            out_file.commit()
            if not quiet:
                render.note(f"wrote {out.stats.tokens} tokens to {output}"
                            + (" (incomplete: interrupted)" if out.finish == "interrupted" else ""))
        if as_json:
            print(json.dumps({"text": out.text, "tokens": out.tokens, "finish_reason": out.finish,
                              "seed": seed, "stats": out.stats.as_dict()}, ensure_ascii=False))
        else:
            if to_terminal:
                from rich.console import Console
                Console(highlight=False).print(render.coloured(out.segments or [(out.text, False)]), end="")
            if out_file is None and out.text and not out.text.endswith("\n"):
                _stdout_write("\n")
            if not quiet:
                if render.is_tty(sys.stderr):
                    render.err.print(render.summary_table(out.stats, proposer=proposer, finish=out.finish))
                else:
                    render.note(render.summary_line(out.stats, proposer, out.finish))
        if out.finish == "interrupted":
            if not quiet:
                render.note("interrupted: the text so far is kept" + (f" in {output}" if output else ""))
            raise typer.Exit(130)
    finally:
        if out_file is not None:
            out_file.discard()
        pair.close()


CHAT_HELP = "/reset  /stats  /save FILE  /exit  -- Ctrl-C stops a reply, Ctrl-D exits"


@app.command()
def chat(
    target: str = _target_opt(),
    draft: Optional[str] = DraftOpt,
    proposer: str = ProposerOpt,
    system: Optional[str] = typer.Option(None, "--system", help="System message for the conversation."),
    temp: float = TempOpt,
    top_k: int = TopKOpt,
    top_p: float = TopPOpt,
    min_p: float = MinPOpt,
    seed: Optional[int] = SeedOpt,
    max_tokens: int = typer.Option(1024, "--max-tokens", "-n", min=1, help="Most tokens per reply."),
    draft_max: int = DraftMaxOpt,
    fixed_draft: bool = FixedOpt,
    p_min: float = PMinOpt,
    ctx: int = CtxOpt,
    threads: int = ThreadsOpt,
    gpu_layers: int = GpuOpt,
    draft_gpu_layers: int = DraftGpuOpt,
    deterministic: bool = DeterministicOpt,
    rule: str = RuleOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Chat in the model's own chat template.  Each turn evaluates only its
    new tokens: the target's and the draft's KV caches are reused."""
    from . import render
    from .engine import GenConfig
    from .runner import new_seed
    from .stats import Stats

    sampling = _sampling(temp, top_k, top_p, min_p)
    seed = new_seed() if seed is None else seed
    pair = _load(quiet, target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                 gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, p_min=p_min,
                 deterministic=deterministic, rule=_rule(rule))
    interactive = render.is_tty(sys.stdin)
    if interactive:
        _setup_history()
    base = [{"role": "system", "content": system}] if system else []
    messages = list(base)
    total = Stats()
    if not quiet:
        render.note(f"chat with {target}" + (f", drafting with {pair.draft_name}"
                                             if proposer in ("draft", "hybrid") else "")
                    + f", proposer {proposer}"
                    + f"\n{CHAT_HELP}")
    proposer_obj = pair.proposer(sampling, seed)
    turn = 0
    try:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                break
            except KeyboardInterrupt:
                print()
                continue
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                cmd, _, arg = line.partition(" ")
                if cmd in ("/exit", "/quit"):
                    break
                if cmd == "/reset":
                    messages = list(base)
                    render.note("conversation cleared")
                elif cmd == "/stats":
                    render.err.print(render.summary_table(total, proposer=proposer, finish=None))
                elif cmd == "/save":
                    _save_chat(arg.strip(), target, messages)
                else:
                    render.note(f"unknown command {cmd}; {CHAT_HELP}")
                continue
            messages.append({"role": "user", "content": line})
            tokens = pair.target.tokenize_chat(pair.target.apply_chat_template(messages))
            if len(tokens) >= pair.target.n_ctx:
                messages.pop()
                render.error(f"the conversation no longer fits the context ({len(tokens)} tokens, "
                             f"--ctx {pair.target.n_ctx})", "Type /reset to start over, or restart with a larger --ctx.")
                continue
            turn += 1
            gen = GenConfig(sampling=sampling, max_tokens=max_tokens, draft_max=draft_max, adaptive=not fixed_draft,
                            seed=seed + turn, rule=rule)
            live = render.is_tty(sys.stdout) and render.is_tty(sys.stderr) and not quiet
            out = _run_shown(pair, tokens, gen, proposer_obj, label=proposer, quiet=quiet, as_json=False,
                             sink=None if live else _stdout_write)
            if live:
                from rich.console import Console
                Console(highlight=False).print(render.coloured(out.segments or [(out.text, False)]))
            elif not out.text.endswith("\n"):
                _stdout_write("\n")
            messages.append({"role": "assistant", "content": out.text})
            total.merge(out.stats)
            if not quiet:
                render.note(f"[{out.stats.tokens} tokens, {out.stats.tokens_per_s:.1f} tok/s, "
                            + (f"accepted {out.stats.acceptance_rate:.0%}, " if out.stats.drafted else "")
                            + f"prompt: {out.stats.prefill_tokens} new tokens evaluated]")
            if out.finish == "interrupted":
                render.note("(reply interrupted; the conversation is kept)")
            elif out.finish == "context":
                render.note("(the context is full: /reset to start over)")
    finally:
        pair.close()


def _setup_history() -> None:
    import atexit
    import os

    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "spec-cli"
    path = state / "chat_history"
    try:
        state.mkdir(parents=True, exist_ok=True)
        if path.exists():
            readline.read_history_file(path)
    except OSError:
        return
    readline.set_history_length(1000)
    atexit.register(lambda: _write_history(readline, path))


def _write_history(readline, path: Path) -> None:
    try:
        readline.write_history_file(path)
    except OSError:
        pass


def _save_chat(name: str, target: str, messages: list) -> None:
    from . import render

    if not name:
        render.note("usage: /save FILE")
        return
    from .files import atomic_write

    path = Path(name).expanduser()
    try:
        atomic_write(path, json.dumps({"target": target, "messages": messages}, indent=1, ensure_ascii=False))
    except OSError as e:
        render.error(f"cannot save to {path}: {e.strerror}")
        return
    render.note(f"saved {len(messages)} messages to {path}")


@app.command()
def complete(
    suffix_file: Optional[Path] = typer.Option(None, "--suffix-file", help="The text after the cursor, from a file."),
    suffix: Optional[str] = typer.Option(None, "--suffix", help="The text after the cursor."),
    target: str = _target_opt(),
    draft: Optional[str] = DraftOpt,
    proposer: str = ProposerOpt,
    temp: float = TempOpt,
    top_k: int = TopKOpt,
    top_p: float = TopPOpt,
    min_p: float = MinPOpt,
    seed: Optional[int] = SeedOpt,
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", min=1, help="Most tokens to generate."),
    max_lines: int = typer.Option(0, "--max-lines", min=0, help="Stop after this many lines (0 = no limit)."),
    draft_max: int = DraftMaxOpt,
    fixed_draft: bool = FixedOpt,
    ctx: int = CtxOpt,
    threads: int = ThreadsOpt,
    gpu_layers: int = GpuOpt,
    draft_gpu_layers: int = DraftGpuOpt,
    deterministic: bool = DeterministicOpt,
    rule: str = RuleOpt,
    quiet: bool = QuietOpt,
    as_json: bool = typer.Option(False, "--json", help='Print {"completion": ..., "stats": ...}.'),
) -> None:
    """Editor completion: the text before the cursor on stdin, the rest with
    --suffix-file; prints only the middle (fill-in-the-middle when the model
    has FIM tokens, else a plain continuation)."""
    from . import render
    from .engine import GenConfig
    from .runner import new_seed

    if sys.stdin is None or sys.stdin.isatty():
        raise SpecError("complete reads the text before the cursor on stdin",
                        hint="e.g. `head -c $OFFSET file.py | spec-cli complete --suffix-file rest.py`")
    prefix = sys.stdin.read()
    if suffix_file is not None and suffix is not None:
        raise SpecError("give --suffix or --suffix-file, not both")
    after = _read_file(suffix_file, what="suffix file", allow_empty=True) if suffix_file is not None else (suffix or "")
    if not prefix and not after:
        raise SpecError("nothing to complete: the prefix on stdin and the suffix are both empty")
    sampling = _sampling(temp, top_k, top_p, min_p)
    seed = new_seed() if seed is None else seed
    pair = _load(quiet or as_json, target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                 gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, deterministic=deterministic,
                 rule=_rule(rule))
    try:
        m = pair.target
        fim = m.special_tokens()
        if min(fim["fim_pre"], fim["fim_suf"], fim["fim_mid"]) >= 0:
            tokens = ([fim["fim_pre"]] + m.tokenize(prefix, add_special=False)
                      + [fim["fim_suf"]] + m.tokenize(after, add_special=False) + [fim["fim_mid"]])
            if m.add_bos and m.bos >= 0:
                tokens.insert(0, m.bos)
        else:
            if not quiet:
                render.note(f"{target} has no fill-in-the-middle tokens: continuing the prefix, "
                            "the suffix is not used")
            tokens = m.tokenize(prefix or "\n")
        gen = GenConfig(sampling=sampling, max_tokens=max_tokens, draft_max=draft_max, adaptive=not fixed_draft,
                        seed=seed, rule=rule)
        until = (lambda text: text.count("\n") >= max_lines) if max_lines else None
        out = _run_shown(pair, tokens, gen, pair.proposer(sampling, seed), label=proposer, quiet=True,
                         as_json=as_json, until=until)
        completion = out.text
        if max_lines:
            completion = "\n".join(completion.split("\n")[:max_lines])
        if as_json:
            print(json.dumps({"completion": completion, "finish_reason": out.finish,
                              "stats": out.stats.as_dict()}, ensure_ascii=False))
        else:
            _stdout_write(completion)
            if not quiet:
                render.note(render.summary_line(out.stats, proposer, out.finish))
        if out.finish == "interrupted":
            raise typer.Exit(130)
    finally:
        pair.close()


@app.command()
def bench(
    prompts: List[Path] = typer.Option([], "--prompts", "-p",
                                       help="JSON-lines prompt files (id, kind, prompt); repeatable. "
                                            "Default: spec-cli's own small set."),
    target: str = _target_opt(),
    draft: Optional[str] = DraftOpt,
    proposer: List[str] = typer.Option(["hybrid"], "--proposer",
                                       help="Proposer to compare with the target alone; repeatable: hybrid, "
                                            "draft, ngram, or oracle (drafts what the target alone wrote: "
                                            "the ceiling). NAME@K drafts K tokens every step (no cost model)."),
    sweep_draft_max: Optional[str] = typer.Option(None, "--sweep-draft-max",
                                                  help="Also try each proposer at these fixed lengths, e.g. 1,2,3,4,6."),
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", min=1, help="Tokens per generation."),
    n_prompts: int = typer.Option(0, "--n-prompts", min=0, help="First N prompts of each file (0 = all)."),
    temp: float = TempOpt,
    seed: int = typer.Option(0, help="Random seed (the same for every run)."),
    draft_max: int = DraftMaxOpt,
    ctx: int = CtxOpt,
    threads: int = ThreadsOpt,
    gpu_layers: int = GpuOpt,
    draft_gpu_layers: int = DraftGpuOpt,
    deterministic: bool = DeterministicOpt,
    rule: List[str] = typer.Option(["gumbel"], "--rule",
                                   help="gumbel | residual; repeatable to compare the two rules."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with a `sets` list."),
) -> None:
    """Is it faster on this machine?  The target alone and each proposer,
    interleaved prompt by prompt, with speedups, acceptance and time split."""
    from . import render
    from .bench import DEFAULT_PROMPTS, NEAR_TIE, machine, problems, run_bench, variants_from
    from .engine import GenConfig

    files = list(prompts) or [DEFAULT_PROMPTS]
    for f in files:
        if not f.is_file():
            raise SpecError(f"prompt file not found: {f}")
    variants = variants_from(proposer, sweep_draft_max, [_rule(r) for r in rule])
    if not variants:
        raise SpecError("nothing to compare: give a --proposer other than none")
    needs_draft = any(v.proposer in ("hybrid", "draft") for v in variants)
    pair = _load(as_json, target=target, draft=draft, proposer="hybrid" if needs_draft else "ngram", ctx=ctx,
                 threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                 deterministic=deterministic)
    try:
        gen = GenConfig(sampling=_sampling(temp, 0, 1.0, 0.0), max_tokens=max_tokens, draft_max=draft_max,
                        seed=seed)
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=render.err, transient=True, disable=as_json) as progress:
            task = progress.add_task("bench", total=None)
            try:
                sets = run_bench(pair, files, variants, n_prompts=n_prompts or None, gen_base=gen,
                                 on_progress=lambda d: progress.update(task, description=d))
            except KeyboardInterrupt:
                raise SpecError("bench interrupted; no results", exit_code=130) from None
        result = {"target": target, "draft": pair.draft_name,
                  "mode": "deterministic" if deterministic else "default", "rules": list(dict.fromkeys(rule)),
                  "max_tokens": max_tokens, "temperature": temp, "seed": seed, "draft_max": draft_max,
                  "verify_cap": pair.target.verify_cap, "near_tie": NEAR_TIE,
                  "clock": "real", "simulated": False,
                  "batch_curve_ms": {n: round(s * 1e3, 2) for n, s in sorted((pair.target.curve or {}).items())},
                  "machine": machine(), "sets": sets}
        if as_json:
            print(json.dumps(result, indent=1))
        else:
            render.wide_err().print(render.bench_table(result))
        wrong = problems(sets, deterministic=deterministic)
        if wrong:
            render.error("output parted from the target alone where rounding cannot explain it: "
                         "this is a bug in spec-cli\n" + "\n".join(wrong),
                         "Please report it with the command and the prompt file.")
            raise typer.Exit(2)
    finally:
        pair.close()


class _AtomicOutput:
    """Text goes to a temporary file beside `path`, renamed over it at the
    end; an existing file is kept unless `force`."""

    def __init__(self, path: Path, force: bool):
        import tempfile

        self.path = path
        if path.exists() and not force:
            raise SpecError(f"{path} exists", hint="Use --force to overwrite it, or choose another --output.")
        if path.is_dir():
            raise SpecError(f"{path} is a directory")
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".part")
        except OSError as e:
            raise SpecError(f"cannot write {path}: {e.strerror}") from e
        self.tmp = Path(tmp)
        self._f = open(fd, "w", encoding="utf-8")

    def write(self, text: str) -> None:
        self._f.write(text)
        self._f.flush()

    def commit(self) -> None:
        import os
        self._f.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        if not self._f.closed:
            self._f.close()
        self.tmp.unlink(missing_ok=True)


def _stdout_write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _read_file(path: Path, *, what: str = "prompt file", allow_empty: bool = False) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read {what} {path}: {e}") from e
    if not allow_empty and not text.strip():
        raise SpecError(f"the {what} {path} is empty")
    return text


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
    from .download import resolve, split_quant
    from .registry import load_registry

    reg = load_registry()
    for n in names:  # every name is checked before anything is downloaded
        reg.lookup(split_quant(n)[0])
    with render.download_progress() as progress:
        for n in names:
            print(resolve(n, registry=reg, progress=progress(n)), flush=True)


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
