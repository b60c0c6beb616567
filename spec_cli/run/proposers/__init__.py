"""Proposers: what drafts the next tokens.  One module each (`base`'s
NoDraft, `draft`, `mtp`, `hybrid`; the lookup is the suffix/ package), and
one table naming them all (`registry`).  See base.py for the protocol.

Names are loaded on first use, so that the CLI reads the registry without
numpy (`spec-cli --help` stays instant)."""

from importlib import import_module

_WHERE = {"EMPTY": "base", "Candidate": "base", "KeepGoing": "base", "NoDraft": "base", "Proposal": "base",
          "Proposer": "base", "DraftModel": "draft", "ModelDrafts": "draft", "learned_cost": "draft",
          "Hybrid": "hybrid", "HeadDrafts": "mtp", "mtp_drafter": "mtp", "NAMES": "registry",
          "PROPOSERS": "registry", "spec": "registry"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
