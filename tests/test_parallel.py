"""Many requests at once, for real: several sequences in one llama.cpp
context, every running request's rows in one target batch a round
(run/batch.py), in process and through `spec-cli serve --parallel`.

By default a request's text is the target alone's up to rounding: a batch
of another shape may round a logit differently, and the coupled rule's
choice moves only at a near-tie, so wherever a request parts from the
target alone the target's top-1 minus top-2 margin there must be within
bench's NEAR_TIE.  With --deterministic the requests take turns and each
text is bit for bit `generate --deterministic`'s (test_serve.py)."""

import http.client
import os
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from test_serve import Server, read_stream, serving, stream_long

PROMPTS = ["def fibonacci(n):", "The capital of France is", "A list of fruits:\n1.", "import numpy as np\n",
           "Once upon a time, in a small village,"]


@pytest.fixture(scope="module")
def pair(smollm_path):
    from spec_cli.run.config import PairConfig
    from spec_cli.run.runner import load_pair

    # the draft model loaded whatever this machine's remembered costs say of it
    p = load_pair(PairConfig(target=str(smollm_path), draft=str(smollm_path), proposer="hybrid", ctx=1024,
                             seqs=4, draft_if_it_pays=False))
    yield p
    p.close()


def _alone(pair, tokens, cfg):
    from spec_cli.run.session import Session
    import dataclasses

    pair.use(0)
    pair.reset()
    ref = dataclasses.replace(cfg, adaptive=False, draft_max=0, margins=True)
    return Session(pair, tokens, ref, pair.new_proposer(name="none")).run()


def _fresh_batch(pair, **kw):
    """A Batch on `pair` (with Batch's keywords), every sequence emptied first."""
    from spec_cli.run.batch import Batch

    for seq in range(pair.target.n_seq):
        pair.use(seq)
        pair.reset()
    return Batch(pair, **kw)


def _cpu_like(pair, chunk=128, **profile):
    """A simulated clock of a CPU's shape, where every row costs half a
    token's time (a shared batch of four rows is 2.5 times one row), and a
    Batch on it with every sequence of `pair` emptied."""
    from spec_cli.run.clock import Clock

    clock = Clock.parametric("cpu-like", **{**dict(c1_ms=50, slope=0.5, knee=16, slope_after=0.5,
                                                   prefill_ms_per_token=10, draft_ratio=0.3), **profile})
    return clock, _fresh_batch(pair, clock=clock, chunk=chunk)


@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_requests_in_one_batch_each_get_the_text_alone_gets(pair, temp):
    """Four requests drafting 4 tokens every round with the draft model
    (drafted together) and the lookup, two joining later (continuous
    batching), one more when one leaves: each request's tokens are the
    target alone's for its seed, or part from them at a near-tie."""
    from spec_cli.core.sampling import SamplingConfig
    from spec_cli.run.bench import NEAR_TIE, Run, divergence
    from spec_cli.run.engine import GenConfig, Generation

    vocab = pair.target.vocab
    prompts = [vocab.tokenize(p, add_special=True, parse_special=False) for p in PROMPTS]
    cfgs = [GenConfig(sampling=SamplingConfig(temperature=temp), max_tokens=40, seed=100 + i, adaptive=False,
                      draft_max=4) for i in range(len(prompts))]
    refs = [_alone(pair, t, c) for t, c in zip(prompts, cfgs)]
    batch = _fresh_batch(pair)
    out, pending, free = {}, list(range(len(prompts))), list(range(pair.target.n_seq))
    widest = drafted_together = 0
    rounds = 0
    while pending or len(batch):
        # two at first, two more after three rounds, the fifth when a sequence is free
        while pending and free and (rounds >= 3 or len(batch) < 2):
            i = pending.pop(0)
            seq = free.pop(0)
            out[batch.add(seq, Generation(pair.target, pair.new_proposer(), prompts[i], cfgs[i]))] = (i, seq, [])
        steps = batch.round()
        rounds += 1
        widest = max(widest, batch.last_rows)
        drafted_together = max(drafted_together, sum(st.drafted > 0 for _, st in steps))
        for stream, st in steps:
            out[stream][2].extend(st.tokens)
            if st.finish_reason is not None:
                batch.drop(stream)
                free.append(out[stream][1])
    assert widest > 5 and drafted_together >= 2, "the requests did not share a batch with drafts"
    for i, seq, tokens in out.values():
        m = divergence(Run(refs[i].tokens, margins=refs[i].margins), Run(tokens))
        assert m is None or m <= NEAR_TIE, f"request {i} parts from the target alone at a margin of {m}"


