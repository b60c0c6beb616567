"""What `spec-cli batch` reads, checked whole before any model loads:

- a JSON-lines file in OpenAI's batch format, one
  `{"custom_id", "method": "POST", "url", "body"}` a line (vLLM's
  `run_batch` reads the same), each body a request `serve` takes at that
  url;
- plain prompts: one `{"prompt", ...}` object a line (its other fields
  are request fields: `max_tokens`, `seed`, `response_format`, ...; an
  optional `custom_id`, else `line-N`), or, where the first line does not
  start with `{`, one prompt text a line;
- a folder: each file in it one prompt, its answer a file of its own.

A plain prompt is what `spec-cli generate` makes of it (a user turn in the
chat template, or the text continued as is with --raw), with the command's
sampling flags; a request in OpenAI's format keeps its own fields and the
API's defaults, as `serve` answers it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError

# the endpoints a batch line may name, and the kind of request each is
ENDPOINTS = {"/v1/chat/completions": "chat", "/chat/completions": "chat",
             "/v1/completions": "completion", "/completions": "completion", "/infill": "infill"}
MAX_ID = 512                      # characters in a custom_id
ANSWER = re.compile(r"\.out(\.[^.]*)?$")   # a folder's answer files (notes.md -> notes.out.md) are not prompts


@dataclass(frozen=True)
class Defaults:
    """The command's flags that make a plain prompt a request (generate's
    defaults)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    max_tokens: int = 256
    seed: int | None = None
    system: str | None = None
    raw: bool = False
    stop: tuple[str, ...] = ()
    penalties: dict = field(default_factory=dict)  # repeat_penalty, ... as request fields

    def request(self, text: str, extra: dict | None = None) -> tuple[str, dict]:
        """(url, body) of a plain prompt; `extra`: the line's own request fields."""
        extra = dict(extra or {})
        system = extra.pop("system", self.system)
        if self.raw:
            url, body = "/v1/completions", {"prompt": text}
        else:
            url = "/v1/chat/completions"
            body = {"messages": ([{"role": "system", "content": system}] if system else [])
                    + [{"role": "user", "content": text}]}
        for name in ("temperature", "top_k", "top_p", "min_p", "max_tokens", "seed"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        if self.stop:
            body["stop"] = list(self.stop)
        body.update(self.penalties)
        body.update(extra)
        return url, body


@dataclass(frozen=True)
class Item:
    """One request of the batch."""

    custom_id: str
    url: str
    body: dict = field(hash=False, compare=False)
    where: str          # "FILE:LINE" or the prompt file, for messages
    path: Path | None = None   # a folder's prompt file

    @property
    def kind(self) -> str:
        return ENDPOINTS[self.url]


@dataclass(frozen=True)
class Inputs:
    mode: str           # "requests" (JSON lines: OpenAI's format or {"prompt"} objects) | "text" | "folder"
    items: list[Item]


def read(path: Path, defaults: Defaults) -> Inputs:
    """Every request in `path` (a file or a folder), or a SpecError naming the
    first thing wrong (its line number)."""
    if path.is_dir():
        return Inputs("folder", _folder(path, defaults))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"input not found: {path}") from None
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte {e.start})") from None
    lines = [(n, line) for n, line in enumerate(text.lstrip("\ufeff").splitlines(), 1) if line.strip()]
    if not lines:
        raise SpecError(f"{path} holds no requests", hint="Write one request (or prompt) a line.")
    if not lines[0][1].lstrip().startswith("{"):
        return Inputs("text", _unique(path, [_plain(path, n, line, {}, defaults) for n, line in lines]))
    items = []
    for n, line in lines:
        obj = _loads(line)
        if "\\u" in line and _surrogate(obj):  # valid JSON, but no text: refused as serve refuses it
            raise SpecError(f"{path}:{n}: holds a lone surrogate (\\ud800-\\udfff without its pair): not valid "
                            "Unicode text")
        if not isinstance(obj, dict):
            raise SpecError(f"{path}:{n}: not a JSON object ({_why(line)})",
                            hint="Each line is one request: {\"custom_id\", \"method\", \"url\", \"body\"} "
                                 "or {\"prompt\"}.")
        items.append(_request(path, n, obj) if "body" in obj else _prompt_line(path, n, obj, defaults))
    return Inputs("requests", _unique(path, items))


