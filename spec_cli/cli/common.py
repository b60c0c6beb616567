"""What the commands share: option types (typer `Annotated` aliases, as in
huggingface_hub's cli/_cli_utils.py), loading a pair with download progress,
and running a Session with the live view.

Heavy modules (llama_cpp, numpy, huggingface_hub) are imported inside the
functions so that `spec-cli --help` is instant.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, List, Optional

import typer

from ..core.config import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, SamplingConfig
from ..errors import SpecError
from ..run.config import DRAFT_MAX, PairConfig  # noqa: F401 (DRAFT_MAX: every command's --draft-max default)
from ..run.proposers.registry import cli_help as proposer_help

DEFAULT_TARGET = "qwen2.5-coder-1.5b"

# -- options shared by the commands that generate ---------------------------

Target = Annotated[str, typer.Option("--target", "-t", help="Target model: name, name:QUANT or .gguf path.")]
Draft = Annotated[Optional[str], typer.Option("--draft", "-d",
                                              help="Draft model (default: the target's suggested draft).")]
ProposerName = Annotated[str, typer.Option("--proposer", help=proposer_help())]
Fixed = Annotated[bool, typer.Option("--fixed-draft",
                                     help="Always draft --draft-max tokens (no cost model; for comparisons).")]
Temp = Annotated[float, typer.Option("--temp", min=0.0, help="Temperature; 0 is greedy.")]
TopK = Annotated[int, typer.Option("--top-k", min=0, help="Keep the k most likely tokens (0 = off). "
                                                          "The defaults are llama.cpp's; they apply at --temp > 0.")]
TopP = Annotated[float, typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1 = off).")]
MinP = Annotated[float, typer.Option("--min-p", min=0.0, max=1.0,
                                     help="Drop tokens below min_p x the top probability (0 = off).")]
RepeatPenalty = Annotated[float, typer.Option(
    "--repeat-penalty", min=0.0, max=10.0, help="Penalise tokens seen in the last --repeat-last-n tokens: "
                                                "divide their logits by this (1 = off; llama.cpp's penalty).")]
PresencePenalty = Annotated[float, typer.Option("--presence-penalty", min=-2.0, max=2.0,
                                                help="Subtract this from the logit of a token seen there (0 = off).")]
FrequencyPenalty = Annotated[float, typer.Option("--frequency-penalty", min=-2.0, max=2.0,
                                                 help="Subtract this x its count there (0 = off).")]
RepeatLastN = Annotated[int, typer.Option("--repeat-last-n", min=-1, help="The tokens the penalties look back "
                                                                          "over (-1 = the whole context).")]
Seed = Annotated[Optional[int], typer.Option("--seed", help="Random seed: it fixes the text, whatever was "
                                                            "drafted (default: a fresh one, reported with --json).")]
DraftMax = Annotated[int, typer.Option("--draft-max", min=0, help="Most tokens drafted per step (the cost "
                                                                   "model drafts fewer where that pays; "
                                                                   "--fixed-draft drafts this many).")]
PMin = Annotated[float, typer.Option("--p-min", min=0.0, max=1.0,
                                     help="Stop drafting when the draft's top probability falls below this.")]
Ctx = Annotated[int, typer.Option("--ctx", min=64, help="Context size in tokens, for both models.")]
Threads = Annotated[int, typer.Option("--threads", min=0, help="CPU threads (0 = the cores other programs leave free).")]
GpuLayers = Annotated[int, typer.Option("--gpu-layers", help="Target layers on the GPU (-1 = all).")]
DraftGpuLayers = Annotated[int, typer.Option("--draft-gpu-layers", help="Draft layers on the GPU (-1 = all).")]
Deterministic = Annotated[bool, typer.Option(
    "--deterministic",
    help="Bit-for-bit the target alone's output: llama.cpp's batch-invariant settings and verification "
         "batches capped where their logits equal one-token decodes (less speculation, none to speak of "
         "on a GPU). Default: llama.cpp's fast kernels; the acceptance rule is exact and the output is "
         "the target's up to floating-point rounding, as in every engine.")]
Rule = Annotated[str, typer.Option(
    "--rule", help="gumbel: each token is fixed by the seed and the target alone, whatever was drafted | "
                   "residual: the classic rule (higher acceptance for a sampled draft; the text then "
                   "depends on the drafts). Both sample the target's distribution exactly.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Nothing on stderr but errors.")]
Parallel = Annotated[int, typer.Option(
    "--parallel", "-np", min=1, max=64, metavar="N",
    help="Requests generated at once, each in a KV sequence of its own, all in one target batch a step "
         "(each costs a --ctx of KV cache in each model).")]
System = Annotated[Optional[str], typer.Option("--system", help="System message (chat template only).")]
Raw = Annotated[bool, typer.Option("--raw", help="No chat template: continue the prompt text as is.")]
Stops = Annotated[List[str], typer.Option("--stop", help="Stop at this string (repeatable).")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of streaming text.")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Most tokens to generate.")]
JsonSchema = Annotated[Optional[Path], typer.Option(
    "--json-schema", metavar="FILE", help="Constrain the output to this JSON schema (every token the target's "
                                          "choice among those the schema allows).")]
Grammar = Annotated[Optional[Path], typer.Option(
    "--grammar", metavar="FILE", help="Constrain the output to this grammar (llama.cpp's GBNF, or Lark).")]
JsonObject = Annotated[bool, typer.Option("--json-object", help="Constrain the output to a JSON object "
                                                                "(any keys; --json-schema to name them).")]
Rpc = Annotated[Optional[str], typer.Option(
    "--rpc", envvar="SPEC_CLI_RPC", show_envvar=True, metavar="HOST:PORT,...",
    help="Spread the target's layers over llama.cpp RPC servers (spec-cli rpc-server on each machine); "
         "the draft model, MTP block and lookup stay here.")]
TensorSplit = Annotated[Optional[str], typer.Option(
    "--tensor-split", metavar="W,W,...", help="With --rpc: each server's share of the layers, e.g. 3,1 "
                                               "(default: by each one's free memory).")]


def model_name(target: str) -> str:
    """The name responses carry for `target`: a registry name as given, a
    .gguf path as its file name without the extension."""
    import os
    return os.path.basename(target)[:-5] if target.endswith(".gguf") else target


def placement(rpc: str | None, tensor_split: str | None) -> dict:
    """--rpc and --tensor-split as PairConfig fields, checked before
    anything loads (the servers themselves are greeted at load)."""
    from ..llama.rpc import parse

    endpoints = parse(rpc)
    split: tuple[float, ...] = ()
    if tensor_split:
        if not endpoints:
            raise SpecError("--tensor-split weighs the --rpc servers: give --rpc too")
        try:
            split = tuple(float(x) for x in tensor_split.split(","))
        except ValueError:
            split = ()
        if len(split) != len(endpoints) or min(split) < 0 or sum(split) <= 0:
            raise SpecError(f"bad --tensor-split {tensor_split!r}",
                            hint=f"Give {len(endpoints)} non-negative weights, one per --rpc server, e.g. "
                                 + ",".join(["1"] * len(endpoints)) + ".")
    return {"rpc": endpoints, "tensor_split": split}


def load(cfg: PairConfig, *, quiet: bool, rule: str = "gumbel"):
    """Resolve (downloading with progress on stderr), load and check the
    pair; the acceptance `rule` the command will use is checked first."""
    from ..run.runner import load_pair
    from ..term import render

    check_rule(rule)
    if cfg.rpc:
        from ..llama import rpc

        rpc.require()  # before any download
        rpc.on_abort(lambda message: render.error(
            f"an RPC server stopped answering ({', '.join(rpc.unreachable(cfg.rpc) or cfg.rpc)}): llama.cpp "
            f"cannot go on without the layers it held" + (f" [{message.split(': ', 1)[-1]}]" if message else ""),
            "Check that server (restart spec-cli rpc-server there), then run the command again."))
    with render.download_progress(enabled=not quiet) as progress:
        pair = load_pair(cfg, progress=progress)
    for line in pair.notes if not quiet else ():
        render.note(line)
    return pair


def constraint_spec(json_schema: Path | None, grammar: Path | None, json_object: bool):
    """--json-schema, --grammar and --json-object as one core.constraint.Spec
    (or None), read and checked before anything loads."""
    from ..core.constraint import Spec

    given = [name for name, v in (("--json-schema", json_schema), ("--grammar", grammar),
                                  ("--json-object", json_object)) if v]
    if len(given) > 1:
        raise SpecError(f"give one constraint, not {' and '.join(given)}")
    if json_schema is not None:
        return Spec.json_schema(read_file(json_schema, what="JSON schema"), f"--json-schema {json_schema}")
    if grammar is not None:
        kind = "lark" if grammar.suffix == ".lark" else "gbnf"
        return Spec(kind, read_file(grammar, what="grammar"), f"--grammar {grammar}")
    return Spec("json_object", "", "--json-object") if json_object else None


def compile_constraint(pair, spec):
    """`spec` compiled against the loaded target's vocabulary (None: none)."""
    if spec is None:
        return None
    from ..llama.grammar import compile_for

    return compile_for(pair.target.vocab, spec)


