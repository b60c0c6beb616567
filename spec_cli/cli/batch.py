"""`spec-cli batch`: a file of requests (or a folder of prompts) in, the
answers out, every request in one engine batch, resumable."""

from __future__ import annotations

import json
import resource
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import SpecError
from ..run.config import PairConfig
from .common import (DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, DEFAULT_TARGET, Ctx, Deterministic, Draft,
                     DraftGpuLayers, DraftMax, DRAFT_MAX, Fixed, GpuLayers, MaxTokens, MinP, PMin, ProposerName,
                     Quiet, Rpc, Rule, Seed, Target, TensorSplit, Temp, Threads, TopK, TopP, load, model_name,
                     placement, sampling, Raw, Stops, System)
from .common import FrequencyPenalty, PresencePenalty, RepeatLastN, RepeatPenalty, penalties


Input = Annotated[Path, typer.Argument(
    metavar="INPUT", help="A JSON-lines file of requests (OpenAI's batch format, or {\"prompt\"} objects), "
                          "a file of prompts one a line, or a folder of prompt files.")]
Output = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Where the answers go: a JSON-lines file (appended as each request finishes; "
                           "run again to resume), or for a folder of prompts a folder (default: NAME.out.EXT "
                           "beside each prompt). Default for a file: stdout.")]
Ordered = Annotated[bool, typer.Option("--ordered", help="Write the answers in input order (default: as "
                                                         "they finish, each with its custom_id).")]
BatchParallel = Annotated[int, typer.Option(
    "--parallel", "-np", min=1, max=64, metavar="N",
    help="Requests generated at once, all in one target batch a step (each costs a --ctx of KV cache in "
         "each model: fewer where the memory free now would not hold them).")]
SummaryJson = Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")]


def batch(
    source: Input, output: Output = None, ordered: Ordered = False, parallel: BatchParallel = 16,
    target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: ProposerName = "hybrid",
    temp: Temp = 0.0, top_k: TopK = DEFAULT_TOP_K, top_p: TopP = DEFAULT_TOP_P, min_p: MinP = DEFAULT_MIN_P,
    seed: Seed = None, max_tokens: MaxTokens = 256,
    repeat_penalty: RepeatPenalty = 1.0, presence_penalty: PresencePenalty = 0.0,
    frequency_penalty: FrequencyPenalty = 0.0, repeat_last_n: RepeatLastN = 64,
    system: System = None, raw: Raw = False, stop: Stops = [],
    draft_max: DraftMax = DRAFT_MAX, fixed_draft: Fixed = False, p_min: PMin = 0.0, ctx: Ctx = 4096,
    threads: Threads = 0,
    rpc: Rpc = None, tensor_split: TensorSplit = None, gpu_layers: GpuLayers = 0, draft_gpu_layers: DraftGpuLayers = 0,
    deterministic: Deterministic = False, rule: Rule = "gumbel", quiet: Quiet = False, as_json: SummaryJson = False,
) -> None:
    """Run a file of requests, every one in the same engine batch: the
    models load once, up to --parallel requests share each target batch,
    and each answer is written as it finishes. Run the same command again
    to resume: requests already answered are skipped.

    \b
    --temp ... --stop make each plain prompt a request as `generate` runs it
    (--system and --raw too); a request in OpenAI's batch format keeps its
    own fields, as `serve` answers them.

    \b
    Examples:
      spec-cli batch requests.jsonl -o answers.jsonl
      spec-cli batch prompts.txt -o answers.jsonl --ordered -n 512
      spec-cli batch outlines/ -o drafts/ -n 2000
    """
    from ..jobs.inputs import Defaults, read

    defaults = Defaults(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, max_tokens=max_tokens,
                        seed=seed, system=system, raw=raw, stop=tuple(stop),
                        penalties=_penalty_fields(repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n))
    sampling(temp, top_k, top_p, min_p)  # checked before anything is read
    inputs = read(source, defaults)
    plan = _Plan.make(source, inputs, output, ordered=ordered, as_json=as_json)
    todo = [item for item in inputs.items if item.custom_id not in plan.answered]
    if todo:
        n = min(parallel, len(todo))  # a spare sequence to move a cache through, as serve has (choose_slot)
        spare = n > 1 and not deterministic
        cfg = PairConfig(target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                         **placement(rpc, tensor_split), gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                         p_min=p_min, deterministic=deterministic, seqs=n + spare, fit_memory=True,
                         together=n)
        summary = _run(plan, todo, cfg, quiet=quiet, rule=rule, draft_max=draft_max, adaptive=not fixed_draft,
                       spare=spare)
    else:
        summary = plan.summary(to_run=0)
        if not quiet:
            from ..term import render
            render.note(f"all {len(inputs.items)} requests are answered already"
                        + (f" in {output}" if output else "") + ": nothing to run")
    plan.close()
    _report(summary, quiet=quiet, as_json=as_json)


