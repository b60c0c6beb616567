"""`spec-cli bench`: is it faster on this machine?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import SpecError
from ..run.config import PairConfig
from .common import (DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, load, sampling, DEFAULT_TARGET, Ctx, Deterministic,
                     Draft, DraftGpuLayers, DraftMax, DRAFT_MAX, GpuLayers, MinP, Target, Temp, Threads, TopK, TopP,
                     placement, Rpc, TensorSplit)


Prompts = Annotated[List[Path], typer.Option("--prompts", "-p", help="JSON-lines prompt files (id, kind, "
                                             "prompt); repeatable. Default: spec-cli's own small set.")]
Proposers = Annotated[List[str], typer.Option(
    "--proposer", help="Proposer to compare with the target alone; repeatable: hybrid, draft, mtp (the "
                       "target's own multi-token-prediction layers), ngram, "
                       "oracle (drafts what the target alone wrote: the ceiling), or ngram-oracle (the "
                       "lookup's drafts cut to what the target alone wrote: the lookup with perfect "
                       "timing). NAME@K drafts K tokens every step (no cost model).")]
Sweep = Annotated[Optional[str], typer.Option(
    "--sweep-draft-max", help="Also try each proposer at these fixed lengths, e.g. 1,2,3,4,6.")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per generation.")]
NPrompts = Annotated[int, typer.Option("--n-prompts", min=0, help="First N prompts of each file (0 = all).")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed (the same for every run).")]
Rules = Annotated[List[str], typer.Option("--rule", help="gumbel | residual; repeatable to compare the two rules.")]
Clock = Annotated[Optional[str], typer.Option(
    "--clock", help="Charge a simulated clock instead of the wall: a shipped profile (gpu-70b: a 70B "
                    "target on a GPU with a 1B draft; measured: this machine's probed curves) or a TOML "
                    "file. The models still run for the tokens and the acceptance; every time is "
                    "the profile's.")]
PeerFile = Annotated[Optional[str], typer.Option(
    "--peer", help="Also run each prompt through llama-cpp-python's own generation loop "
                   "(Llama.create_completion) on the same file and settings, and report generation "
                   "speed against it.")]
Concurrency = Annotated[Optional[str], typer.Option(
    "--concurrency", metavar="C,...",
    help="Send the prompts C at a time instead (C clients, each sending its next prompt when answered, "
         "all running in one batch a step as `serve --parallel C` runs them), e.g. 1,4,8: aggregate "
         "tok/s and per-request latency next to the target alone at the same concurrency.")]
BatchFile = Annotated[Optional[Path], typer.Option(
    "--batch", metavar="FILE", help="Time a `spec-cli batch` input (a file of requests or prompts) end to "
                                    "end instead, as batch runs it: tokens a second in all, the target "
                                    "alone beside each proposer.")]
Parallel = Annotated[int, typer.Option("--parallel", "-np", min=1, max=64, metavar="N",
                                       help="With --batch: requests at once (batch's default).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object with a `sets` list.")]
Html = Annotated[Optional[Path], typer.Option(
    "--html", help="Also write the result as one self-contained HTML report with plots.")]


def bench(
    prompts: Prompts = [], target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: Proposers = ["hybrid"],
    sweep_draft_max: Sweep = None, max_tokens: MaxTokens = 128, n_prompts: NPrompts = 0,
    temp: Temp = 0.0, top_k: TopK = DEFAULT_TOP_K, top_p: TopP = DEFAULT_TOP_P, min_p: MinP = DEFAULT_MIN_P,
    seed: Seed = 0, draft_max: DraftMax = DRAFT_MAX, ctx: Ctx = 4096, threads: Threads = 0,
    rpc: Rpc = None, tensor_split: TensorSplit = None, gpu_layers: GpuLayers = 0,
    draft_gpu_layers: DraftGpuLayers = 0, deterministic: Deterministic = False, rule: Rules = ["gumbel"],
    clock: Clock = None, peer: PeerFile = None, concurrency: Concurrency = None, batch_file: BatchFile = None,
    parallel: Parallel = 8, as_json: AsJson = False, html: Html = None,
) -> None:
    """Is it faster on this machine?  The target alone and each proposer,
    interleaved prompt by prompt, timed end to end, next to the ceiling.

    \b
    Examples:
      spec-cli bench
      spec-cli bench -p edits.jsonl --proposer oracle --html report.html
      spec-cli bench --clock gpu-70b --temp 0.8 --json > bench.json
      spec-cli bench --batch requests.jsonl --parallel 8
    """
    from ..run.bench import DEFAULT_PROMPTS, variants_from
    from ..run.clock import load_clock
    from ..run.engine import GenConfig
    from ..llama.peer import Peer
    from .common import check_rule

    files = _checked(prompts or [DEFAULT_PROMPTS], clock, peer)
    samp = sampling(temp, top_k, top_p, min_p)
    variants = variants_from(proposer, sweep_draft_max, [check_rule(r) for r in rule])
    if not variants:
        raise SpecError("nothing to compare: give a --proposer other than none")
    base = ("hybrid" if any(v.proposer in ("hybrid", "draft") for v in variants)
            else "mtp" if any(v.proposer == "mtp" for v in variants) else "ngram")
    config = dict(target=target, draft=draft, proposer=base, ctx=ctx, threads=threads, **placement(rpc, tensor_split),
                  gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, deterministic=deterministic,
                  draft_if_it_pays=False)
    if batch_file is not None:
        _batch(batch_file, variants, parallel, PairConfig(**config, seqs=parallel + (parallel > 1 and not deterministic)),
               temp=temp, samp=samp, max_tokens=max_tokens, seed=seed, draft_max=draft_max, as_json=as_json,
               others=bool(concurrency or peer or html or clock or prompts or sweep_draft_max))
        return
    levels = _levels(concurrency, variants, peer, html) if concurrency else None
    pair = load(PairConfig(**config, seqs=max(levels) if levels else 1), quiet=as_json)
    runner = None
    try:
        runner = Peer(pair.target) if peer else None
        simulated = load_clock(clock, pair) if clock else None
        gen = GenConfig(sampling=samp, max_tokens=max_tokens, draft_max=draft_max, seed=seed, clock=simulated)
        n = n_prompts or None
        if levels:
            return _concurrent(pair, files, variants, levels, gen, n_prompts=n, as_json=as_json, target=target,
                               deterministic=deterministic, temperature=temp, max_tokens=max_tokens, seed=seed)
        _one_at_a_time(pair, files, variants, gen, runner, n_prompts=n, as_json=as_json, html=html,
                       meta=dict(target=target, deterministic=deterministic, rules=rule, max_tokens=max_tokens,
                                 temperature=temp, top_k=samp.top_k, top_p=samp.top_p, min_p=samp.min_p,
                                 seed=seed, draft_max=draft_max, clock=simulated, peer=runner))
    finally:
        if runner is not None:
            runner.close()
        pair.close()


def _one_at_a_time(pair, files, variants, gen, runner, *, n_prompts, as_json: bool, html, meta: dict) -> None:
    """The prompts one at a time, each variant beside the target alone; the
    report printed (and written as HTML), exit 2 where the output parted
    from the target alone's beyond rounding."""
    from ..run.bench import problems, report, run_bench
    from ..term import render

    with render.spinner(enabled=not as_json) as progress:
        try:
            sets = run_bench(pair, files, variants, n_prompts=n_prompts, gen_base=gen, on_progress=progress,
                             peer=runner)
        except KeyboardInterrupt:
            raise SpecError("bench interrupted; no results", exit_code=130) from None
    result = report(pair, sets, **meta)
    if pair.config.rpc:
        result["rpc"] = list(pair.config.rpc)
    if html is not None:
        from ..term import report as html_report
        html_report.write(result, html)
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        render.wide_err().print(render.bench_table(result))
    _parted(problems(sets, deterministic=meta["deterministic"]))


