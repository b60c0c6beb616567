"""Small file helpers shared by the commands."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over
    `path`: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def state_dir() -> Path:
    """Where spec-cli keeps what it learns on this machine (probe results,
    chat history): $XDG_STATE_HOME/spec-cli, else ~/.local/state/spec-cli."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "spec-cli"


def read_state(name: str) -> dict:
    """A JSON object spec-cli keeps in its state directory; {} when it is
    missing, unreadable or not an object (it is only what was learned)."""
    try:
        data = json.loads((state_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state(name: str, data: dict) -> None:
    """Keep `data` in the state directory; a read-only one only costs
    learning it again next time."""
    try:
        atomic_write(state_dir() / name, json.dumps(data, indent=1))
    except OSError:
        pass
