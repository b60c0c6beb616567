"""`spec-cli serve`: one warm process for editors, chat clients and coding
agents -- the OpenAI API (/v1/chat/completions, /v1/completions,
/v1/responses, /v1/models), Anthropic's /v1/messages, Ollama's /api/*,
llama-server's /infill, /health -- on a pair loaded once."""

from __future__ import annotations

import signal
from typing import Annotated, Optional

import typer

from ..errors import SpecError
from ..run.config import PairConfig
from .common import (load, DEFAULT_TARGET, Ctx, Deterministic, Draft, DraftGpuLayers, DraftMax, DRAFT_MAX, Fixed,
                     GpuLayers, PMin, ProposerName, Quiet, Rule, Target, Threads, check_port, model_name, placement,
                     Rpc, TensorSplit)


Host = Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default; any other "
                                                "exposes the models to the network).")]
Port = Annotated[int, typer.Option("--port", min=0, max=65535,
                                   help="Port to listen on (llama.vim's and llama.vscode's default).")]
ApiKey = Annotated[Optional[str], typer.Option("--api-key", envvar="SPEC_CLI_API_KEY", show_envvar=True,
                                               help="Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY', "
                                                    "as Anthropic's clients send it) on every request but "
                                                    "/health and /api/version.")]
Queue = Annotated[int, typer.Option("--queue", min=0, help="Requests that may wait behind the running ones; "
                                                           "more are answered 503 with Retry-After.")]
Cors = Annotated[Optional[list[str]], typer.Option(
    "--cors", metavar="ORIGIN",
    help="A web page's origin (https://chat.example.com) allowed to call the server from a browser; "
         "repeat for more. Pages on loopback addresses are always allowed, others refused.")]
AllowHost = Annotated[Optional[list[str]], typer.Option(
    "--allow-host", metavar="NAME",
    help="A Host name to answer besides loopback ones (a local reverse proxy that passes its own); "
         "repeat for more. Others are refused, against DNS rebinding.")]
ReadTimeout = Annotated[float, typer.Option(
    "--read-timeout", min=0.1, metavar="SECONDS",
    help="Close a connection that sends no whole request head in this time; answer 408 to a body that "
         "stalls this long (or takes over a minute).")]
Parallel = Annotated[int, typer.Option(
    "--parallel", "-np", min=1, max=64, metavar="N",
    help="Requests generated at once, each in a KV sequence of its own, all in one target batch a step "
         "(each costs a --ctx of KV cache in each model).")]
RawSpecial = Annotated[bool, typer.Option(
    "--parse-special/--no-parse-special",
    help="Read special tokens' texts in a raw prompt (/completion, /v1/completions, Ollama's raw, batch "
         "completions) as the model's special tokens, as llama-server does, so an editor's own FIM template "
         "works; --no-parse-special reads them as plain text, for deployments that put untrusted text into "
         "raw prompts. Chat messages are always plain text.")]

ReasoningFormat = Annotated[str, typer.Option(
    "--reasoning-format", metavar="auto|none",
    help="A reasoning model's thinking (its template's <think> block, ...): 'auto' sends it apart "
         "(reasoning_content, Anthropic's thinking blocks, Responses' reasoning items, Ollama's thinking); "
         "'none' leaves it in the answer's text. A request's reasoning_format overrides it.")]
ReasoningBudget = Annotated[int, typer.Option(
    "--reasoning-budget", min=-1, metavar="N",
    help="Thinking tokens a reply may spend before its block is closed for it (the end marker forced, "
         "drafted for free); -1: no bound, 0: no thinking. A request's reasoning_budget_tokens "
         "(thinking_budget_tokens, Anthropic's thinking.budget_tokens) overrides it.")]


