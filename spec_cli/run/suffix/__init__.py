"""The free lookup: a suffix index over token sequences, and the proposer
that drafts from it over the prompt, the output so far and earlier
outputs (SuffixDecoding, Oliaro et al. 2024; llama.cpp's ngram caches).

`SuffixIndex` is a suffix trie cut at `depth` tokens, kept as hash maps:
for every context of 1..depth tokens that occurred, how often each token
followed it (`next`), and where it last occurred (`last`).  Contexts are
keyed by a polynomial hash built backwards from their last token, so a
new token updates `depth` entries and a lookup reads at most `depth`:
neither grows with the sequence.  (A hash collision can only cost a
draft: every draft is verified.)

`Lookup` drafts from it:

- the longest context that matches the tokens before the cursor wins;
  its continuation follows the most frequent child, token by token, and
  stops where that child's share of its parent's count falls below
  `threshold` (the continuation became uncertain);
- the longest match sizes the offer: at most ALPHA x its length;
- a lookup draft starts a `Copy` of the place it matched: while the
  output follows it, the copy drafts on in the original's order without
  new lookups ("prompt-run"); where the output departs from it and comes
  back, the change is remembered and applied the next time the copy
  meets the same tokens (an edit keeps the original's order, and a rename
  is drafted right after its first occurrence); an edit the output made
  before any copy followed (the first line's rename) is found behind the
  first lookup draft's match; an edit the output does not make again
  where it applies is forgotten;
- sources (core.source.Source) say where the match was and how long, so
  the policy learns each one's acceptance apart: "prompt4", "output8", "hist16";
  "prompt-multi2" where the matched context occurred more than once (its
  most frequent continuation drafts, less surely); "prompt-run8" for a
  copy the output has followed for 8-15 tokens; "prompt-patch8" for one
  it keeps leaving (a second function written after the first).

The package, by job: `index` (the suffix index), `store` (earlier
outputs), `copy` (copies and their edits), `lookup` (the proposer),
`priors` (what the cost model expects of a lookup before seeing its drafts).
"""

from .copy import Copy
from .index import SuffixIndex, bucket
from .lookup import Lookup
from .store import Store

__all__ = ["Copy", "Lookup", "Store", "SuffixIndex", "bucket"]
