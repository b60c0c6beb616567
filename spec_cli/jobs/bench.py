"""`spec-cli bench --batch FILE`: a batch file timed end to end, as
`spec-cli batch` runs it (the same worker, the same requests), once with
the target alone (`none`) and once with each proposer, on one loaded pair,
one after the other, every run from empty KV caches and an empty store of
earlier outputs.  Reported: the run's seconds from the first request
handed over to the last answer, tokens a second in all, acceptance, and
how many answers are the same text as the target alone's."""

from __future__ import annotations

import dataclasses
import time

from ..run.bench import Variant
from ..serve.worker import ServeConfig, Worker
from .inputs import Item
from .run import Stop, run


def bench_batch(pair, items: list[Item], variants: list[Variant], cfg: ServeConfig, *,
                on_progress=lambda text: None) -> list[dict]:
    """One row per variant (adaptive, or at its fixed draft length), the
    target alone first."""
    rows, alone = [], None
    for v in [Variant("none"), *variants]:
        on_progress(f"{len(items)} requests, {v.label}")
        row, texts = _one(pair, items, dataclasses.replace(
            cfg, proposer=v.proposer, adaptive=v.fixed is None,
            draft_max=cfg.draft_max if v.fixed is None else v.fixed))
        row["proposer"] = v.label
        if alone is None:
            alone = texts
        row["vs_none"] = row["tok_s"] / rows[0]["tok_s"] if rows and rows[0]["tok_s"] else None
        row["same_text"] = sum(texts.get(cid) == text for cid, text in alone.items())
        rows.append(row)
    return rows


def _one(pair, items: list[Item], cfg: ServeConfig) -> tuple[dict, dict[str, str]]:
    for seq in range(pair.target.n_seq):  # nothing of the last run is reused
        pair.use(seq)
        pair.reset()
    worker = Worker(pair, cfg)
    answers = []
    t0 = time.perf_counter()
    try:
        run(worker, items, answers.append, stop=Stop())
        seconds = time.perf_counter() - t0
    finally:
        worker.close()
    ok = [a for a in answers if a.ok]
    tokens = sum(a.stats.tokens for a in ok)
    drafted, accepted = sum(a.stats.drafted for a in ok), sum(a.stats.accepted for a in ok)
    return ({"proposer": cfg.proposer, "requests": len(ok), "failed": len(answers) - len(ok), "tokens": tokens,
             "seconds": seconds, "tok_s": tokens / seconds if seconds > 0 else 0.0,
             "prompt_tokens": sum(a.stats.prefill_tokens for a in ok),
             "drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else None},
            {a.item.custom_id: a.text for a in ok})
