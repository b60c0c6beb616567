"""`spec-cli batch` on stderr: a progress bar (requests done of all,
tokens a second in all, acceptance, failures, time left) on a terminal,
one line a finished request elsewhere, and the summary table at the end."""

from __future__ import annotations

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from .render import err, is_tty


class BatchProgress:
    """`total` requests to run; nothing at all where `quiet`."""

    def __init__(self, total: int, *, quiet: bool):
        self.total, self.quiet = total, quiet
        self.done = 0
        self._bar: Progress | None = None
        if not quiet and is_tty(err.file):
            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                                 TextColumn("left"), TimeRemainingColumn(), console=err, transient=True)
            self._task = self._bar.add_task("drafting", total=total, rate="")

    def __enter__(self) -> "BatchProgress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, *, tokens_per_s: float, acceptance: float | None, failed: int) -> None:
        if self._bar is None:
            return
        rate = f"{tokens_per_s:6.1f} tok/s"
        if acceptance is not None:
            rate += f"  accepted {acceptance:4.0%}"
        if failed:
            rate += f"  [red]{failed} failed[/red]"
        self._bar.update(self._task, completed=self.done, rate=rate)

    def finished(self, line: str, *, ok: bool) -> None:
        """A request finished: the bar moves on; without a bar, `line` is
        printed (and a failure's always is)."""
        self.done += 1
        if self.quiet:
            return
        if self._bar is None:
            err.print(f"[{self.done}/{self.total}] {line}", markup=False, highlight=False)
        elif not ok:
            self._bar.console.print(line, markup=False, highlight=False, style="red")

    def say(self, message: str) -> None:
        if not self.quiet:
            (self._bar.console if self._bar is not None else err).print(message, markup=False, highlight=False)


def batch_table(s: dict) -> Table:
    """The summary of a batch run (the dict `spec-cli batch --json` prints)."""
    t = Table(title=f"spec-cli batch: {s['input']}", title_justify="left", show_header=False, box=None,
              pad_edge=False)
    t.add_column(style="dim")
    t.add_column(justify="right")
    answered = f"{s['answered']} of {s['to_run']}"
    if s["already_answered"]:
        answered += f" ({s['already_answered']} answered before)"
    rows = [("answered", answered)]
    if s["failed"]:
        rows.append(("failed", f"[red]{s['failed']}[/red] (their error lines say why)"
                     if s["mode"] != "folder" else f"[red]{s['failed']}[/red]"))
    if s["not_run"]:
        rows.append(("not run", f"{s['not_run']} (run the same command again for them)"))
    rows += [("tokens", f"{s['tokens']:,}"), ("time", f"{s['wall_s']:.1f} s"),
             ("tokens/s in all", f"{s['tokens_per_s']:.1f}"),
             ("parallel", f"{s['parallel']} requests, proposer {s['proposer']}")]
    if s["acceptance"] is not None:
        rows.append(("accepted", f"{s['acceptance']:.0%} of {s['drafted']:,} drafted"))
    rows.append(("peak memory", f"{s['peak_rss_mib']:,.0f} MiB"))
    if s["output"]:
        rows.append(("output", s["output"]))
    for name, value in rows:
        t.add_row(name, value)
    return t


def batch_bench_table(result: dict) -> Table:
    """`spec-cli bench --batch`: each proposer's run of the file beside the target alone's."""
    t = Table(title=f"{result['file']}: {result['requests']} requests, {result['parallel']} at once, "
                    f"{result['target']}" + (f" + {result['draft']}" if result["draft"] else ""),
              title_justify="left")
    for name in ("proposer", "answered", "tokens", "seconds", "tok/s in all", "vs none", "accepted",
                 "same text as none"):
        t.add_column(name, justify="left" if name == "proposer" else "right")
    n = result["requests"]
    for r in result["rows"]:
        t.add_row(r["proposer"], f"{r['requests']}" + (f" ({r['failed']} failed)" if r["failed"] else ""),
                  f"{r['tokens']:,}", f"{r['seconds']:.1f}", f"{r['tok_s']:.1f}",
                  "" if r["vs_none"] is None else f"{r['vs_none']:.2f}x",
                  "" if r["acceptance"] is None else f"{r['acceptance']:.0%}", f"{r['same_text']}/{n}")
    return t