def test_fixed_length_drafts_are_drafted_in_shared_rounds_on_a_priced_clock(pair):
    """A fixed draft length (--fixed, bench's draft@K: no policy) is what was
    asked for: the batch's plan trimming (policy.trim_drafts, for drafts a
    policy chose) leaves it as it is, where rounds have a price."""
    from spec_cli.run.clock import load_clock
    from spec_cli.run.engine import GenConfig, Generation

    clock = load_clock("gpu-70b")
    batch = _fresh_batch(pair, clock=clock)
    text = "one two three four five six seven eight nine ten " * 6
    for seq in range(3):
        tokens = pair.target.vocab.tokenize(text, add_special=True, parse_special=False)
        cfg = GenConfig(max_tokens=24, seed=seq, adaptive=False, draft_max=4, clock=clock)
        batch.add(seq, Generation(pair.target, pair.new_proposer(name="ngram"), tokens, cfg))
    together = 0
    while len(batch):
        steps = batch.round()
        together = max(together, sum(st.drafted > 0 for _, st in steps))
        for s, st in steps:
            if st.finish_reason is not None:
                batch.drop(s)
    assert together >= 2


def test_a_draft_model_reads_new_prompts_beside_the_target_and_drafts_in_shared_rounds(pair):
    """Requests that arrive together read their prompts in shared rounds; the
    draft model reads them beside the target (Batch._follow), so each drafts
    with it from its first round, not only once it runs alone (a catch-up
    every request would wait for is not made in a shared round)."""
    from spec_cli.run.clock import load_clock
    from spec_cli.run.engine import GenConfig, Generation

    clock = load_clock("gpu-70b")
    batch = _fresh_batch(pair, clock=clock, chunk=8)  # prompts of 9-16 tokens: two rounds of reading
    for seq, text in enumerate(PROMPTS[:3]):
        tokens = pair.target.vocab.tokenize(text * 2, add_special=True, parse_special=False)
        cfg = GenConfig(max_tokens=12, seed=seq, adaptive=False, draft_max=2, clock=clock)
        batch.add(seq, Generation(pair.target, pair.new_proposer(name="draft"), tokens, cfg))
    shared = []
    while len(batch):
        steps = batch.round()
        if len(steps) > 1:
            shared.append([st.drafted for _, st in steps])
        for s, st in steps:
            if st.finish_reason is not None:
                batch.drop(s)
    assert shared and all(all(n > 0 for n in r) for r in shared), shared


def test_a_draft_model_that_would_not_draft_at_the_batchs_size_does_not_read_its_prompts(pair):
    """On a CPU-like clock (each row half a token's price) a draft model that
    would pay for one request alone would not beside three others, so it
    reads none of four new prompts: every request would wait for that
    reading, for nothing (on a 2-core CPU eight prompts' reading stalled an
    8-client burst for 6 s)."""
    from spec_cli.run.engine import GenConfig, Generation

    clock, batch = _cpu_like(pair, chunk=8, c1_ms=40, prefill_ms_per_token=5, draft_ratio=0.1)
    for seq, text in enumerate(PROMPTS[:4]):
        tokens = pair.target.vocab.tokenize(text * 3, add_special=True, parse_special=False)
        g = Generation(pair.target, pair.new_proposer(name="draft", clock=clock), tokens,
                       GenConfig(max_tokens=12, seed=seq, clock=clock))
        assert g.policy.could_pay(g.proposer.name)  # alone it would draft
        batch.add(seq, g)
    while len(batch) == 4:
        steps = batch.round()
        for s, st in steps:
            if st.finish_reason is not None:
                batch.drop(s)
        read = []
        for seq in range(4):
            pair.draft.use(seq)
            read.append(len(pair.draft.tokens))
        assert read == [0, 0, 0, 0]