def _penalty_fields(repeat: float, presence: float, frequency: float, last_n: int) -> dict:
    """The penalty flags as a plain prompt's request fields (those that are on)."""
    if penalties(repeat, presence, frequency, last_n) is None:
        return {}
    return {"repeat_penalty": repeat, "presence_penalty": presence, "frequency_penalty": frequency,
            "repeat_last_n": last_n}


@dataclass
class _Plan:
    """Where the answers go, what is answered already, and the run's tally."""

    source: Path
    mode: str
    output: Path | None
    ordered: list[str] | None
    answered: dict[str, bool]
    log: object = None          # jobs.outputs.AnswerLog for a file of requests
    tally: dict = field(default_factory=lambda: {"answered": 0, "failed": 0, "not_run": 0, "tokens": 0,
                                                  "drafted": 0, "accepted": 0})
    started: float = 0.0

    @classmethod
    def make(cls, source: Path, inputs, output: Path | None, *, ordered: bool, as_json: bool) -> "_Plan":
        from ..jobs.inputs import answer_path
        from ..jobs.outputs import AnswerLog, check_folder_output

        order = [item.custom_id for item in inputs.items] if ordered else None
        if inputs.mode == "folder":
            check_folder_output(output, source)
            done = {item.custom_id: True for item in inputs.items if answer_path(item, output).exists()}
            return cls(source, inputs.mode, output, order, done)
        if output is None and as_json:
            raise SpecError("--json prints the summary on stdout, where the answers go without -o",
                            hint="Give -o FILE for the answers.")
        if output is not None and output.exists() and output.resolve() == source.resolve():
            raise SpecError("-o is the input file", hint="Write the answers to another file.")
        log = AnswerLog(output)
        plan = cls(source, inputs.mode, output, order, dict(log.answered), log)
        if log.repaired:
            from ..term import render
            render.note(f"{output}: dropped a last line cut short (an earlier run was killed while writing it); "
                        "its request runs again")
        return plan

    def summary(self, *, to_run: int, parallel: int = 0, proposer: str = "") -> dict:
        t = self.tally
        wall = time.monotonic() - self.started if self.started else 0.0
        return {"input": str(self.source), "output": str(self.output) if self.output else None, "mode": self.mode,
                "already_answered": len(self.answered), "to_run": to_run, **t,
                "wall_s": round(wall, 3), "tokens_per_s": round(t["tokens"] / wall, 3) if wall > 0 else 0.0,
                "acceptance": round(t["accepted"] / t["drafted"], 4) if t["drafted"] else None,
                "parallel": parallel, "proposer": proposer,
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def _run(plan: _Plan, todo: list, cfg: PairConfig, *, quiet: bool, rule: str, draft_max: int, adaptive: bool,
         spare: bool) -> dict:
    """Load the pair on a worker, run `todo`, and the run's summary."""
    from ..jobs import run as jobs
    from ..serve.worker import ServeConfig, Worker
    from ..term.progress import BatchProgress

    name = model_name(cfg.target)
    worker = Worker(lambda: load(cfg, quiet=quiet, rule=rule),
                    ServeConfig(model=name, queue=cfg.seqs, draft_max=draft_max, adaptive=adaptive, rule=rule,
                                spare=spare))
    stop = jobs.Stop()
    try:
        with BatchProgress(len(todo), quiet=quiet) as progress, _signals(stop):
            sink = _Sink(plan, progress, stop)
            plan.started = time.monotonic()
            level = jobs.run(worker, todo, sink.answer, stop=stop, on_tick=lambda: sink.tick(worker),
                             on_abandon=sink.abandon)
        summary = plan.summary(to_run=len(todo), parallel=worker.parallel, proposer=cfg.proposer)
        summary["interrupted"] = level > 0
        return summary
    finally:
        worker.close(timeout=60)
        worker.pair.close()


class _Sink:
    """Each answer written where it goes, counted and shown."""

    def __init__(self, plan: _Plan, progress, stop):
        from ..jobs.outputs import Ordered

        self.plan, self.progress, self.stop, self.told = plan, progress, stop, 0
        self.order = Ordered(plan.ordered, plan.log.write) if plan.ordered and plan.log is not None else None

    def answer(self, a) -> None:
        from ..jobs.inputs import answer_path
        from ..jobs.outputs import answer_line, write_atomically

        plan, t = self.plan, self.plan.tally
        why = f"{a.item.where} ({a.item.custom_id}): {a.status} {a.body.get('error', {}).get('message', '')}"
        if a.status >= 500:  # the engine failed, not the request: nothing written, so that a resume runs it again
            self.abandon(a.item)
            self.progress.finished(f"{why} (not written: run the same command again to retry it)", ok=False)
            return
        if plan.mode == "folder":
            if a.ok:
                write_atomically(answer_path(a.item, plan.output), a.text)
        else:
            line = answer_line(a.item.custom_id, a.status, a.body)
            self.order.put(a.item.custom_id, line) if self.order else plan.log.write(line)
        t["answered" if a.ok else "failed"] += 1
        if a.stats is not None:
            t["tokens"] += a.stats.tokens
            t["drafted"] += a.stats.drafted
            t["accepted"] += a.stats.accepted
        if a.ok:
            s = a.stats
            line = f"{a.item.custom_id}: {s.tokens} tokens, {s.tokens_per_s:.1f} tok/s"
        else:
            line = why
        self.progress.finished(line, ok=a.ok)

    def abandon(self, item) -> None:
        self.plan.tally["not_run"] += 1
        if self.order:
            self.order.skip(item.custom_id)

    def tick(self, worker) -> None:
        m, t = worker.metrics, self.plan.tally
        wall = max(time.monotonic() - self.plan.started, 1e-9)
        drafted = sum(m.drafted.values())
        self.progress.update(tokens_per_s=m.tokens / wall,
                             acceptance=sum(m.accepted.values()) / drafted if drafted else None, failed=t["failed"])
        if self.stop.level > self.told:
            self.told = self.stop.level
            self.progress.say(
                "stopping: the running requests finish and are written, no new one starts (Ctrl-C again "
                "abandons the running ones)" if self.told == 1 else
                "abandoning the running requests: nothing of them is written")


class _signals:
    """SIGINT: finish what runs, then again: abandon it; SIGTERM: abandon it."""

    def __init__(self, stop):
        self.stop = stop

    def __enter__(self):
        def on_signal(sig, frame):
            self.stop.level = 2 if sig == signal.SIGTERM else self.stop.level + 1
        self.saved = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, handler in self.saved.items():
            signal.signal(s, handler)


def _report(s: dict, *, quiet: bool, as_json: bool) -> None:
    from ..term import render
    from ..term.progress import batch_table

    if as_json:
        print(json.dumps(s, ensure_ascii=False))
    elif not quiet and s["to_run"]:
        render.err.print(batch_table(s))
    if s.get("interrupted"):
        if not quiet:
            render.note(f"interrupted: {s['not_run']} requests were not run; run the same command again to "
                        "run them (the answered ones are kept and skipped)")
        raise typer.Exit(130)
    if s["not_run"]:  # not stopped, but the engine failed some: a resume runs them
        if not quiet:
            render.note(f"{s['not_run']} requests were not run; run the same command again to run them")
        raise typer.Exit(1)
    if s["failed"]:
        if not quiet:
            render.note(f"{s['failed']} requests failed"
                        + (": their error lines say why" if s["mode"] != "folder" else ""))
        raise typer.Exit(1)
