"""Proposers: what drafts the next tokens.  One module each (`base`'s
NoDraft, `draft`, `mtp`, `hybrid`; the lookup is the suffix/ package), and
one table naming them all (`registry`).  See base.py for the protocol."""

from .base import EMPTY, Candidate, KeepGoing, NoDraft, Proposal, Proposer
from .draft import DraftModel, ModelDrafts, learned_cost
from .hybrid import Hybrid
from .mtp import HeadDrafts, mtp_drafter
from .registry import NAMES, PROPOSERS, spec

__all__ = ["EMPTY", "Candidate", "DraftModel", "HeadDrafts", "Hybrid", "KeepGoing", "ModelDrafts", "NAMES",
           "NoDraft", "PROPOSERS", "Proposal", "Proposer", "learned_cost", "mtp_drafter", "spec"]
