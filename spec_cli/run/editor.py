"""Editor completions: the fill-in-the-middle prompt, and where a
completion stops.  Shared by `spec-cli complete` and the server's
`/infill`, so an editor gets the same text from either.

The prompt is laid out as llama-server's `/infill` lays it out (its
`format_infill`): extra context chunks first (with the model's
repository/file-separator tokens where it has them), then

    [BOS] <extra> FIM_PRE prefix+middle FIM_SUF suffix FIM_MID

so the stable part (extra files, the file's start) comes first and a
cached KV prefix carries over between keystrokes.

Where a completion stops (`EditorStops`), besides stop strings and max
tokens:

- `n_indent` as llama-server defines it: once a new line has begun and its
  first character after spaces/tabs (a newline too) arrives, the
  completion ends there if the line is indented less than `n_indent`; the
  text is cut after that line's indentation.
- the text starts repeating what follows the cursor: a completed line
  equal (spaces aside) to the suffix's next non-blank line(s) -- enough of
  them to span 8 characters, so a lone `}` does not end a nested block --
  ends it before that line, and the blank lines before it go too.
- the text leaves the block the cursor and the suffix are in: a line after
  the cursor's indented less than both the cursor's line and the suffix's
  next line (or, where that is at the margin or there is none, a line at
  the margin after an indented cursor line: new top-level code) ends it
  before that line.
  These two are the insertion rules (`insertion`); where the cursor is at
  a line's start (`prefix` known), the middle keeps the new line that ends
  its last line, so prefix + middle + suffix reads as the file.
- `t_max_predict_ms`: past that time after the first token, the
  completion ends at the next new line (as llama-server: only at a line's
  end, so a line is never cut in half).
- `max_lines`: at most that many lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

ECHO_CHARS = 8  # the suffix lines compared must span this many characters


@dataclass(frozen=True)
class Fim:
    tokens: list[int]
    fim: bool          # False: the model has no FIM tokens and this is the prefix alone
    truncated: bool    # context dropped to fit (prefix start, suffix end, extra chunks)


def fim_prompt(vocab, prefix: str, suffix: str, *, middle: str = "",
               extra: Sequence[tuple[str, str]] = (), budget: int | None = None) -> Fim:
    """The FIM prompt for `vocab` (a llama Model.vocab): text before the cursor
    (`prefix` + `middle`, the cursor line's start), text after it, and
    extra (filename, text) chunks.  `budget` caps the prompt's tokens:
    three quarters for the prefix (its end kept), a quarter for the suffix
    (its start kept), extra chunks in what is left (the latest kept)."""
    sp = vocab.special_tokens()
    tok = lambda text: vocab.tokenize(text, add_special=False) if text else []  # noqa: E731
    bos = [sp["bos"]] if vocab.add_bos and sp["bos"] >= 0 else []
    if min(sp["fim_pre"], sp["fim_suf"], sp["fim_mid"]) < 0:
        tokens = tok(prefix + middle) or tok("\n")
        truncated = budget is not None and len(bos) + len(tokens) > budget
        if truncated:
            tokens = tokens[len(tokens) - (budget - len(bos)):]
        return Fim(bos + tokens, False, truncated)

    pre, suf = tok(prefix + middle), tok(suffix)
    chunks: list[int] = []
    if extra:
        if sp["fim_rep"] >= 0:
            chunks += [sp["fim_rep"]] + tok("myproject\n")
        for filename, text in extra:
            if sp["fim_sep"] >= 0:
                chunks += [sp["fim_sep"]] + tok((filename or "tmp") + "\n")
            else:
                chunks += tok("\n\n--- snippet ---\n\n")
            chunks += tok(text)
        if sp["fim_sep"] >= 0:
            chunks += [sp["fim_sep"]] + tok("filename\n")
    truncated = False
    if budget is not None:
        room = budget - len(bos) - 3
        if len(pre) + len(suf) > room:
            n_suf = min(len(suf), max(room // 4, room - len(pre)))
            n_pre = min(len(pre), room - n_suf)
            truncated = True
            pre, suf = pre[len(pre) - n_pre:], suf[:n_suf]
        left = max(0, room - len(pre) - len(suf))
        if len(chunks) > left:
            chunks, truncated = chunks[len(chunks) - left:] if left else [], True
    tokens = bos + chunks + [sp["fim_pre"]] + pre + [sp["fim_suf"]] + suf + [sp["fim_mid"]]
    return Fim(tokens, True, truncated)


def cursor_indent(prefix: str) -> int:
    """The indentation (spaces and tabs) of the cursor's line."""
    return _indent(prefix[prefix.rfind("\n") + 1:])


def _echo_lines(suffix: str) -> list[str]:
    """The suffix's next non-blank lines (stripped), enough to span ECHO_CHARS."""
    lines, chars = [], 0
    for line in suffix.split("\n"):
        s = line.strip()
        if s:
            lines.append(s)
            chars += len(s)
            if chars >= ECHO_CHARS:
                break
    return lines


@dataclass
class EditorStops:
    """Where an editor completion stops; see the module's docstring.

    `cut(text, elapsed_s)` is asked after every step with all the text so
    far: None to go on, else how much of it to keep (the completion ends).
    `hold(text)` says how much may be shown already: a line that may still
    turn out to repeat the suffix, and trailing blank lines, wait."""

    n_indent: int = 0
    suffix: str = ""
    t_max_predict_ms: float = 0.0
    max_lines: int = 0
    prefix: str | None = None   # the text before the cursor, where known (the insertion rules read it)
    insertion: bool = True      # the suffix-repeat and block rules (off: a client that trims itself)
    _echo: list[str] = field(init=False, default_factory=list)

    def __post_init__(self):
        self._echo = _echo_lines(self.suffix) if self.insertion else []
        self._line_start = self.prefix is not None and (not self.prefix or self.prefix.endswith("\n"))
        self._head = "" if self.prefix is None else self.prefix[self.prefix.rfind("\n") + 1:]
        rest = self.suffix if self._line_start or self.prefix is None else self.suffix.partition("\n")[2]
        nxt = [line for line in rest.split("\n") if line.strip()]
        self._suffix_indent = _indent(nxt[0]) if nxt else 0
        self._blocks = self.insertion and self.prefix is not None

    def _before(self, text: str, start: int) -> int:
        """Where the middle ends if it ends before the line at `start`:
        blank lines dropped; the last line's new line kept where the cursor
        was at a line's start (the suffix starts a line of its own)."""
        keep = len(text[:start].rstrip())
        if keep and self._line_start and not self.suffix.startswith("\n"):
            keep = text.find("\n", keep) + 1 or keep
        return keep

    def _left_block(self, text: str) -> int | None:
        """The start of the first line after the cursor's that is indented
        less than the block the cursor and the suffix share."""
        first = text.find("\n")
        if first < 0:
            return None
        cursor = _indent(self._head + text[:first])
        floor = min(cursor, self._suffix_indent) if self._suffix_indent > 0 else (1 if cursor > 0 else 0)
        start = first + 1
        while start < len(text):  # each later line, once its first character has come
            end = text.find("\n", start)
            line = text[start:] if end < 0 else text[start:end]
            if line.strip() and _indent(line) < floor:
                return start
            if end < 0:
                break
            start = end + 1
        return None

    def cut(self, text: str, elapsed_s: float = 0.0, *, new_from: int = 0) -> int | None:
        """`new_from`: where this step's text began (the time limit ends the
        completion at the first new line this step wrote)."""
        cuts = []
        if self.n_indent > 0:
            start = text.find("\n") + 1
            while start > 0:
                end = text.find("\n", start)
                line = text[start:] if end < 0 else text[start:end]
                body = line.lstrip(" \t")
                indent = len(line) - len(body)
                if (body or end >= 0) and indent < self.n_indent:
                    cuts.append(start + indent)
                    break
                start = end + 1
        if self._echo:
            n = len(self._echo)
            done = [(start, s) for start, s, complete in _nonblank(text) if complete]
            for i in range(len(done) - n + 1):
                if [s for _, s in done[i:i + n]] == self._echo:
                    cuts.append(self._before(text, done[i][0]))
                    break
        if self._blocks:
            left = self._left_block(text)
            if left is not None:
                cuts.append(self._before(text, left))
        if self.max_lines and text.count("\n") >= self.max_lines:
            cuts.append(_nth(text, "\n", self.max_lines))
        if self.t_max_predict_ms > 0 and elapsed_s * 1000 > self.t_max_predict_ms:
            nl = text.find("\n", new_from)
            if nl >= 0:
                cuts.append(nl + 1)
        return min(cuts) if cuts else None

    def hold(self, text: str) -> int:
        if not self._echo:
            return len(text)
        lines = _nonblank(text)
        keep = len(text)
        for j in range(max(0, len(lines) - len(self._echo)), len(lines)):
            tail = lines[j:]
            if all(s == e if complete else e.startswith(s)
                   for (_, s, complete), e in zip(tail, self._echo)):
                keep = tail[0][0]
                break
        return len(text[:keep].rstrip())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _nonblank(text: str) -> list[tuple[int, str, bool]]:
    """(start, stripped text, ended by a newline?) of each non-blank line."""
    out, start = [], 0
    while start <= len(text):
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip():
            out.append((start, line.strip(), end >= 0))
        if end < 0:
            break
        start = end + 1
    return out


def _nth(text: str, sub: str, n: int) -> int:
    """The index of the n-th (1-based) occurrence of `sub`."""
    i = -1
    for _ in range(n):
        i = text.find(sub, i + 1)
    return i
