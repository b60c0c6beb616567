"""Everything spec-cli shows on the terminal's stderr: the live view,
progress bars, summaries, errors.  stdout is the caller's: generated text.

The live view (rich, stderr, only when stderr is a terminal) shows the text
as it is written -- tokens the draft proposed and the target accepted in
green, the target's own tokens plain -- above a footer that updates as the
steps come: tokens/s, acceptance, mean accepted length, current draft
length, per-position acceptance as bars, and drafting vs verifying time.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..core.stats import Stats

err = Console(stderr=True, highlight=False)
DRAFT_STYLE = "green"
TARGET_STYLE = ""
BARS = " ▁▂▃▄▅▆▇█"


def coloured(segments) -> Text:
    text = Text()
    for piece, from_draft in segments:
        text.append(piece, style=DRAFT_STYLE if from_draft else TARGET_STYLE)
    return text


def position_bars(rates: list[float]) -> str:
    return "".join(BARS[min(int(r * (len(BARS) - 1) + 0.5), len(BARS) - 1)] for r in rates)


def footer(stats: Stats, *, last_drafted: int, proposer: str) -> Text:
    busy = stats.draft_s + stats.verify_s
    draft_share = stats.draft_s / busy if busy else 0.0
    t = Text(style="dim")
    t.append(f"{stats.tokens} tok  ", style="bold")
    t.append(f"{stats.tokens_per_s:5.1f} tok/s  ", style="bold cyan")
    t.append(f"{proposer}  ")
    if stats.drafted:
        t.append(f"accept {stats.acceptance_rate:4.0%}  mean {stats.mean_accepted:4.2f}  ")
        t.append(f"draft len {last_drafted}  ")
        t.append("per-pos ")
        t.append(position_bars(stats.position_rates()) or "-", style="green")
        t.append("  ")
    t.append(f"time draft {draft_share:4.0%} / verify {1 - draft_share:4.0%}")
    return t


class LiveView:
    """The live panel on stderr.  `show_text` puts the text being written
    above the footer; `progress_total` adds a bar toward that many tokens."""

    def __init__(self, *, proposer: str, show_text: bool = True, progress_total: int | None = None,
                 console: Console = err):
        self.proposer = proposer
        self.show_text = show_text
        self.progress_total = progress_total
        self.console = console
        self.segments: list[tuple[str, bool]] = []
        self.last_drafted = 0
        self.stats = Stats()
        self._live = Live(console=console, refresh_per_second=8, transient=True,
                          vertical_overflow="crop", redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> "LiveView":
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._live.__exit__(*exc)

    def update(self, stats: Stats, segments, drafted: int) -> None:
        self.stats = stats
        self.segments.extend(segments)
        self.last_drafted = drafted
        self._live.update(self._render())

    def _render(self):
        parts = []
        if self.show_text:
            parts.append(self._tail_text(max(self.console.height - 4, 3)))
        if self.progress_total:
            from rich.progress_bar import ProgressBar
            done = min(self.stats.tokens, self.progress_total)
            grid = Table.grid(padding=(0, 1))
            grid.add_row(ProgressBar(total=self.progress_total, completed=done, width=40),
                         Text(f"{done}/{self.progress_total} tokens", style="dim"))
            parts.append(grid)
        parts.append(footer(self.stats, last_drafted=self.last_drafted, proposer=self.proposer))
        return Group(*parts)

    def _tail_text(self, lines: int) -> Text:
        """The last `lines` lines of the text (re-rendering it all would be
        quadratic in a long generation)."""
        out, newlines = [], 0
        for piece, origin in reversed(self.segments):
            out.append((piece, origin))
            newlines += piece.count("\n")
            if newlines > lines:
                break
        text = coloured(reversed(out))
        plain = text.plain
        if plain.count("\n") > lines:
            cut = len(plain)
            for _ in range(lines + 1):
                cut = plain.rfind("\n", 0, cut)
            text = text[cut + 1:]
        return text


def summary_table(stats: Stats, *, proposer: str, finish: str | None) -> Table:
    busy = stats.draft_s + stats.verify_s
    gen = max(stats.gen_s, 1e-9)
    table = Table(title="spec-cli", title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("tokens", f"{stats.tokens} in {stats.steps} target batches ({stats.tokens_per_step:.2f} per batch)")
    table.add_row("speed", f"{stats.tokens_per_s:.1f} tok/s (prompt read in {stats.prefill_s:.2f}s)")
    table.add_row("proposer", proposer)
    if stats.drafted:
        table.add_row("accepted", f"{stats.accepted}/{stats.drafted} draft tokens ({stats.acceptance_rate:.0%}), "
                                  f"mean {stats.mean_accepted:.2f} per step")
        rates = stats.position_rates()
        table.add_row("per position", "  ".join(f"{i + 1}:{r:.0%}" for i, r in enumerate(rates))
                      + f"  {position_bars(rates)}")
    table.add_row("time", f"draft {stats.draft_s:.2f}s ({stats.draft_s / gen:.0%}), verify {stats.verify_s:.2f}s "
                          f"({stats.verify_s / gen:.0%}), other {max(gen - busy, 0):.2f}s ({max(gen - busy, 0) / gen:.0%})")
    table.add_row("finish", finish or "unknown")
    return table


def wide_err() -> Console:
    """stderr, at least 200 columns wide when it is not a terminal (a log)."""
    return err if err.is_terminal else Console(stderr=True, highlight=False, width=max(err.width, 200))


def concurrency_table(result: dict) -> Table:
    """`bench --concurrency`'s rows: each proposer next to the target alone
    at the same number of clients."""
    m = result["machine"]
    temp = result["temperature"]
    where = f" (target on RPC servers {', '.join(result['rpc'])})" if result.get("rpc") else ""
    table = Table(title=f"spec-cli bench --concurrency: {result['target']}{where} / draft {result['draft'] or '-'} — "
                        f"{m['cpu']}, {m['cores']} cores, {result['prompts']} prompts, "
                        f"{result['max_tokens']} tokens, " + ("greedy" if temp == 0 else f"temperature {temp}")
                        + (", --deterministic (requests take turns)" if result["deterministic"] else "")
                        + ", " + (f"[bold]SIMULATED clock {result['clock']}[/] (a round: each of llama.cpp's "
                                  "passes over its rows at the profile's price, plus the drafting)"
                                  if result["simulated"] else "real clock"),
                  caption="C clients each send a prompt and the next when answered; tok/s: all tokens over the "
                          "run's seconds; vs none: over the target alone at the same C; latency: a request's "
                          "start to its last token; rows: target batch size per round; agree: requests with "
                          "the target alone's exact tokens (margin: the widest top-1 minus top-2 gap where one "
                          "parted)", caption_justify="left", title_justify="left")
    for name, just in (("C", "right"), ("proposer", "left"), ("tok/s", "right"), ("vs none", "right"),
                       ("latency med", "right"), ("worst", "right"), ("ttft med", "right"), ("rows", "right"),
                       ("accept", "right"), ("agree", "center")):
        table.add_column(name, justify=just)
    for r in result["rows"]:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.0%} ({r['accepted']}/{r['drafted']})"
        agree = f"{r['agree']}/{r['requests']}" + (f" ({r['max_divergence_margin']:.2f})"
                                                    if r["agree"] < r["requests"] else "")
        table.add_row(str(r["concurrency"]), r["proposer"], f"{r['tok_s']:.1f}",
                      "-" if r["vs_none"] is None else f"{r['vs_none']:.2f}x",
                      f"{r['latency_median_s']:.2f} s", f"{r['latency_max_s']:.2f} s",
                      f"{r['ttft_median_s']:.2f} s", f"{r['rows_per_round']:.1f}", acc, agree)
    return table


def bench_table(result: dict) -> Table:
    m = result["machine"]
    mode = result.get("mode", "default") + " numerics"
    if result.get("verify_cap"):
        mode += f" (verify batches <= {result['verify_cap']})"
    temp = result["temperature"]
    samp = f"temperature {temp}" + (f" top-k {result.get('top_k', 0)} top-p {result.get('top_p', 1.0)} "
                                    f"min-p {result.get('min_p', 0.0)}" if temp > 0 else " (greedy)")
    peer = result.get("peer")
    drafter = result["draft"] or ("its MTP layers" if result.get("mtp") else "-")
    where = f" (target on RPC servers {', '.join(result['rpc'])})" if result.get("rpc") else ""
    table = Table(title=f"spec-cli bench: {result['target']}{where} / draft {drafter} — "
                        f"{m['cpu']}, {m['cores']} cores, llama-cpp-python {m['llama_cpp_python']}, "
                        f"sampling {m.get('sampling', '?')}, "
                        f"{result['max_tokens']} tokens, {samp}, {mode}, "
                        f"rule {' & '.join(result.get('rules', ['gumbel']))}, "
                        + (f"[bold]SIMULATED clock {result['clock']}[/] (device times are the profile's; "
                           "the host's time, measured here, is charged on top)"
                           if result.get("simulated") else "real clock"),
                  caption="speedup: end to end (request to last token, prompt reading included) over the target "
                          "alone, median per prompt; gen: after the prompt was read; ceiling: share of the "
                          "oracle's gain; agree: prompts with the target alone's exact tokens (margin: the "
                          "widest top-1 minus top-2 logit gap where one parted); host ms: outside llama.cpp's "
                          "decode calls, per step (alone / this) and per drafted token"
                          + ("; vs peer: generation speed over llama-cpp-python's own loop, median per prompt "
                             "(on the peer's line: spec-cli's target alone over the peer)" if peer else ""),
                  caption_justify="left", title_justify="left")
    columns = (("prompts", "left"), ("proposer", "left"), ("speedup", "right"), ("min-max", "right"),
               ("gen", "right"), ("ceiling", "right"), ("tok/s", "right"), ("alone", "right"),
               ("ttft", "right"), ("accept", "right"), ("mean", "right"), ("per-pos", "left"),
               ("draft/verify/other", "right"), ("host ms", "right"), ("by source", "left"),
               ("agree", "center")) + ((("vs peer", "right"),) if peer else ())
    constrained = any("compiled" in s for s in result["sets"])
    if constrained:  # compiled of the set's constraints; answers that parse / validate; mask ms a token
        columns += (("valid", "right"), ("mask ms", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)
    for s in result["sets"]:
        table.add_row(*_bench_row(s, peer, constrained))
    for row in peer or ():
        cells = {"prompts": Path(row["file"]).name, "proposer": f"peer: {row['peer']}",
                 "tok/s": f"{row['peer_tokens_per_s']:.1f}", "alone": f"{row['tokens_per_s']:.1f}",
                 "vs peer": f"{row['vs_peer_median']:.2f}x"}
        table.add_row(*(cells.get(col, "") for col, _ in columns))
    return table


def _bench_row(s: dict, peer, constrained: bool) -> tuple[str, ...]:
    """One set's cells in bench_table."""
    sp = s["speedup_e2e_median"]
    if s["agreement"] is None:
        agree = "n/a"
    elif s["agreement"] == 1.0:
        agree = "[green]all[/]"
    else:
        agree = f"[yellow]{s['agreement']:.0%}[/] ({s['max_divergence_margin']:.2f})"
    share = "-" if s["ceiling_share"] is None else f"{s['ceiling_share']:.0%}"
    return (Path(s["file"]).name, s["proposer"],
            f"[{'green' if sp >= 1.0 else 'red'}]{sp:.2f}x[/]",
            f"{s['speedup_e2e_min']:.2f}-{s['speedup_e2e_max']:.2f}",
            f"{s['speedup_median']:.2f}x", share,
            f"{s['tokens_per_s']:.1f}", f"{s['baseline_tokens_per_s']:.1f}",
            f"{s['ttft_s']:.2f}s", f"{s['acceptance_rate']:.0%}", f"{s['mean_accepted']:.2f}",
            position_bars(s["per_position"]),
            f"{s['draft_share']:.0%}/{s['verify_share']:.0%}/{s['overhead_share']:.1%}",
            f"{s.get('baseline_host_ms_per_step', 0):.2f}/{s.get('host_ms_per_step', 0):.2f}/"
            f"{s.get('host_ms_per_drafted', 0):.2f}",
            source_cell(s.get("by_source", {})), agree,
            *((f"{s.get('vs_peer_median', 0):.2f}x",) if peer else ()),
            *((validity_cell(s), f"{s.get('mask_ms_per_token', 0):.3f}") if constrained else ()))


