"""Who goes in a round of run/batch.py, and with what: pure functions of
the requests' plain state (a request is anything with the fields of
batch.Stream used here and a `limit()`: the longest draft it may verify
now), and a price, `price(n)`, the seconds of one pass of n rows.  No model
is touched here, so every rule is unit-tested with fake requests.

  * prompt chunks (`reading_parts`): a request that has just arrived reads
    its prompt a chunk a round, beside the others' rows, so that a long
    prompt does not hold up their tokens; an editor's all that fits; a
    chunk's passes a whole number of tiles (`aligned`);
  * editors' pace (`editors_behind`, `editors_allow`, `pace`): an editor's
    request (/infill) whose rounds have taken more than EDITOR_PACE times
    what they would have cost it alone gets rounds of editors only until it
    is back within, and beside a running editor the others' prompts are
    read only as far as that pace's slack allows; where a pass of two rows
    costs nearly two of one (`editors_alone`), an editor has the rounds to
    itself from its first;
  * fairness (`limits`, `fair`): a request that fell behind what it would
    have got with no request drafting has the requests ahead of it draft
    nothing until it is back within FAIR_SHARE;
  * compaction (`next_move`): the sequences of the running requests kept
    without gaps, so that llama.cpp runs them in one pass over the weights;
  * a slot for a new request (`choose_slot`): the cache that holds most of
    its prompt, in a place that keeps the busy sequences together.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..core.batching import passes

CHUNK = 128  # prompt tokens read a round, over all the requests that are reading
# a request may fall this far behind what it would have got with no request
# drafting (a share of those tokens, and at least FAIR_TOKENS); then the
# requests ahead of it draft nothing until it is back within the bound
FAIR_SHARE = 0.1
FAIR_TOKENS = 4.0
# an editor's request (/infill) may take this many times the seconds its
# rounds would have taken alone; past it, rounds run editors only until it
# is back within (the others wait: an editor's latency comes first)
EDITOR_PACE = 1.25
STEEP = 1.6  # c(2)/c(1) from which an editor runs alone (editors_alone)
EDITOR_CHUNK = 16  # the least of another's prompt read beside a running editor (editors_allow)
# a pass over the weights of a multiple of this many rows takes llama.cpp's
# whole-tile kernels: one row fewer costs more (docs/results.md, "Prompt
# chunks a whole number of tiles")
ROW_QUANTUM = 16

Price = Callable[[int], float]


def editors_behind(running: Sequence) -> bool:
    """Has a running editor fallen behind its pace alone?  (Then the round
    is the editors' only.)"""
    return any(s.editor and s.spent_s > EDITOR_PACE * s.alone_s for s in running)


def editors_alone(streams: Sequence, price: Price | None) -> bool:
    """Does an editor, running or reading its prompt, have the rounds to
    itself from the start?  Where a pass of two rows costs STEEP times one
    or more (a compute-bound CPU: c(2) 1.79-2.00 c(1) on this project's AMD
    VMs, against 1.46 on its Intel ones), sharing a round would make every
    step of the editor's nearly twice as dear, and pacing would only catch
    it after the fact; the others wait the few steps an editor's completion
    takes (a reader does not see 100 ms; a typist sees every one)."""
    if price is None or not any(s.editor for s in streams) or all(s.editor for s in streams):
        return False
    return price(2) >= STEEP * price(1)


def reading_parts(streams: Sequence, *, chunk: int, n_batch: int, price: Price | None) -> list[tuple[object, list]]:
    """This round's prompt chunks, (request, tokens): at most `chunk`
    tokens while others run (their tokens wait for the batch), as many as
    a batch holds while none does.  An editor reads as much as the batch
    holds beside the others' rows (editors come first in `streams`), and
    the others' chunks wait for an editor's; beside a running editor the
    others read no more than its pace allows (editors_allow)."""
    if not any(s.reading for s in streams):
        return []  # most rounds: the rest is a limit() a request and the editors' slack, for nothing
    budget = chunk if any(not s.reading for s in streams) else n_batch
    room = n_batch - sum(s.limit() + 1 for s in streams if not s.reading)
    parts = []
    editors = any(s.reading and s.editor for s in streams)
    allow = editors_allow(streams, chunk=chunk, price=price)
    for s in streams:
        if s.reading and budget > 0 and (s.editor or not editors):
            take = s.unread[:max(budget, room) if s.editor else min(budget, allow)]
            if not take:
                break
            parts.append((s, take))
            budget -= len(take)
            room -= len(take)
            allow -= 0 if s.editor else len(take)
    if parts and not parts[-1][0].editor and allow == float("inf") and any(not s.reading for s in streams):
        return aligned(parts, streams, room + len(parts[-1][1]))
    return parts


def aligned(parts: list, streams: Sequence, most: int) -> list:
    """`parts` with the last chunk made a few tokens longer or shorter
    (fewer than ROW_QUANTUM) so that every pass llama.cpp makes over the
    round's rows, the running requests taken at one row each, is a whole
    number of ROW_QUANTUM rows where it is more than one: beside running
    requests a chunk of 128 shares one row with their pass and reads 127
    in its own.  A chunk that ends its prompt stays as it is; none is made
    longer than `most` (what the batch holds beside the running requests'
    longest drafts and the other chunks)."""
    s, take = parts[-1]
    if len(take) == len(s.unread):
        return parts
    base = [(o.seq, 1) for o in streams if not o.reading] + [(o.seq, len(t)) for o, t in parts[:-1]]
    for d in sorted(range(1 - ROW_QUANTUM, ROW_QUANTUM), key=lambda d: (abs(d), -d)):
        n = len(take) + d
        if 1 <= n <= min(len(s.unread), most) and all(
                p % ROW_QUANTUM == 0 for p in passes(base + [(s.seq, n)]) if p > ROW_QUANTUM):
            return parts[:-1] + [(s, s.unread[:n])]
    return parts


def editors_allow(streams: Sequence, *, chunk: int, price: Price | None) -> float:
    """The others' prompt tokens a round may read beside the running
    editors: what fits in the slack of their pace (EDITOR_PACE times their
    seconds alone, less what they spent), read once it makes a chunk of
    EDITOR_CHUNK at least (docs/results.md has what a chunk costs an editor
    on a CPU).  No bound where no editor runs, or nothing is priced yet."""
    editors = [s for s in streams if s.editor and not s.reading]
    if not editors or price is None:
        return float("inf")
    slack = min(EDITOR_PACE * s.alone_s - s.spent_s for s in editors)
    rows = sum(not s.reading for s in streams)
    lo, hi = 0, chunk  # the most tokens whose rows fit in the slack (c is increasing)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if price(rows + mid) - price(rows) <= slack else (lo, mid - 1)
    return lo if lo >= min(EDITOR_CHUNK, chunk) else 0


def limits(running: Sequence, reading: Sequence[tuple[object, list]], n_batch: int | None = None) -> list[int]:
    """Each running request's longest draft this round: its own limit, but
    nothing while another has fallen behind (FAIR_SHARE: the others wait)
    or while an editor reads its prompt (its longest round: the others'
    drafts' rows would lengthen it); and where every one drafting its
    longest would not fit one batch of `n_batch` rows beside the prompt
    chunks, each at most an equal share of what is left."""
    behind = [s for s in running if s.owed - s.got > max(FAIR_TOKENS, FAIR_SHARE * s.owed)]
    editor_reads = any(s.editor for s, _ in reading)
    out = [0 if (behind and s not in behind) or (editor_reads and not s.editor) else s.limit()
           for s in running]
    if n_batch is not None and running:
        room = n_batch - sum(len(tokens) for _, tokens in reading) - len(running)  # each one's own row
        if sum(out) > room:
            out = [min(k, max(0, room // len(running))) for k in out]
    return out


def pace(ran: Sequence[tuple[object, int, float]], reading: Sequence, charged_s: float,
         price: Price | None) -> None:
    """Count each editor's seconds in a round against what the round would
    have cost it alone, EDITOR_PACE keeping the first within a share of the
    second.  `ran`: (request, its draft's tokens, its drafting seconds) for
    the running ones; `reading`: the requests that read a chunk (an editor
    reads its prompt in one batch, as alone: the others' rows beside it are
    few); `charged_s`: the round's seconds."""
    alone = len(ran) == 1 and not reading
    for s, n, draft_s in ran:
        if s.editor:
            s.spent_s += charged_s
            s.alone_s += charged_s if alone or price is None else price(n + 1) + draft_s
    for s in reading:
        if s.editor:
            s.spent_s += charged_s
            s.alone_s += charged_s


def fair(got: Sequence[tuple[object, int]], seconds: float, reading: Sequence[tuple[int, int]],
         price: Price | None) -> None:
    """Count what each request got in a round of `seconds`, (request,
    tokens), against what it would have got in the same seconds had no
    request drafted: a round of one row each (and the same prompt chunks,
    (sequence, tokens)), as `price` has it."""
    if len(got) < 2 or price is None:
        return
    plain_s = sum(price(n) for n in passes([(s.seq, 1) for s, _ in got] + list(reading)))
    if plain_s <= 0:
        return
    for s, n in got:
        s.owed += seconds / plain_s
        s.got += n


def next_move(seqs: Sequence[int], free: set[int]) -> tuple[int, int] | None:
    """The next step in closing the gaps between the running requests'
    sequences (a request that ended before the others leaves one, and
    llama.cpp runs only sequences that follow each other in one pass): the
    highest moves to the lowest free one between them; None where there
    is no gap."""
    if len(seqs) < 2:
        return None
    lo, hi = min(seqs), max(seqs)
    holes = [f for f in free if lo < f < hi]
    return (hi, min(holes)) if holes else None


SIMILAR = 0.5  # a slot is reused for a prompt it holds this share of (serve's Worker._slot_for)


def choose_slot(free: list[int], busy: list[int], held: dict[int, int], used: dict[int, int],
                n_tokens: int, *, filling: bool = False) -> tuple[int, int | None]:
    """Where a prompt of `n_tokens` runs: (slot, the slot whose cache it takes
    first, or None).  `held`: how much of the prompt each free slot's cache
    holds as a prefix; `used`: when each slot last took a request.

    The cache to reuse: the free slot's that holds most of the prompt, where
    that is at least SIMILAR of it (a chat's next turn, the same file again:
    llama-server's slot_prompt_similarity, 0.5), so that a request that
    only shares a chat template's first tokens with a slot does not evict
    what that slot holds.  The place: the free slot that keeps the busy
    ones in the fewest runs of consecutive slots, then closest together,
    then the least recently used: llama.cpp runs only sequences that follow
    each other in one pass over the weights (each a KV cache of its own;
    llama_batch_allocr::split_equal), so 4 rows in sequences 0,2,5,7 are
    four passes (docs/results.md, "Behind the code").  Where the slot holding
    the prefix would split the busy ones further, the two slots' caches
    change places (Pair.swap_seq, through a spare sequence: buffer copies,
    no prompt read again, no cache lost), unless the requests waiting will
    fill every slot (`filling`; the busy ones are all together then) or
    there is no spare (also `filling`)."""
    def apart(seq: int) -> tuple[int, int]:  # (runs of consecutive busy slots, span) with seq busy too
        ids = sorted(busy + [seq])
        return 1 + sum(b != a + 1 for a, b in zip(ids, ids[1:])), ids[-1] - ids[0]

    place = min(free, key=lambda seq: (apart(seq), used.get(seq, 0)))
    best = max(free, key=lambda seq: (held[seq], apart(seq) == apart(place), -used.get(seq, 0)))
    if held[best] < SIMILAR * n_tokens or held[best] <= held[place]:
        return place, None
    if filling or apart(best)[0] <= apart(place)[0]:
        return best, None
    return place, best