def sampling(temp: float, top_k: int = DEFAULT_TOP_K, top_p: float = DEFAULT_TOP_P,
             min_p: float = DEFAULT_MIN_P) -> SamplingConfig:
    try:
        return SamplingConfig(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p)
    except ValueError as e:
        raise SpecError(str(e)) from e


def penalties(repeat: float = 1.0, presence: float = 0.0, frequency: float = 0.0, last_n: int = 64):
    """The penalty flags as core.adjust.Adjust, None where they are all off."""
    from ..core.adjust import Adjust

    try:
        a = Adjust(repeat=repeat, presence=presence, frequency=frequency, last_n=last_n)
    except ValueError as e:
        raise SpecError(f"--{str(e).replace('_', '-')}") from e
    return a if a.active else None


def seed_or_new(seed: int | None) -> int:
    import secrets
    return secrets.randbits(31) if seed is None else seed


def check_rule(rule: str) -> str:
    """The engine's own check, before anything is loaded."""
    from ..run.engine import check_rule as engine_check
    return engine_check(rule)


# -- the terminal ------------------------------------------------------------

@dataclass(frozen=True)
class Display:
    """Where things go, decided once: the live view on stderr (a terminal,
    not --quiet, not --json), and whether stdout is a terminal too (then
    the coloured text is printed at the end, as the live view showed it)."""

    live: bool
    stdout_tty: bool

    @classmethod
    def decide(cls, *, quiet: bool, as_json: bool = False) -> "Display":
        from ..term import render
        live = not (quiet or as_json) and render.is_tty(sys.stderr)
        return cls(live=live, stdout_tty=live and render.is_tty(sys.stdout))


