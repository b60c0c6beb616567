"""`spec-cli chat`: a conversation in the model's own chat template.  Each
turn evaluates only its new tokens: the target's and the draft's KV caches
carry the conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..run.config import PairConfig
from .common import FrequencyPenalty, PresencePenalty, RepeatLastN, RepeatPenalty, penalties
from .common import (DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, load, sampling, seed_or_new, DEFAULT_TARGET, Ctx,
                     Deterministic, Display, Draft, DraftGpuLayers, DraftMax, DRAFT_MAX, Fixed, GpuLayers, MinP, PMin,
                     ProposerName, Quiet, Rule, Seed, Target, Temp, Threads, TopK, TopP, run_session, stdout_write,
                     HideThinking, ThinkingView, print_reply, thinking_plan, placement, Rpc, TensorSplit, Grammar,
                     JsonObject, JsonSchema, compile_constraint, constraint_spec)

CHAT_HELP = "/reset  /stats  /save FILE  /exit  -- Ctrl-C stops a reply, Ctrl-D exits"


System = Annotated[Optional[str], typer.Option("--system", help="System message for the conversation.")]
ReplyTokens = Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Most tokens per reply.")]


def chat(
    target: Target = DEFAULT_TARGET, draft: Draft = None, proposer: ProposerName = "hybrid",
    system: System = None,
    temp: Temp = 0.0, top_k: TopK = DEFAULT_TOP_K, top_p: TopP = DEFAULT_TOP_P, min_p: MinP = DEFAULT_MIN_P, seed: Seed = None,
    repeat_penalty: RepeatPenalty = 1.0, presence_penalty: PresencePenalty = 0.0,
    frequency_penalty: FrequencyPenalty = 0.0, repeat_last_n: RepeatLastN = 64,
    max_tokens: ReplyTokens = 1024, draft_max: DraftMax = DRAFT_MAX, fixed_draft: Fixed = False, p_min: PMin = 0.0,
    ctx: Ctx = 4096, threads: Threads = 0, rpc: Rpc = None, tensor_split: TensorSplit = None,
    gpu_layers: GpuLayers = 0, draft_gpu_layers: DraftGpuLayers = 0, deterministic: Deterministic = False,
    rule: Rule = "gumbel",
    json_schema: JsonSchema = None, grammar: Grammar = None, json_object: JsonObject = False, quiet: Quiet = False,
    hide_thinking: HideThinking = False,
) -> None:
    """Chat in the model's own chat template.  Each turn evaluates only its
    new tokens: the target's and the draft's KV caches are reused.

    \b
    Examples:
      spec-cli chat
      spec-cli chat -t llama-3.3-70b -d llama-3.2-1b --gpu-layers -1
      spec-cli chat --system "Answer in one sentence." --temp 0.7
      spec-cli chat --json-object      # every reply a JSON object
    """
    import dataclasses

    from ..core.stats import Stats
    from ..run.engine import GenConfig
    from ..term import render

    spec = constraint_spec(json_schema, grammar, json_object)
    gen = GenConfig(adjust=penalties(repeat_penalty, presence_penalty, frequency_penalty, repeat_last_n),
                    sampling=sampling(temp, top_k, top_p, min_p), max_tokens=max_tokens, draft_max=draft_max,
                    adaptive=not fixed_draft, seed=seed_or_new(seed), rule=rule)
    pair = load(PairConfig(target=target, draft=draft, proposer=proposer, ctx=ctx, threads=threads,
                           **placement(rpc, tensor_split),
                           gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, p_min=p_min,
                           deterministic=deterministic), quiet=quiet, rule=rule)
    try:
        gen = dataclasses.replace(gen, grammar=compile_constraint(pair, spec))  # every reply starts it afresh
    except BaseException:
        pair.close()
        raise
    interactive = render.is_tty(sys.stdin)
    if interactive:
        _setup_history()
    chat = _Chat(pair, base=[{"role": "system", "content": system}] if system else [], label=proposer,
                 target=target, quiet=quiet, total=Stats(), gen=gen, hide=hide_thinking)
    if rpc:
        _rescue_on_abort(chat, target)
    if not quiet:
        render.note(f"chat with {target}" + (f", drafting with {pair.drafter}" if pair.drafter else "")
                    + f", proposer {proposer}\n{CHAT_HELP}")
    try:
        _converse(chat, interactive)
    finally:
        pair.close()


def _converse(chat: "_Chat", interactive: bool) -> None:
    """Turn after turn, until /exit or the end of the input."""
    while True:
        try:
            line = input("you> " if interactive else "").strip()
        except EOFError:
            return
        except KeyboardInterrupt:
            print()
            continue
        if line.startswith("/"):
            if not chat.command(line):
                return
        elif line:
            chat.turn(line)


def _rescue_on_abort(chat: "_Chat", target: str) -> None:
    """A server that goes away ends the process (rpc.on_abort): the
    conversation is written out first."""
    from ..llama import rpc as rpc_lib
    from ..files import state_dir

    rescue = state_dir() / "chat-rescued.json"
    rpc_lib.on_abort(lambda message: len(chat.messages) > len(chat.base)
                     and _save_chat(str(rescue), target, chat.messages))


class _Chat:
    def __init__(self, pair, *, base: list, label: str, target: str, quiet: bool, total, gen, hide: bool = False):
        self.pair, self.base, self.label, self.target, self.quiet = pair, base, label, target, quiet
        self.hide = hide  # --hide-thinking
        self.messages = list(base)
        self.total, self.gen, self.turns = total, gen, 0
        self.proposer = pair.new_proposer()  # one for the conversation: its index carries over

    def command(self, line: str) -> bool:
        """A slash command; False ends the chat."""
        from ..term import render

        cmd, _, arg = line.partition(" ")
        if cmd in ("/exit", "/quit"):
            return False
        if cmd == "/reset":
            self.messages = list(self.base)
            render.note("conversation cleared")
        elif cmd == "/stats":
            render.err.print(render.summary_table(self.total, proposer=self.label, finish=None))
        elif cmd == "/save":
            _save_chat(arg.strip(), self.target, self.messages)
        else:
            render.note(f"unknown command {cmd}; {CHAT_HELP}")
        return True

    def turn(self, line: str) -> None:
        import dataclasses

        from ..run.session import Session
        from ..term import render

        target = self.pair.target
        self.messages.append({"role": "user", "content": line})
        tokens = target.vocab.tokenize_chat(self.messages)
        if len(tokens) >= target.n_ctx:
            self.messages.pop()
            render.error(f"the conversation no longer fits the context ({len(tokens)} tokens, --ctx {target.n_ctx})",
                         "Type /reset to start over, or restart with a larger --ctx.")
            return
        self.turns += 1
        gen = dataclasses.replace(self.gen, seed=self.gen.seed + self.turns)
        display = Display.decide(quiet=self.quiet)
        plan = thinking_plan(target.vocab, tokens, raw=False)
        sink = None if display.stdout_tty else stdout_write
        thinking = ThinkingView(plan, sink, hidden=self.hide) if plan is not None else None
        out = run_session(Session(self.pair, tokens, gen, self.proposer), display, label=self.label,
                          sink=thinking or sink)
        answer = out.text
        if thinking is not None:
            thinking.finish(out.text)
            answer = thinking.answer
        if display.stdout_tty:
            print_reply(out, thinking, end="\n")
        elif not answer.endswith("\n"):
            stdout_write("\n")
        said = {"role": "assistant", "content": answer}
        if thinking is not None and thinking.reasoning:
            said["reasoning_content"] = thinking.reasoning  # the template shows it again or drops it
        self.messages.append(said)
        self.total.merge(out.stats)
        s = out.stats
        if not self.quiet:
            thought = len(target.vocab.tokenize(thinking.reasoning, add_special=False)) \
                if thinking is not None and thinking.reasoning else 0
            render.note(f"[{s.tokens} tokens" + (f" ({thought} thinking)" if thought else "")
                        + f", {s.tokens_per_s:.1f} tok/s, "
                        + (f"accepted {s.acceptance_rate:.0%}, " if s.drafted else "")
                        + f"prompt: {s.prefill_tokens} new tokens evaluated]")
        if out.finish == "interrupted":
            render.note("(reply interrupted; the conversation is kept)")
        elif out.finish == "context":
            render.note("(the context is full: /reset to start over)")


def _setup_history() -> None:
    import atexit

    from ..files import state_dir

    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return
    path = state_dir() / "chat_history"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            readline.read_history_file(path)
    except OSError:
        return
    readline.set_history_length(1000)
    atexit.register(lambda: _write_history(readline, path))


def _write_history(readline, path: Path) -> None:
    try:
        readline.write_history_file(path)
    except OSError:
        pass


def _save_chat(name: str, target: str, messages: list) -> None:
    from ..files import atomic_write
    from ..term import render

    if not name:
        render.note("usage: /save FILE")
        return
    path = Path(name).expanduser()
    try:
        atomic_write(path, json.dumps({"target": target, "messages": messages}, indent=1, ensure_ascii=False))
    except OSError as e:
        render.error(f"cannot save to {path}: {e.strerror}")
        return
    render.note(f"saved {len(messages)} messages to {path}")