def test_a_drafting_request_is_not_charged_the_seconds_of_a_prompt_read_beside_it(pair):
    """A request drafting with a draft model in a round that also reads
    another request's 128-token prompt chunk, on the gpu-70b clock: what
    its policy learns of the round (the safeguard's seconds for the step)
    is its own rows' share, about a step alone, not the chunk's seconds
    (which made the safeguard stop drafting for good in a burst)."""
    from spec_cli.core.source import Source
    from spec_cli.run.clock import load_clock
    from spec_cli.run.engine import GenConfig, Generation

    clock = load_clock("gpu-70b")
    batch = _fresh_batch(pair, clock=clock)
    vocab = pair.target.vocab
    first = batch.add(0, Generation(pair.target, pair.new_proposer(name="draft", clock=clock),
                                    vocab.tokenize(PROMPTS[0], add_special=True, parse_special=False),
                                    GenConfig(max_tokens=48, seed=1, clock=clock)))
    long = vocab.tokenize(PROMPTS[4] + " the end of the story" * 60, add_special=True, parse_special=False)
    seen = []
    while len(batch):
        if len(batch) == 1 and not seen and first.gen.out.produced >= 4:
            batch.add(1, Generation(pair.target, pair.new_proposer(name="none"), long,
                                    GenConfig(max_tokens=2, seed=2, clock=clock)))
        reading = any(s.reading for s in batch.streams)
        for s, st in batch.round():
            if s is first and reading and st.drafted:
                step_s = first.gen.policy._steps[Source.of("draft").group][-1][1]
                seen.append((step_s, clock.verify_s(st.drafted + 1) + st.draft_s))
            if st.finish_reason is not None:
                batch.drop(s)
    assert seen, "no round drafted beside a prompt's chunk"
    for step_s, alone_s in seen:
        assert step_s < 1.5 * alone_s, (step_s, alone_s)


def test_an_editor_beside_chats_keeps_within_its_pace_alone(pair):
    """An /infill beside three chats, on a simulated clock where every row
    costs half a token's time (a CPU's shape: a shared batch of four rows
    is 2.5 times one row): rounds of the editor alone keep its seconds
    within EDITOR_PACE of what its rounds would have cost alone, and the
    chats go on to their ends."""
    from spec_cli.run.schedule import EDITOR_PACE
    from spec_cli.run.engine import GenConfig, Generation

    clock, batch = _cpu_like(pair)
    vocab = pair.target.vocab
    streams = {}
    for seq, (text, n, editor) in enumerate([(PROMPTS[1], 60, False), (PROMPTS[2], 60, False),
                                             (PROMPTS[4], 60, False), (PROMPTS[0], 24, True)]):
        cfg = GenConfig(max_tokens=n, seed=seq, clock=clock)
        tokens = vocab.tokenize(text, add_special=True, parse_special=False)
        streams[batch.add(seq, Generation(pair.target, pair.new_proposer(), tokens, cfg), editor=editor)] = []
    editor = next(s for s in streams if s.editor)
    alone_rounds = 0
    while len(batch):
        steps = batch.round()
        if [s for s, _ in steps] == [editor] and len(batch) > 1:
            alone_rounds += 1
        for s, st in steps:
            streams[s].extend(st.tokens)
            if st.finish_reason is not None:
                batch.drop(s)
    assert alone_rounds > 0 and len(streams[editor]) == 24
    assert editor.spent_s <= EDITOR_PACE * editor.alone_s + clock.verify_s(4 + 4 * 16)
    assert all(len(t) == 60 for s, t in streams.items() if not s.editor)


