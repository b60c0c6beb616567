"""Where `spec-cli batch` writes, so that nothing is lost or half-written:

- JSON lines (OpenAI's batch output: `{"id", "custom_id", "response":
  {"status_code", "request_id", "body"}, "error"}`), one line a request,
  appended with one write and fsynced as the request finishes.  Opened
  again, the file says which requests are answered; a last line cut short
  (the process was killed mid-write) is dropped, and that request runs
  again.
- a folder's answers: one file each, written beside under a temporary
  name, fsynced and renamed into place.

`--ordered` holds each answer until those before it in the input are
written."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

from ..errors import SpecError


def answer_line(custom_id: str, status: int, body: dict, request_id: str | None = None) -> dict:
    """One output line: the response as the server would have answered it;
    `error` also carries a failed request's code and message."""
    error = None
    if status != 200:
        e = body.get("error", {})
        error = {"code": e.get("type", "error"), "message": e.get("message", "")}
    return {"id": f"batch_req_{uuid.uuid4().hex[:24]}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": request_id or body.get("id", ""), "body": body},
            "error": error}


class AnswerLog:
    """The JSON-lines output: `path`, or stdout where None.  `answered`: the
    custom_ids it already holds, with whether each succeeded."""

    def __init__(self, path: Path | None):
        self.path = path
        self.answered: dict[str, bool] = {}
        self.repaired = False   # a cut-short last line was dropped
        self._fd: int | None = None
        if path is not None:
            self._open(path)

    def _open(self, path: Path) -> None:
        if path.is_dir():
            raise SpecError(f"{path} is a directory", hint="Give -o a file for JSON-lines input (a folder of "
                                                           "answers is for a folder of prompts).")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise SpecError(f"cannot write {path}: {e.strerror}") from None
        try:
            data = b""
            while chunk := os.read(fd, 1 << 20):
                data += chunk
            keep, whole = self._read_answers(path, data)
            if keep < len(data):
                os.ftruncate(fd, keep)
                self.repaired = True
            os.lseek(fd, 0, os.SEEK_END)
            if not whole:  # a last line that is whole but unterminated (edited by hand): ended here
                os.write(fd, b"\n")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _read_answers(self, path: Path, data: bytes) -> tuple[int, bool]:
        """Fill `answered` from the file's lines: (the bytes to keep, whether
        they end a line)."""
        keep = 0
        for n, line in enumerate(data.splitlines(keepends=True), 1):
            try:
                obj = json.loads(line)
                cid = obj["custom_id"]
                ok = (obj.get("response") or {}).get("status_code") == 200
            except (ValueError, KeyError, TypeError, AttributeError):
                if not line.endswith(b"\n"):  # the last line, cut short by a kill: its request runs again
                    break
                raise SpecError(f"{path}:{n} is not an answer line",
                                hint="Is -o the output of spec-cli batch? Choose another file.") from None
            self.answered[cid] = ok
            keep += len(line)
        return keep, keep == 0 or data[keep - 1:keep] == b"\n"

    def write(self, line: dict) -> None:
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
        if self._fd is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_atomically(path: Path, text: str) -> None:
    """`text` in `path`, whole or not at all."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_folder_output(out_dir: Path | None, folder: Path) -> None:
    """-o for a folder of prompts: a folder that is not the prompts' own."""
    if out_dir is None:
        probe = folder
    else:
        if out_dir.exists() and not out_dir.is_dir():
            raise SpecError(f"{out_dir} is a file", hint="For a folder of prompts, -o names a folder for the "
                                                         "answers.")
        if out_dir.exists() and out_dir.resolve() == folder.resolve():
            raise SpecError("-o is the prompts' own folder", hint="Leave -o out to write NAME.out.EXT beside "
                                                                  "each prompt, or name another folder.")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpecError(f"cannot create {out_dir}: {e.strerror}") from None
        probe = out_dir
    if not os.access(probe, os.W_OK):
        raise SpecError(f"cannot write in {probe}")


class Ordered:
    """Answers handed on in input order: `put` each as it finishes; what
    follows the answers written so far goes to `write`."""

    def __init__(self, order: list[str], write):
        self._order, self._next, self._write = order, 0, write
        self._held: dict[str, object] = {}

    def put(self, cid: str, answer) -> None:
        self._held[cid] = answer
        self._flush()

    def skip(self, cid: str) -> None:
        """`cid` will not be answered this run (abandoned): those after it
        wait for it no more."""
        self._order = self._order[:self._next] + [c for c in self._order[self._next:] if c != cid]
        self._flush()

    def _flush(self) -> None:
        while self._next < len(self._order) and self._order[self._next] in self._held:
            self._write(self._held.pop(self._order[self._next]))
            self._next += 1

    @property
    def held(self) -> int:
        """Answers waiting for one before them."""
        return len(self._held)