def run_session(session, display: Display, *, label: str, sink: Callable[[str], None] | None = None,
                progress_total: int | None = None):
    """Run a Session, with the live view when `display.live`.  `sink(text)`
    receives text as it comes."""
    from ..term import render

    if not display.live:
        return session.run(lambda step, stats: sink(step.text) if sink and step.text else None)
    view = render.LiveView(proposer=label, show_text=progress_total is None, progress_total=progress_total)

    def on_step(step, stats):
        if sink is not None and step.text:
            sink(step.text)
        view.update(stats, step.segments, step.drafted)

    with view:
        return session.run(on_step)


def print_coloured(session, *, end: str = "") -> None:
    from rich.console import Console

    from ..term import render
    Console(highlight=False).print(render.coloured(session.segments or [(session.text, False)]), end=end)


def stdout_write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def read_file(path: Path, *, what: str = "prompt file", allow_empty: bool = False) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read {what} {path}: {e}") from e
    if not allow_empty and not text.strip():
        raise SpecError(f"the {what} {path} is empty")
    return text


def read_stdin() -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise SpecError("no prompt given", hint="Pass the prompt as an argument, or pipe it on stdin.")
    text = sys.stdin.read()
    if not text.strip():
        raise SpecError("the prompt on stdin is empty")
    return text


def check_port(host: str, port: int) -> None:
    """Say so before loading anything if the port is taken (serve, rpc-server)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise SpecError(f"cannot listen on {host}:{port}: {e.strerror}",
                            hint="Is another server running there? Pick another --port.") from None


# -- a reasoning model's thinking, apart from its answer ---------------------------------------

HideThinking = Annotated[bool, typer.Option(
    "--hide-thinking", help="Leave a reasoning model's thinking out (it is shown dimmed on stderr by default; "
                            "stdout and --output get the answer alone either way).")]


def thinking_plan(vocab, tokens: list[int], raw: bool):
    """How a chat prompt's reply is read for its thinking (serve.thinking.reading), else None."""
    from ..serve.thinking import reading

    return None if raw else reading(vocab, tokens)


class ThinkingView:
    """A reply's text as it comes, its thinking apart: the answer goes on
    to `sink` (stdout, a file), the thinking dimmed to stderr unless
    `hidden`.  `reasoning`, `answer` and `at` (where the answer starts in
    the whole text) are known once `finish` has run."""

    def __init__(self, plan, sink: Callable[[str], None] | None, *, hidden: bool):
        from ..core.reasoning import Split

        self.split = Split(plan.markers, plan.start)
        self.sink, self.hidden, self.shown = sink, hidden, False

    def __call__(self, text: str) -> None:
        self._out(*self.split.feed(text))

    def _out(self, thought: str, answer: str) -> None:
        if thought and not self.hidden and self.sink is not None:
            sys.stderr.write(f"\x1b[2m{thought}\x1b[0m" if sys.stderr.isatty() else thought)
            sys.stderr.flush()
            self.shown = True
        if answer and self.sink is not None:
            if self.shown:
                sys.stderr.write("\n\n")
                self.shown = False
            self.sink(answer)

    def finish(self, text: str) -> None:
        self._out(*self.split.finish())
        if self.shown:  # the thinking was the reply's last text
            sys.stderr.write("\n")
        self.reasoning, self.answer = self.split.reasoning, self.split.content
        self.at = text.rfind(self.answer) if self.answer else len(text)


def print_reply(session, thinking: "ThinkingView | None", *, end: str = "") -> None:
    """The reply coloured by origin at the end (a terminal's stdout): the
    thinking dimmed first, unless hidden, then the answer."""
    from rich.console import Console
    from rich.text import Text

    from ..term import render
    if thinking is None:
        return print_coloured(session, end=end)
    console = Console(highlight=False)
    if thinking.reasoning and not thinking.hidden:
        console.print(Text(thinking.reasoning, style="dim"), end="\n\n")
    segments, pos, cut = session.segments or [(session.text, False)], 0, []
    for piece, drafted in segments:
        if pos + len(piece) > thinking.at:
            cut.append((piece[max(0, thinking.at - pos):], drafted))
        pos += len(piece)
    console.print(render.coloured(cut), end=end)
