"""Everything that goes to the terminal's stderr: progress, summaries, errors.

stdout carries only generated text; this module never writes to it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from rich.console import Console

from .stats import Stats

err = Console(stderr=True, highlight=False)


@contextlib.contextmanager
def download_progress() -> Iterator[Callable[[str], Callable[[int, int], None]]]:
    """Yields `make(name) -> callback(done, total)` drawing rich bars on stderr."""
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), console=err, transient=False)
    tasks: dict[str, int] = {}

    def make(name: str) -> Callable[[int, int], None]:
        def update(done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = progress.add_task(f"fetching {name}", total=total)
                progress.start()
            progress.update(tasks[name], completed=done, total=total)
        return update

    try:
        yield make
    finally:
        progress.stop()


def summary_line(stats: Stats, proposer: str, finish: str | None) -> str:
    parts = [f"{stats.tokens} tokens", f"{stats.tokens_per_s:.1f} tok/s", f"proposer {proposer}"]
    if stats.drafted:
        parts += [f"accepted {stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%})",
                  f"mean accepted {stats.mean_accepted:.2f}"]
    parts += [f"draft {stats.draft_s:.2f}s", f"verify {stats.verify_s:.2f}s",
              f"finish {finish or 'unknown'}"]
    return " | ".join(parts)


def error(message: str, hint: str | None = None) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    if hint:
        err.print(hint, markup=False, soft_wrap=True)


def note(message: str) -> None:
    err.print(f"[dim]{message}[/]", soft_wrap=True)


def is_tty() -> bool:
    return sys.stderr.isatty()