def test_an_editor_waits_neither_for_a_chats_prompt_nor_for_the_chats_drafts(pair):
    """On the CPU-like clock: the round in which an editor reads its prompt
    has no draft of the others' beside it, and a chat's long prompt that
    arrives while the editor runs is read only as far as the editor's pace
    allows (a 128-token chunk would cost it some sixty of its steps), then
    in full once it has ended."""
    from spec_cli.run.schedule import EDITOR_PACE
    from spec_cli.run.engine import GenConfig, Generation

    clock, batch = _cpu_like(pair)
    vocab = pair.target.vocab

    def add(seq, text, n, editor=False, proposer="ngram", **fixed):
        tokens = vocab.tokenize(text, add_special=True, parse_special=False)
        cfg = GenConfig(max_tokens=n, seed=seq, clock=clock, **fixed)
        return batch.add(seq, Generation(pair.target, pair.new_proposer(name=proposer), tokens, cfg), editor=editor)

    def run(until, rounds=200):
        for _ in range(rounds):
            if until():
                return
            for s, st in batch.round():
                if st.finish_reason is not None:
                    batch.drop(s)
        raise AssertionError("not within the rounds")

    chats = [add(seq, PROMPTS[seq + 1], 200, proposer="draft", adaptive=False, draft_max=4)  # 4 tokens a round
             for seq in (0, 1)]
    drafted = lambda s: batch.last_drafts.get(s, (0, 0.0))[0]  # noqa: E731  its draft's tokens in the last round
    run(lambda: any(drafted(s) for s in chats))
    editor = add(2, PROMPTS[0], 24, editor=True)
    batch.round()  # the editor reads its prompt
    assert not editor.reading and not any(drafted(s) for s in chats)
    long = add(3, PROMPTS[4] + " the end of the story" * 40, 8)
    run(lambda: editor not in batch.streams)
    assert long.reading  # 10 ms a token: the slack of 24 steps of 50 ms reads a few chunks at most
    assert editor.spent_s <= EDITOR_PACE * editor.alone_s + clock.verify_s(4 + 4 * 16)
    run(lambda: long not in batch.streams)
    assert long.gen.out.produced == 8


def test_a_request_that_ends_first_leaves_no_gap_the_others_keep_their_text(pair):
    """Batch.compact: when the request in sequence 1 of 0-2 ends, the one in
    sequence 2 moves into the gap (its caches copied), and every request
    still gets the text it gets alone (greedy)."""
    from spec_cli.core.batching import passes
    from spec_cli.run.engine import GenConfig, Generation

    vocab = pair.target.vocab
    prompts = [vocab.tokenize(p, add_special=True, parse_special=False) for p in PROMPTS[:3]]
    lengths = [40, 4, 40]
    refs = [_alone(pair, t, GenConfig(max_tokens=n, seed=1)).tokens for t, n in zip(prompts, lengths)]
    batch = _fresh_batch(pair)
    out = {batch.add(seq, Generation(pair.target, pair.new_proposer(), t, GenConfig(max_tokens=n, seed=1))): []
           for seq, (t, n) in enumerate(zip(prompts, lengths))}
    moved = []
    while len(batch):
        for s, st in batch.round():
            out[s].extend(st.tokens)
            if st.finish_reason is not None:
                batch.drop(s)
        busy = {s.seq for s in batch.streams}
        moved += batch.compact(seq for seq in range(pair.target.n_seq) if seq not in busy)
        assert len(passes([(s.seq, 1) for s in batch.streams])) <= 1
    assert moved == [(2, 1)]
    assert [out[s] for s in out] == refs


# -- the server ------------------------------------------------------------------

@pytest.fixture(scope="module")
def batched(smollm_path):
    """Default numerics, three requests at once."""
    yield from serving(smollm_path, "--parallel", "3", deterministic=False)