def validity_cell(s: dict) -> str:
    """compiled/items, parsed/answers, validated/answers of a constrained set."""
    if "compiled" not in s:
        return "-"
    items = s["compiled"] + len(s.get("refused", []))
    n = s.get("constrained", 0)
    out = f"{s['compiled']}/{items} compiled"
    if n:
        ok = s["parses"] == n and s["validates"] == s["validated"]
        out += f", [{'green' if ok else 'red'}]{s['parses']}/{n} parse, {s['validates']}/{s['validated']} valid[/]"
    if s.get("cut"):
        out += f", {s['cut']} cut by -n"
    return out


def source_cell(by_source: dict) -> str:
    """origin acceptance mean-accepted, by share of drafting steps."""
    total = sum(v["steps"] for v in by_source.values()) or 1
    return " ".join(f"{o} {v['acceptance']:.0%}/{v['mean_accepted']:.1f}"
                    for o, v in sorted(by_source.items(), key=lambda kv: -kv[1]["steps"])
                    if v["steps"] / total >= 0.02)


def summary_line(stats: Stats, proposer: str, finish: str | None) -> str:
    parts = [f"{stats.tokens} tokens", f"{stats.tokens_per_s:.1f} tok/s", f"proposer {proposer}"]
    if stats.drafted:
        parts += [f"accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%})",
                  f"mean accepted {stats.mean_accepted:.2f}"]
    parts += [f"draft {stats.draft_s:.2f}s", f"verify {stats.verify_s:.2f}s",
              f"finish {finish or 'unknown'}"]
    return " | ".join(parts)


@contextlib.contextmanager
def spinner(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A one-line spinner on stderr; yields `say(description)`."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=err, transient=True, disable=not enabled) as progress:
        task = progress.add_task("bench", total=None)
        yield lambda text: progress.update(task, description=text)


@contextlib.contextmanager
def download_progress(enabled: bool = True) -> Iterator[Callable[[str], Callable[[int, int], None]]]:
    """Yields `make(name) -> callback(done, total)` drawing rich bars on stderr."""
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=False,
                        disable=not enabled)
    tasks: dict[str, int] = {}

    def make(name: str) -> Callable[[int, int], None]:
        def update(done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = progress.add_task(f"fetching {name}", total=total or None)
                progress.start()
            progress.update(tasks[name], completed=done, total=total or None)
        return update

    try:
        yield make
    finally:
        progress.stop()


def error(message: str, hint: str | None = None) -> None:
    text = Text()
    text.append("error: ", style="bold red")
    text.append(message)
    err.print(text, soft_wrap=True)
    if hint:
        err.print(Text(hint), soft_wrap=True)


def note(message: str) -> None:
    err.print(Text(message, style="dim"), soft_wrap=True)


def is_tty(stream=None) -> bool:
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