def answer_path(item: Item, out_dir: Path | None) -> Path:
    """Where a folder's answer to `item` goes: the same name in `out_dir`, or
    beside the prompt as NAME.out.EXT."""
    p = item.path
    assert p is not None
    return out_dir / p.name if out_dir is not None else p.with_name(f"{p.stem}.out{p.suffix}")


def _loads(line: str):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _surrogate(obj) -> bool:
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _why(line: str) -> str:
    try:
        json.loads(line)
    except ValueError as e:
        return f"invalid JSON: {e}"
    except RecursionError:
        return "nested too deeply"
    return f"a JSON {type(json.loads(line)).__name__}"


def _custom_id(path: Path, n: int, obj: dict, *, required: bool) -> str:
    cid = obj.get("custom_id")
    if cid is None and not required:
        return f"line-{n}"
    if cid is None:
        raise SpecError(f"{path}:{n}: no 'custom_id'", hint="Each request needs a custom_id of its own: the "
                                                             "answers are matched to requests (and resumed) by it.")
    if not isinstance(cid, str) or not cid or len(cid) > MAX_ID:
        raise SpecError(f"{path}:{n}: 'custom_id' must be a non-empty string of at most {MAX_ID} characters")
    return cid


def _request(path: Path, n: int, obj: dict) -> Item:
    cid = _custom_id(path, n, obj, required=True)
    method, url, body = obj.get("method", "POST"), obj.get("url"), obj.get("body")
    if method != "POST":
        raise SpecError(f"{path}:{n}: 'method' is {method!r}: only POST requests run in a batch")
    if url not in ENDPOINTS:
        raise SpecError(f"{path}:{n}: 'url' is {url!r}", hint="Use one of " + ", ".join(ENDPOINTS) + ".")
    if not isinstance(body, dict):
        raise SpecError(f"{path}:{n}: 'body' must be a JSON object (the request)")
    return Item(cid, url, body, f"{path}:{n}")


def _prompt_line(path: Path, n: int, obj: dict, defaults: Defaults) -> Item:
    if "prompt" not in obj:
        raise SpecError(f"{path}:{n}: neither 'body' nor 'prompt'",
                        hint="A line is a request in OpenAI's batch format ({\"custom_id\", \"method\", "
                             "\"url\", \"body\"}) or a prompt ({\"prompt\": \"...\"}).")
    prompt = obj["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecError(f"{path}:{n}: 'prompt' must be a non-empty string")
    extra = {k: v for k, v in obj.items() if k not in ("prompt", "custom_id")}
    return _plain(path, n, prompt, extra, defaults, _custom_id(path, n, obj, required=False))


def _plain(path: Path, n: int, text: str, extra: dict, defaults: Defaults, cid: str | None = None) -> Item:
    url, body = defaults.request(text, extra)
    return Item(cid or f"line-{n}", url, body, f"{path}:{n}")


def _unique(path: Path, items: list[Item]) -> list[Item]:
    first: dict[str, Item] = {}
    for item in items:
        if item.custom_id in first:
            raise SpecError(f"{item.where}: custom_id {item.custom_id!r} was already used at "
                            f"{first[item.custom_id].where}",
                            hint="Give each request an id of its own: answers are matched and resumed by it.")
        first[item.custom_id] = item
    return items


def _folder(folder: Path, defaults: Defaults) -> list[Item]:
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and not p.name.startswith(".") and not ANSWER.search(p.name))
    if not files:
        raise SpecError(f"{folder} holds no prompt files", hint="Each file in the folder is one prompt.")
    items = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SpecError(f"{p} is not UTF-8 text", hint="Each file in the folder is one prompt: move "
                                                           "other files out of it.") from None
        except OSError as e:
            raise SpecError(f"cannot read {p}: {e.strerror}") from None
        if not text.strip():
            raise SpecError(f"{p} is empty", hint="Each file in the folder is one prompt.")
        url, body = defaults.request(text)
        items.append(Item(p.name, url, body, str(p), path=p))
    return items