def _metrics(server) -> dict[str, float]:
    """/metrics read as Prometheus' text format, strictly: every sample's
    name was declared by a TYPE line before it; returns name{labels} -> value."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("content-type").startswith("text/plain; version=0.0.4")
    text = r.read().decode()
    typed, out = set(), {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? '
                        r'(-?[0-9.eE+-]+|\+Inf|NaN)$')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert kind in ("counter", "gauge", "histogram")
            typed.add(name)
        elif line.startswith("#") or not line:
            continue
        else:
            m = sample.match(line)
            assert m, f"not a sample line: {line!r}"
            base = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
            assert m.group(1) in typed or base in typed, f"{m.group(1)} has no TYPE line"
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def _total(metrics: dict, name: str) -> float:
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def test_requests_at_once_share_rounds_and_metrics_count_them(batched):
    before = _metrics(batched)

    def ask(prompt):
        return batched.post("/v1/completions", {"prompt": prompt, "max_tokens": 48, "temperature": 0})

    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(ask, PROMPTS[:3]))
    assert all(status == 200 for status, _, _ in replies)
    after = _metrics(batched)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    assert _total(d, "spec_cli_requests_total") == 3
    assert _total(d, "spec_cli_tokens_generated_total") == sum(r["usage"]["completion_tokens"] for _, r, _ in replies)
    rounds = _total(d, "spec_cli_rounds_total")
    # three requests of 48 tokens in far fewer rounds than 144 one-token steps: they shared batches
    assert 0 < rounds < sum(r["usage"]["completion_tokens"] for _, r, _ in replies)
    assert after["spec_cli_slots"] == 3 and after["spec_cli_slots_busy"] == 0
    assert after['spec_cli_round_seconds_bucket{le="+Inf"}'] == after["spec_cli_round_seconds_count"]


def test_a_client_that_leaves_mid_batch_frees_its_slot_and_the_others_go_on(batched):
    _, alone, _ = batched.post("/v1/completions", {"prompt": PROMPTS[4], "max_tokens": 200, "temperature": 0})
    staying = stream_long(batched, max_tokens=200, prompt=PROMPTS[4])
    leaving = stream_long(batched, max_tokens=1900, prompt=PROMPTS[0])
    busy = [s for s in batched.get("/slots")[1] if s["busy"]]
    assert len(busy) == 2 and {s["kind"] for s in busy} == {"completion"}
    leaving.sock.shutdown(socket.SHUT_RDWR)
    leaving.close()
    deadline = time.time() + 10
    while batched.get("/health")[1]["running"] > 1 and time.time() < deadline:
        time.sleep(0.05)
    text = read_stream(staying)  # the one left goes on to its end, alone in the batch now
    assert batched.get("/health")[1]["running"] == 0
    assert len(text) > 0 and text[:20] == alone["choices"][0]["text"][:20]
    slots = batched.get("/slots")[1]
    assert not any(s["busy"] for s in slots) and max(s["cached_tokens"] for s in slots) > 0


@pytest.fixture(scope="module")
def small_queue(smollm_path):
    srv = Server(smollm_path, dict(os.environ), "--parallel", "2", "--queue", "2")
    yield srv
    srv.stop()


def test_a_burst_past_the_queue_gets_503s_and_the_others_their_whole_text(small_queue):
    srv = small_queue
    body = {"prompt": "Once upon a time", "max_tokens": 256, "temperature": 0}  # long enough to overlap
    _, alone, _ = srv.post("/v1/completions", body)
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: srv.post("/v1/completions", body), range(8)))
    served = [r for s, r, _ in replies if s == 200]
    refused = [(r, h) for s, r, h in replies if s == 503]
    assert len(served) + len(refused) == 8 and len(served) >= 4 and refused
    assert all(r["choices"][0]["text"] == alone["choices"][0]["text"] for r in served)  # --deterministic
    assert all(r["error"]["type"] == "unavailable_error" and int(h["Retry-After"]) >= 1 for r, h in refused)