def _parted(wrong: list[str]) -> None:
    """Exit 2, saying so, where output parted from the target alone's beyond rounding."""
    from ..term import render

    if wrong:
        render.error("output parted from the target alone where rounding cannot explain it: "
                     "this is a bug in spec-cli\n" + "\n".join(wrong),
                     "Please report it with the command and the prompt file.")
        raise typer.Exit(2)


def _levels(text: str, variants, peer, html) -> list[int]:
    """--concurrency's list, checked before the models load."""
    from ..run.bench import REFERENCES

    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1 or max(levels) > 64:
        raise SpecError(f"bad --concurrency {text!r}", hint="Give numbers from 1 to 64, e.g. 1,4,8.")
    refs = [v.label for v in variants if v.proposer in REFERENCES]
    if refs:
        raise SpecError(f"--concurrency measures real proposers: the references ({', '.join(refs)}) first need the target "
                        "alone's text", hint="Drop them, or run them without --concurrency.")
    if peer or html:
        raise SpecError("--concurrency writes its own table: --peer and --html go without it")
    return levels


def _concurrent(pair, files, variants, levels, gen, *, n_prompts, as_json, **meta) -> None:
    from ..run.bench import load_prompts, machine
    from ..run.bench.concurrent import add_ratios, problems, run_concurrent
    from ..run.runner import prompt_tokens
    from ..term import render

    items = [(f"{f.name}:{item['id']}", prompt_tokens(pair.target, item["prompt"], raw=item["kind"] == "completion"))
             for f in files for item in load_prompts(f, n_prompts)]
    clock = gen.clock
    with render.spinner(enabled=not as_json) as progress:
        try:
            rows = run_concurrent(pair, items, variants, levels, gen, on_progress=progress)
        except KeyboardInterrupt:
            raise SpecError("bench interrupted; no results", exit_code=130) from None
    add_ratios(rows)
    result = {"kind": "concurrency", **meta, "draft": pair.draft_name, "prompts": len(items),
              "rpc": list(pair.config.rpc),
              "files": [str(f) for f in files], "clock": "real" if clock is None else clock.name,
              "simulated": clock is not None, "machine": machine(), "rows": rows}
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        render.wide_err().print(render.concurrency_table(result))
    _parted(problems(rows, deterministic=meta["deterministic"]))


