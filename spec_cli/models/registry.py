"""models.toml -> frozen dataclasses; name -> local GGUF path.

Lookup order for a model argument:
  1. a path to an existing file (or anything ending in .gguf) is used as is;
  2. a name or alias from the registry: the built-in models.toml, overlaid
     by the user's file (see `user_registry_path`);
  3. the file is taken from the Hugging Face cache, or the mirror cache, or
     downloaded: the hub first, then the entry's package-index mirror.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..errors import SpecError
from .mirror import Mirror

BUILTIN_REGISTRY = Path(__file__).resolve().parent.parent / "models.toml"

_ENTRY_KEYS = {"repo", "file", "family", "params", "draft", "aliases", "quants",
               "mirror", "description", "mtp"}
_REQUIRED = ("repo", "file", "family", "params")
_MIRROR_KEYS = {"package", "version", "member", "parts", "sha256", "size", "file"}


@dataclass(frozen=True)
class ModelEntry:
    name: str
    repo: str
    file: str
    family: str
    params: str
    draft: str | None = None
    aliases: tuple[str, ...] = ()
    quants: dict[str, str] = field(default_factory=dict)
    mirror: Mirror | None = None
    description: str = ""
    source: str = ""
    mtp: bool = False  # the GGUF keeps multi-token-prediction layers: it drafts for itself

    def file_for(self, quant: str | None) -> str:
        if quant is None:
            return self.file
        for q, f in self.quants.items():
            if q.lower() == quant.lower():
                return f
        raise SpecError(f"model {self.name} has no quantization {quant!r}",
                        hint=f"Available: {', '.join(self.quants) or 'only the default'}.")


@dataclass(frozen=True)
class Registry:
    entries: dict[str, ModelEntry]
    files: tuple[Path, ...]

    def lookup(self, name: str) -> ModelEntry:
        key = name.lower()
        for e in self.entries.values():
            if key == e.name.lower() or key in (a.lower() for a in e.aliases):
                return e
        names = [e.name for e in self.entries.values()] + [
            a for e in self.entries.values() for a in e.aliases]
        close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
        hint = (f"Did you mean: {', '.join(close)}?" if close else
                "Run `spec-cli models list` for the known names, or pass a path to a .gguf file.")
        raise SpecError(f"unknown model {name!r}", hint=hint)


def user_registry_path() -> Path:
    env = os.environ.get("SPEC_CLI_MODELS")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "spec-cli" / "models.toml"


def cache_dir() -> Path:
    env = os.environ.get("SPEC_CLI_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spec-cli"


def load_registry(paths: list[Path] | None = None) -> Registry:
    """Built-in registry overlaid by the user's file (when it exists)."""
    if paths is None:
        paths = [BUILTIN_REGISTRY]
        user = user_registry_path()
        if user.is_file():
            paths.append(user)
    entries: dict[str, ModelEntry] = {}
    for path in paths:
        for entry in _parse_file(path):
            entries[entry.name] = entry
    for e in entries.values():
        if e.draft is not None and e.draft not in entries and not any(
                e.draft in x.aliases for x in entries.values()):
            raise SpecError(f"{e.source}: model {e.name!r} suggests draft {e.draft!r}, "
                            "which is not in the registry",
                            hint="Add that model, or fix the name.")
    return Registry(entries, tuple(paths))


def _parse_file(path: Path) -> list[ModelEntry]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot read model registry {path}: {e.strerror}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: invalid TOML: {e}",
                        hint="Fix the syntax at that line and run again.") from e
    unknown_top = set(data) - {"models"}
    if unknown_top:
        key = sorted(unknown_top)[0]
        raise SpecError(f"{_where(path, text, key)}: unknown top-level key {key!r}",
                        hint="Models go under [models.NAME] tables.")
    out = []
    for name, raw in data.get("models", {}).items():
        where = _where(path, text, name)
        if not isinstance(raw, dict):
            raise SpecError(f"{where}: models.{name} must be a table")
        _check_keys(raw, f"{where}: model {name!r}", _ENTRY_KEYS, _REQUIRED,
                    hint=f"Every model needs: {', '.join(_REQUIRED)}.")
        for k in ("repo", "file", "family", "params", "draft", "description"):
            if k in raw and not isinstance(raw[k], str):
                raise SpecError(f"{where}: model {name!r}: {k} must be a string")
        if not isinstance(raw.get("mtp", False), bool):
            raise SpecError(f"{where}: model {name!r}: mtp must be true or false")
        aliases = raw.get("aliases", [])
        quants = raw.get("quants", {})
        if not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
            raise SpecError(f"{where}: model {name!r}: aliases must be a list of strings")
        if not (isinstance(quants, dict) and all(isinstance(v, str) for v in quants.values())):
            raise SpecError(f"{where}: model {name!r}: quants must map names to file names")
        mirror = _parse_mirror(raw["mirror"], f"{where}: model {name!r}") if "mirror" in raw else None
        out.append(ModelEntry(
            name=name, repo=raw["repo"], file=raw["file"], family=raw["family"],
            params=raw["params"], draft=raw.get("draft"), aliases=tuple(aliases),
            quants=dict(quants), mirror=mirror, description=raw.get("description", ""),
            source=str(path), mtp=raw.get("mtp", False)))
    return out


def _parse_mirror(raw, where: str) -> Mirror:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: mirror must be a table")
    _check_keys(raw, f"{where}: mirror", _MIRROR_KEYS, ("package", "version", "member", "sha256", "size"))
    if not re.fullmatch(r"[0-9a-f]{64}", str(raw["sha256"])):
        raise SpecError(f"{where}: mirror sha256 must be 64 lowercase hex digits")
    try:
        mirror = Mirror(package=str(raw["package"]), version=str(raw["version"]),
                        member=str(raw["member"]), sha256=raw["sha256"],
                        size=int(raw["size"]), parts=int(raw.get("parts", 1)),
                        file=str(raw["file"]) if "file" in raw else None)
        mirror.part(mirror.parts)
    except (ValueError, KeyError, IndexError) as e:
        raise SpecError(f"{where}: bad mirror template: {e}",
                        hint="package and member may use {n} (1-based part) and {i} (0-based).") from e
    return mirror


def _check_keys(raw: dict, what: str, allowed, required, *, hint: str | None = None) -> None:
    """No key outside `allowed`, every key of `required`: else say which."""
    extra = set(raw) - set(allowed)
    if extra:
        raise SpecError(f"{what} has unknown key {sorted(extra)[0]!r}",
                        hint=f"Allowed keys: {', '.join(sorted(allowed))}.")
    missing = [k for k in required if k not in raw]
    if missing:
        raise SpecError(f"{what} is missing {missing[0]!r}", hint=hint)


def _where(path: Path, text: str, key: str) -> str:
    """`file:line` of the line that mentions `key` first (a table header
    or a key), so errors point where the user has to look."""
    pat = re.compile(r"^\s*\[?\s*(models\.)?\"?" + re.escape(key) + r"\"?\s*[\]=.]")
    for lineno, line in enumerate(text.splitlines(), 1):
        if pat.search(line):
            return f"{path}:{lineno}"
    return str(path)
