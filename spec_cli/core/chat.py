"""Where a chat's messages lie in the text its template rendered: pure
string work, so that a message's content is tokenized as plain text and
only the template's own text may hold special tokens (llama/vocab.py)."""

from __future__ import annotations

import re

MARK = "\ue000{}\ue001"  # a message's place in the rendered template (private-use characters)
_MARKS = re.compile("\ue000(\\d+)\ue001")


def content_spans(rendered: str, marked: str, contents: list[str]) -> list[tuple[int, int]] | None:
    """Where the messages' contents lie in `rendered`, as (start, end)
    spans in order: `marked` is the same template rendered with mark i in
    place of content i, so what lies between marks is the template's own
    text.  A content may appear as given or trimmed, or as what follows its
    last "</think>" (a reasoning model's past answers).  None if `rendered`
    does not follow `marked` so (a template that inspects or rewrites
    contents)."""
    parts = _MARKS.split(marked)  # [text, index, text, index, ..., text]
    spans, pos = [], 0
    for k in range(0, len(parts) - 1, 2):
        if not rendered.startswith(parts[k], pos):
            return None
        pos += len(parts[k])
        i, after = int(parts[k + 1]), parts[k + 2]
        if i >= len(contents):
            return None
        c = contents[i]
        # as given or trimmed; reasoning models' templates (DeepSeek-R1, Qwen3) keep only what
        # follows a past answer's "</think>"
        forms = [form for part in (c, c.rsplit("</think>", 1)[-1])
                 for form in (part, part.strip(), part.lstrip(), part.rstrip())]
        for text in dict.fromkeys(forms):
            if rendered.startswith(text, pos) and rendered.startswith(after, pos + len(text)):
                break
        else:
            return None
        if text:
            spans.append((pos, pos + len(text)))
        pos += len(text)
    return spans if rendered[pos:] == parts[-1] else None
