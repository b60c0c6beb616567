"""`spec-cli generate`: one generation, streamed; a document with --file/--output."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import SpecError
from ..run.config import PairConfig
from .common import FrequencyPenalty, PresencePenalty, RepeatLastN, RepeatPenalty, penalties
from .common import (DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, load, sampling, seed_or_new, DEFAULT_TARGET, Ctx,
                     Deterministic, Display, Draft, DraftGpuLayers, DraftMax, DRAFT_MAX, Fixed, GpuLayers, Json,
                     MaxTokens, MinP, PMin, ProposerName, Quiet, Rule, Seed, Target, Temp, Threads, TopK, TopP,
                     read_file, read_stdin, run_session, stdout_write, placement, Rpc, TensorSplit, Grammar,
                     JsonObject, JsonSchema, compile_constraint, constraint_spec, Raw, Stops, System, HideThinking,
                     ThinkingView, print_reply, thinking_plan)


def generate(
    prompt: Annotated[Optional[str], typer.Argument(help="The prompt; read from --file or stdin when left out.")] = None,
    file: Annotated[Optional[Path], typer.Option("--file", "-f", help="Read the prompt from this file.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the text to this file "
                                                                         "(atomically) instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --output if it exists.")] = False,
    target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: ProposerName = "hybrid",
    temp: Temp = 0.0, top_k: TopK = DEFAULT_TOP_K, top_p: TopP = DEFAULT_TOP_P, min_p: MinP = DEFAULT_MIN_P, seed: Seed = None,
    repeat_penalty: RepeatPenalty = 1.0, presence_penalty: PresencePenalty = 0.0,
    frequency_penalty: FrequencyPenalty = 0.0, repeat_last_n: RepeatLastN = 64,
    max_tokens: MaxTokens = 256, draft_max: DraftMax = DRAFT_MAX, fixed_draft: Fixed = False, p_min: PMin = 0.0,
    ctx: Ctx = 4096, threads: Threads = 0,
    rpc: Rpc = None, tensor_split: TensorSplit = None,
    gpu_layers: GpuLayers = 0, draft_gpu_layers: DraftGpuLayers = 0,
    deterministic: Deterministic = False, rule: Rule = "gumbel",
    stop: Stops = [], system: System = None, raw: Raw = False,
    json_schema: JsonSchema = None, grammar: Grammar = None, json_object: JsonObject = False,
    quiet: Quiet = False, as_json: Json = False, hide_thinking: HideThinking = False,
) -> None:
    """Generate text after a prompt, speculatively: a chat turn by default,
    plain continuation with --raw; a document with --file/--output.

    \b
    Examples:
      spec-cli generate "Write a Python function that checks for primes."
      spec-cli generate --raw --temp 0.8 --seed 1 -n 200 "Once upon a time"
      spec-cli generate -f outline.md -o draft.md -n 2000
      spec-cli generate --json-schema person.json "A person called Ada, born 1815."
    """
    from ..run.engine import GenConfig
    from ..run.runner import prompt_tokens
    from ..run.session import Session

    if prompt is not None and file is not None:
        raise SpecError("give the prompt as an argument or with --file, not both")
    text = read_file(file) if file is not None else prompt if prompt is not None else read_stdin()
    out_file = AtomicOutput(output, force) if output is not None else None  # refuse before loading
    seed = seed_or_new(seed)
    spec = constraint_spec(json_schema, grammar, json_object)
    gen = GenConfig(adjust=penalties(repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n),
                    sampling=sampling(temp, top_k, top_p, min_p), max_tokens=max_tokens, draft_max=draft_max,
                    adaptive=not fixed_draft, stop=tuple(stop), seed=seed, rule=rule)
    pair = load(PairConfig(target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                           **placement(rpc, tensor_split),
                           gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, p_min=p_min,
                           deterministic=deterministic), quiet=quiet or as_json, rule=rule)
    try:
        gen = dataclasses.replace(gen, grammar=compile_constraint(pair, spec))
        display = Display.decide(quiet=quiet, as_json=as_json)
        coloured_at_end = out_file is None and display.stdout_tty
        sink = out_file.write if out_file else None if (as_json or coloured_at_end) else stdout_write
        tokens = prompt_tokens(pair.target, text, raw=raw, system=system)
        plan = thinking_plan(pair.target.vocab, tokens, raw)
        thinking = ThinkingView(plan, sink, hidden=hide_thinking) if plan is not None else None
        session = Session(pair, tokens, gen, pair.new_proposer())
        run_session(session, display, label=proposer, sink=thinking or sink,
                    progress_total=max_tokens if out_file else None)
        if thinking is not None:
            thinking.finish(session.text)
        _report(session, seed=seed, output=output, out_file=out_file, as_json=as_json, quiet=quiet,
                coloured_at_end=coloured_at_end, label=proposer, thinking=thinking)
    finally:
        if out_file is not None:
            out_file.discard()
        pair.close()


def _report(session, *, seed, output, out_file, as_json, quiet, coloured_at_end, label, thinking=None) -> None:
    from ..term import render

    if out_file is not None:
        out_file.commit()
        if not quiet:
            render.note(f"wrote {session.stats.tokens} tokens to {output}"
                        + (" (incomplete: interrupted)" if session.finish == "interrupted" else ""))
    if as_json:
        print(json.dumps({"text": session.text, "tokens": session.tokens, "finish_reason": session.finish,
                          "seed": seed, "sampling": dataclasses.asdict(session.gen.sampling),
                          "threads": session.pair.target.n_threads,
                          "stats": session.stats.as_dict(),
                          **({"reasoning": thinking.reasoning, "answer": thinking.answer} if thinking else {})},
                         ensure_ascii=False))
    else:
        if coloured_at_end:
            print_reply(session, thinking)
        shown = thinking.answer if thinking is not None else session.text
        if out_file is None and shown and not shown.endswith("\n"):
            stdout_write("\n")
        if not quiet:
            if render.is_tty(sys.stderr):
                render.err.print(render.summary_table(session.stats, proposer=label, finish=session.finish))
            else:
                render.note(render.summary_line(session.stats, label, session.finish))
            if thinking is not None and thinking.reasoning:
                n = len(session.pair.target.vocab.tokenize(thinking.reasoning, add_special=False))
                render.note(f"thinking: {n} of the {session.stats.tokens} tokens"
                            + (" (it ended inside its thinking: no answer)" if thinking.split.unfinished else ""))
    if session.finish == "interrupted":
        if not quiet:
            render.note("interrupted: the text so far is kept" + (f" in {output}" if output else ""))
        raise typer.Exit(130)


class AtomicOutput:
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
