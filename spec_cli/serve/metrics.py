"""What `/metrics` says, in Prometheus' text format (version 0.0.4): the
server's counters since it started, and its gauges now.  The worker
thread counts; the event loop renders (a lock between them).  And what
`/slots` says (`slot_views`)."""

from __future__ import annotations

import threading
import time
from collections import Counter

from ..core.stats import origin

POSITIONS = 16                      # draft positions counted one by one (later ones in the last)
ROUND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # seconds


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.rejected = 0
        self.requests: Counter = Counter()      # (kind, finish)
        self.tokens = 0
        self.prompt_tokens = 0
        self.prompt_evaluated = 0
        self.drafted: Counter = Counter()       # origin -> tokens
        self.accepted: Counter = Counter()
        self.reached: list[int] = [0] * POSITIONS   # draft positions verified
        self.hit: list[int] = [0] * POSITIONS       # ...and accepted
        self.rounds = 0
        self.round_s = 0.0
        self.round_rows = 0
        self.round_hist = [0] * (len(ROUND_BUCKETS) + 1)
        self.wait_s = 0.0
        self.waits = 0

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.wait_s += seconds
            self.waits += 1

    def round(self, rows: int, seconds: float) -> None:
        with self._lock:
            self.rounds += 1
            self.round_s += seconds
            self.round_rows += rows
            self.round_hist[next((i for i, b in enumerate(ROUND_BUCKETS) if seconds <= b), len(ROUND_BUCKETS))] += 1

    def step(self, step) -> None:
        with self._lock:
            self.tokens += len(step.tokens)
            self.prompt_evaluated += step.prefill_tokens
            if step.drafted:
                where = origin(step.source)
                self.drafted[where] += step.drafted
                self.accepted[where] += step.accepted
                for i in range(min(step.drafted, step.accepted + 1)):
                    at = min(i, POSITIONS - 1)
                    self.reached[at] += 1
                    self.hit[at] += i < step.accepted

    def finished(self, session, kind: str) -> None:
        with self._lock:
            self.requests[(kind, session.finish or "unknown")] += 1
            self.prompt_tokens += len(session.prompt)
            self.tokens += session.stats.eog  # as usage counts them

    def render(self, *, queue: int, busy: int, slots: int, served: int) -> str:
        """The text /metrics answers."""
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, samples) -> None:
            out.append(f"# HELP spec_cli_{name} {help_}")
            out.append(f"# TYPE spec_cli_{name} {kind}")
            for labels, value in samples:
                lab = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
                out.append(f"spec_cli_{name}{{{lab}}} {_num(value)}" if lab else f"spec_cli_{name} {_num(value)}")

        with self._lock:
            metric("requests_total", "counter", "Requests finished, by endpoint kind and finish reason.",
                   [({"kind": k, "finish": f}, n) for (k, f), n in sorted(self.requests.items())] or [({}, 0)])
            metric("requests_rejected_total", "counter", "Requests answered 503 (the queue was full).",
                   [({}, self.rejected)])
            metric("requests_served_total", "counter", "Requests that left a slot (done, failed or cancelled).",
                   [({}, served)])
            metric("tokens_generated_total", "counter",
                   "Tokens generated (an end-of-generation token counted, as usage counts it).", [({}, self.tokens)])
            metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.", [({}, self.prompt_tokens)])
            metric("prompt_tokens_evaluated_total", "counter",
                   "Prompt tokens the target read (the rest came from a slot's KV cache).",
                   [({}, self.prompt_evaluated)])
            metric("draft_tokens_total", "counter", "Draft tokens verified, by what drafted them.",
                   [({"source": s}, n) for s, n in sorted(self.drafted.items())] or [({"source": "none"}, 0)])
            metric("draft_tokens_accepted_total", "counter", "Draft tokens accepted, by what drafted them.",
                   [({"source": s}, n) for s, n in sorted(self.accepted.items())] or [({"source": "none"}, 0)])
            metric("draft_position_reached_total", "counter",
                   f"Draft positions verified with every earlier one accepted (position {POSITIONS}: that and later).",
                   [({"position": i + 1}, n) for i, n in enumerate(self.reached)])
            metric("draft_position_accepted_total", "counter", "Of those, the positions accepted.",
                   [({"position": i + 1}, n) for i, n in enumerate(self.hit)])
            metric("rounds_total", "counter", "Target batches (every running request's rows in one).",
                   [({}, self.rounds)])
            metric("round_rows_total", "counter", "Rows in those batches (drafts, last tokens, prompt chunks).",
                   [({}, self.round_rows)])
            out.append("# HELP spec_cli_round_seconds Seconds a round took, drafting included.")
            out.append("# TYPE spec_cli_round_seconds histogram")
            acc = 0
            for b, n in zip(ROUND_BUCKETS, self.round_hist):
                acc += n
                out.append(f'spec_cli_round_seconds_bucket{{le="{b}"}} {acc}')
            out.append(f'spec_cli_round_seconds_bucket{{le="+Inf"}} {self.rounds}')
            out.append(f"spec_cli_round_seconds_sum {_num(self.round_s)}")
            out.append(f"spec_cli_round_seconds_count {self.rounds}")
            metric("queue_wait_seconds_total", "counter", "Seconds requests waited for a slot.",
                   [({}, self.wait_s)])
            metric("queue_waits_total", "counter", "Requests that took a slot.", [({}, self.waits)])
        metric("queue_depth", "gauge", "Requests waiting for a slot now.", [({}, queue)])
        metric("slots_busy", "gauge", "Slots running a request now.", [({}, busy)])
        metric("slots", "gauge", "Slots (--parallel).", [({}, slots)])
        return "\n".join(out) + "\n"


    def render_llamacpp(self, *, busy: int, waiting: int) -> str:
        """The metrics llama-server also exports, under its own names
        (`llamacpp:`), so that its dashboards read spec-cli unchanged."""
        with self._lock:
            counters = (("prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_evaluated),
                        ("tokens_predicted_total", "Number of generation tokens processed.", self.tokens),
                        ("n_decode_total", "Total number of llama_decode() calls.", self.rounds))
        out = []
        for kind, rows in (("counter", counters),
                           ("gauge", (("requests_processing", "Number of requests processing.", busy),
                                      ("requests_deferred", "Number of requests deferred.", waiting)))):
            for name, help_, value in rows:
                out += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}",
                        f"llamacpp:{name} {_num(value)}"]
        return "\n".join(out) + "\n"


def _num(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def slot_views(worker) -> list[dict]:
    """What /slots shows of `worker` (serve.worker.Worker): each slot, idle
    or running (a snapshot; the worker thread moves on meanwhile)."""
    t = worker.pair.target
    out = []
    for seq, r in enumerate(list(worker.slots)):
        view = {"id": seq, "busy": r is not None, "cached_tokens": len(t.held(seq))}
        if r is not None:
            st = r.session.stats
            view.update({"kind": r.job.req.kind, "stream": r.job.req.stream,
                         "prompt_tokens": len(r.session.prompt), "reading_prompt": r.stream.reading,
                         "generated_tokens": st.tokens, "drafted": st.drafted, "accepted": st.accepted,
                         "seconds": round(time.monotonic() - r.started, 3),
                         "max_tokens": r.session.gen.max_tokens})
        out.append(view)
    return out