def _batch(path: Path, variants, parallel: int, cfg: PairConfig, *, temp, samp, max_tokens, seed, draft_max,
           as_json, others) -> None:
    """--batch: the file as `spec-cli batch` runs it, the target alone first."""
    from ..jobs.bench import bench_batch
    from ..jobs.inputs import Defaults, read
    from ..run.bench import REFERENCES, machine
    from ..serve.worker import ServeConfig
    from ..term import render
    from ..term.progress import batch_bench_table

    if others:
        raise SpecError("--batch times a batch file on its own: --prompts, --concurrency, --peer, --html, --clock "
                        "and --sweep-draft-max go without it")
    if any(v.rule != "gumbel" or v.proposer in REFERENCES for v in variants):
        raise SpecError("--batch compares proposers as batch runs them, with the gumbel rule, "
                        f"not {', '.join(REFERENCES)}", hint="Give --proposer hybrid, draft, ngram or mtp "
                                                             "(NAME@K: K tokens every step, as batch --fixed-draft).")
    items = read(path, Defaults(temperature=temp, top_k=samp.top_k, top_p=samp.top_p, min_p=samp.min_p,
                                max_tokens=max_tokens, seed=seed)).items
    pair = load(cfg, quiet=as_json)
    try:
        serve_cfg = ServeConfig(model=cfg.target, queue=cfg.seqs, draft_max=draft_max, spare=cfg.seqs > parallel)
        with render.spinner(enabled=not as_json) as progress:
            try:
                rows = bench_batch(pair, items, variants, serve_cfg, on_progress=progress)
            except KeyboardInterrupt:
                raise SpecError("bench interrupted; no results", exit_code=130) from None
    finally:
        pair.close()
    result = {"kind": "batch", "file": str(path), "target": cfg.target, "draft": pair.draft_name,
              "parallel": parallel, "requests": len(items), "deterministic": cfg.deterministic,
              "machine": machine(), "rows": rows}
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        render.wide_err().print(batch_bench_table(result))


def _checked(files: List[Path], clock: Optional[str], peer: Optional[str]) -> List[Path]:
    """What can be refused before the models load: the prompt files, the
    clock's profile, the peer."""
    from ..llama.peer import PEERS
    from ..run.clock import read_profile

    for f in files:
        if not f.is_file():
            raise SpecError(f"prompt file not found: {f}")
    if clock:
        read_profile(clock)
    if peer is not None and peer not in PEERS:
        raise SpecError(f"unknown peer {peer!r}", hint=f"Choose: {', '.join(PEERS)}.")
    if peer is not None and clock:
        raise SpecError("--peer measures real time, --clock simulates it: the two cannot be compared",
                        hint="Drop one of them.")
    return list(files)


def report(
    result: Annotated[Path, typer.Argument(help="A result saved from `spec-cli bench --json`.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="Where to write the HTML report.")] = Path("report.html"),
) -> None:
    """Turn a saved `spec-cli bench --json` result into one self-contained
    HTML report with plots (readable offline).

    Example: spec-cli bench --json > bench.json && spec-cli report bench.json -o bench.html
    """
    from ..term import report as html_report
    from ..term import render

    try:
        data = json.loads(result.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"result file not found: {result}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"{result} is not a bench result: {e}", hint="Save one with `spec-cli bench --json > FILE`.") \
            from None
    if not isinstance(data, dict) or not isinstance(data.get("sets"), list):
        raise SpecError(f"{result} is not a bench result (no `sets` list)",
                        hint="Save one with `spec-cli bench --json > FILE`.")
    html_report.write(data, out)
    render.note(f"wrote {out}")
