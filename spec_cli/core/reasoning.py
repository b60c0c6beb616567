"""A reasoning model's thinking, apart from its answer.  Pure, no I/O.

A chat template that defines a thinking block names its markers
(`markers_of`): `<think>`/`</think>` (Qwen3 and Qwen3.5, QwQ, DeepSeek-R1
and V3.1+, GLM, SmolLM3, Granite 3.3, ...), `[THINK]`/`[/THINK]` (Mistral's
reasoning models), Command R7B's `<|START_THINKING|>`/`<|END_THINKING|>`,
Seed-OSS's `<seed:think>`.  The rendered prompt says where the reply starts
(`opened`): inside the block where the template opened it (Qwen3.5,
DeepSeek-R1's later templates: "inside"), after it where the template wrote
an empty one (thinking off: "closed"), else the model may open one itself
("maybe").  `Split` reads a reply, streamed or whole, into its reasoning
and its answer; `unfinished` says the reply ended inside the block.
"""

from __future__ import annotations

from dataclasses import dataclass

PAIRS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"), ("<|START_THINKING|>", "<|END_THINKING|>"),
         ("<seed:think>", "</seed:think>"))
FORMATS = ("auto", "none")   # --reasoning-format: split the thinking out, or keep the raw text
EFFORTS = ("none", "minimal", "low", "medium", "high")


@dataclass(frozen=True)
class Markers:
    open: str
    close: str


def markers_of(template: str | None) -> Markers | None:
    """The thinking block's markers `template` writes, or None."""
    if not template:
        return None
    for open_, close in PAIRS:
        if close in template:
            return Markers(open_, close)
    return None


def opened(prompt: str, markers: Markers) -> str:
    """Where a reply to `prompt` (the rendered chat, generation prompt
    last) starts: "inside" a block the prompt opened, "closed" after an
    empty block the prompt wrote (thinking off), or "maybe"."""
    tail = prompt.rstrip()
    if tail.endswith(markers.open):
        return "inside"
    if tail.endswith(markers.close):
        at = tail.rfind(markers.open)
        if at >= 0 and not tail[at + len(markers.open):-len(markers.close)].strip():
            return "closed"
    return "maybe"


def _held(text: str, marker: str) -> int:
    """How many of `text`'s last characters may begin `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


class Split:
    """A reply read as it comes into reasoning and answer.  `feed` takes
    the next text and gives (reasoning, answer) that may go out now: text
    that may begin a marker, and blanks around the reasoning, are held
    until the next piece tells.  The markers themselves go to neither."""

    def __init__(self, markers: Markers, start: str):
        self.m = markers
        self.state = {"inside": "lead", "closed": "after", "maybe": "start"}[start]
        self.pending = ""
        self.reasoning, self.content = "", ""
        self.opened = start == "inside"

    @property
    def unfinished(self) -> bool:
        """The reply so far is inside the thinking block."""
        return self.state in ("lead", "inside")

    def feed(self, text: str) -> tuple[str, str]:
        self.pending += text
        r, c = "", ""
        while True:
            before = (self.state, len(self.pending))
            got_r, got_c = self._step()
            r, c = r + got_r, c + got_c
            if (self.state, len(self.pending)) == before:
                break
        self.reasoning += r
        self.content += c
        return r, c

    def _step(self) -> tuple[str, str]:
        p, m = self.pending, self.m
        if self.state == "start":      # the model may open the block itself, after blanks
            head = p.lstrip()
            if head.startswith(m.open):
                self.pending, self.state, self.opened = head[len(m.open):], "lead", True
            elif head and not m.open.startswith(head):
                self.state = "content"
            return "", ""
        if self.state == "lead":       # blanks that open the reasoning are dropped
            self.pending = p.lstrip()
            if self.pending:
                self.state = "inside"
            return "", ""
        if self.state == "inside":
            at = p.find(m.close)
            if at >= 0:
                self.pending, self.state = p[at + len(m.close):], "after"
                return p[:at].rstrip(), ""
            body = p[:len(p) - _held(p, m.close)]
            out = body.rstrip()  # blanks before the close marker are not the reasoning's
            self.pending = p[len(out):]
            return out, ""
        if self.state == "after":      # blanks between the block and the answer are dropped
            self.pending = p.lstrip()
            if self.pending:
                self.state = "content"
            return "", ""
        self.pending = ""
        return "", p

    def finish(self) -> tuple[str, str]:
        """What is held at the end: a reply that never opened a block is
        all answer; one that never closed it all reasoning."""
        p, self.pending = self.pending, ""
        if self.state == "start":
            out = ("", p)
        elif self.state in ("lead", "inside"):
            out = (p.rstrip(), "")
        elif self.state == "after":
            out = ("", "")
        else:
            out = ("", p)
        self.reasoning += out[0]
        self.content += out[1]
        return out


def split(text: str, markers: Markers, start: str) -> Split:
    """A whole reply read (see Split)."""
    s = Split(markers, start)
    s.feed(text)
    s.finish()
    return s