def serve(
    target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: ProposerName = "hybrid",
    host: Host = "127.0.0.1", port: Port = 8012, api_key: ApiKey = None, queue: Queue = 16, cors: Cors = None,
    allow_host: AllowHost = None, read_timeout: ReadTimeout = 10.0, parallel: Parallel = 4,
    draft_max: DraftMax = DRAFT_MAX, fixed_draft: Fixed = False, p_min: PMin = 0.0, ctx: Ctx = 4096,
    threads: Threads = 0,
    rpc: Rpc = None, tensor_split: TensorSplit = None, gpu_layers: GpuLayers = 0, draft_gpu_layers: DraftGpuLayers = 0,
    deterministic: Deterministic = False, rule: Rule = "gumbel", quiet: Quiet = False,
    parse_special: RawSpecial = True, reasoning_format: ReasoningFormat = "auto", reasoning_budget: ReasoningBudget = -1,
) -> None:
    """Serve the pair over HTTP: the OpenAI API (chat completions,
    completions, Responses) for chat clients, Codex CLI and the Agents SDK;
    Anthropic's Messages for Claude Code; Ollama's API for apps set up for
    Ollama; llama-server's /infill for llama.vim and llama.vscode.  Up to
    --parallel requests at once, every one's rows in one target batch a
    step, a bounded queue behind them; the KV caches and the drafts learned
    from earlier outputs carry over between requests.

    /v1/responses keeps the last 256 responses asked with 'store' (the
    default), each for 60 minutes, in this process's memory only, for
    previous_response_id and GET/DELETE /v1/responses/ID; a restart forgets
    them.

    \b
    Examples:
      spec-cli serve          # the chat page: http://127.0.0.1:8012/
      spec-cli serve -t qwen2.5-coder-7b --port 8080 --api-key "$KEY"
      spec-cli serve --port 11434   # where apps look for Ollama
    """
    create_app, ServeConfig, Worker = _server_parts()
    from ..core.reasoning import FORMATS
    from ..term import render

    if reasoning_format not in FORMATS:
        raise typer.BadParameter(f"must be auto or none, not {reasoning_format!r}", param_hint="--reasoning-format")

    _log_to_stderr(quiet)
    if not _loopback(host):
        render.note(f"warning: listening on {host}: anyone who can reach this machine can use the models"
                    + ("" if api_key else " (no --api-key set)"))
    check_port(host, port)
    # one sequence more than the slots, to move a slot's cache beside the busy ones
    # through (run/schedule.py: choose_slot); taking turns (--deterministic) needs none
    spare = parallel > 1 and not deterministic
    cfg = PairConfig(target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                     **placement(rpc, tensor_split), gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                     p_min=p_min, deterministic=deterministic, seqs=parallel + spare)
    name = model_name(target)
    # the worker's thread loads the pair: every llama.cpp call then comes from one
    # thread (a second thread's decodes get a second OpenMP team, whose threads
    # libgomp throttles once there are more than cores: docs/results.md, "Behind the code")
    worker = Worker(lambda: load(cfg, quiet=quiet, rule=rule),
                    ServeConfig(model=name, queue=queue, draft_max=draft_max, adaptive=not fixed_draft, rule=rule,
                                spare=spare, recount=threads == 0 and not deterministic, parse_special=parse_special,
                                reasoning_format=reasoning_format,
                                reasoning_budget=None if reasoning_budget < 0 else reasoning_budget))
    pair = worker.pair
    try:
        from ..serve.access import Access

        app = Access(create_app(worker, api_key=api_key, read_s=read_timeout), check_host=_loopback(host),
                     cors=tuple(cors or ()), hosts=tuple(allow_host or ()))
        server = _server(_config(app, host, port, quiet=quiet, read_timeout=read_timeout, queue=queue), worker)
        if not quiet:
            render.note(_banner(pair, name, proposer, host, port, parallel))
        server.run()
        if not quiet:
            render.note("stopped")
    finally:
        worker.close()
        pair.close()


def _server_parts():
    """The server's modules, or what to install where they are missing."""
    try:
        import uvicorn  # noqa: F401

        from ..serve.app import create_app
        from ..serve.worker import ServeConfig, Worker
    except ImportError as e:
        raise SpecError(f"spec-cli serve needs the server extra ({e.name} is not installed)",
                        hint="pip install 'spec-cli[serve]'  (or: pip install starlette uvicorn)") from None
    return create_app, ServeConfig, Worker


def _banner(pair, name: str, proposer: str, host: str, port: int, parallel: int) -> str:
    """What the server says once it listens: where, and what it runs."""
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    return (f"serving {name}" + (f", drafting with {pair.drafter}" if pair.drafter else "")
            + f", proposer {proposer}\n  chat page: {url}/   OpenAI API: {url}/v1   "
              f"llama.vim / llama.vscode: {url}/infill" + _parallel_line(pair, parallel) + "\n  Ctrl-C stops")


def _config(app, host: str, port: int, *, quiet: bool, read_timeout: float, queue: int):
    """uvicorn's settings for the app."""
    import uvicorn

    from ..serve.access import Protocol

    return uvicorn.Config(app, host=host, port=port, log_level="warning" if quiet else "info",
                          access_log=not quiet, timeout_graceful_shutdown=5, lifespan="off",
                          http=Protocol.with_timeout(read_timeout), timeout_keep_alive=5,
                          # connections at once: the running and waiting requests, editors' and
                          # health checks' beside them; more are answered 503 at once
                          limit_concurrency=max(64, 4 * (queue + 2)))


def _server(config, worker):
    """uvicorn's server; on SIGINT/SIGTERM the running generation ends at its
    next step and waiting requests are answered 503 before connections close."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            # as uvicorn's, but the signal is not raised again afterwards: a
            # server told to stop has done its job and exits 0
            worker.close(timeout=0)
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True  # a second Ctrl-C: do not wait for connections
            else:
                self.should_exit = True

    return Server(config)


def _parallel_line(pair, parallel: int) -> str:
    """How many requests run at once, and what their KV caches take."""
    from ..llama.facts import kv_bytes

    sizes = [kv_bytes(m) for m in (pair.target, pair.draft) if m is not None]
    n_seq = pair.target.n_seq
    kv = (f", {n_seq} KV sequences of {pair.target.n_ctx:,} tokens, {sum(sizes) * n_seq / 2**20:,.0f} MiB"
          + (" (one spare, to move a cache)" if n_seq > parallel else "") if sizes and None not in sizes else "")
    how = ("taking turns, a target batch each, so that each is bit-for-bit alone's (--deterministic)"
           if pair.target.deterministic else "in one target batch a step")
    return f"\n  up to {parallel} requests at once{kv}, {how}; /metrics and /slots tell how it goes"


def _log_to_stderr(quiet: bool) -> None:
    """The server's own lines (a client that left, a refused origin, a bug's
    traceback) on stderr beside uvicorn's, one line each."""
    import logging
    import sys

    log = logging.getLogger("spec_cli.serve")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    log.propagate = False


def _loopback(host: str) -> bool:
    from ..serve.access import is_loopback

    return is_loopback(host)
