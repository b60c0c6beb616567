"""Constraints: a JSON schema or a grammar as a mask on the target's
distribution, position by position (llguidance's matcher does the parsing).

What it promises, and what not:

  * every emitted token is a sample of the target's distribution *masked*
    at that position: the logits of the tokens the constraint refuses are
    -inf before temperature, top-k, top-p and min-p apply.  That is what
    constrained decoding without speculation gives (llama.cpp's grammar
    sampler, vLLM, SGLang); it does not renormalise over which prefixes
    can still be completed (no engine does);
  * so the exact rule is unchanged: row i of a verify batch is masked by the
    constraint's state after the context and the draft's first i tokens,
    and the rule runs on the masked rows (the coupled rule reads them one at
    a time and stops at the first mismatch; the residual rule reads all);
  * a drafted token the constraint refuses cannot be accepted, so the draft
    ends before it (`legal`) and costs no verify row;
  * where the constraint admits a single continuation (a key name, `": "`,
    a closing brace) its tokens are known before the target runs (`forced`):
    free drafts, nearly always accepted (run/proposers/grammar.py).

A `Spec` is what a user asked for (plain data, checked for size and depth
before any compiling); `compile_spec` turns it into a `Grammar` against a
model's tokenizer (llama/grammar.py builds it) within stated limits; each
generation starts a `Constraint` from it, which advances over every token
emitted.  No I/O here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import SpecError
from .schema import lower

KINDS = ("json_schema", "json_object", "gbnf", "lark", "regex")
# what a request may ask for, checked before compiling (llguidance's own
# limits below bound the compiling itself)
MAX_TEXT = 256 * 1024        # bytes of a schema or grammar
MAX_DEPTH = 64               # nesting of a JSON schema's objects and arrays
MAX_NODES = 100_000          # values in a JSON schema, all told (an enum's too)
# llguidance's parser limits: the lexer's fuel to build a grammar bounds the
# compile (docs/results.md, "Behind the code"); a mask step's fuel and Earley
# items bound the per-token time
INITIAL_LEXER_FUEL = 2_000_000
STEP_LEXER_FUEL = 400_000
STEP_MAX_ITEMS = 100_000
MAX_GRAMMAR_SIZE = 500_000


class ConstraintError(SpecError):
    """A schema or grammar refused: `where` it came from (a request field, a
    CLI flag), and what is wrong with it."""

    def __init__(self, where: str, message: str, *, hint: str | None = None):
        super().__init__(f"{where}: {message}", hint=hint)
        self.where = where


@dataclass(frozen=True)
class Spec:
    """A constraint as asked for: `kind` (one of KINDS) and its text (a JSON
    schema as JSON; a GBNF, Lark or regex grammar), and `where` it came
    from (a request field, a CLI flag) for the errors.  A schema that is not
    `strict` (OpenAI's `strict: false`, its default) is compiled as far as
    the engine can: keywords it does not implement (`uniqueItems`, `not`,
    `dependencies`, unknown formats) are not enforced, `oneOf` is read as
    `anyOf`, and the Grammar's `warnings` say which; a strict one that uses
    them is refused."""

    kind: str
    text: str = ""
    where: str = "grammar"
    strict: bool = True
    # where set, the grammar is lazy (core/lazy.py): rows go unmasked until one of these texts shows
    triggers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(self.where, f"unknown constraint kind {self.kind!r}",
                                  hint=f"Use one of: {', '.join(KINDS)}.")
        size = len(self.text.encode("utf-8"))
        if size > MAX_TEXT:
            raise ConstraintError(self.where, f"the {self.kind.replace('_', ' ')} is {size} bytes; "
                                  f"at most {MAX_TEXT} are taken")
        if self.kind == "json_schema":
            _check_schema(self.text, self.where)
        elif self.kind != "json_object" and not self.text.strip():
            raise ConstraintError(self.where, f"the {self.kind} grammar is empty")

    @classmethod
    def json_schema(cls, schema, where: str = "json_schema", *, strict: bool = True) -> "Spec":
        """A schema given as an object (a request's) or as JSON text (a file's)."""
        if isinstance(schema, (dict, bool)):
            return cls("json_schema", json.dumps(schema), where, strict)
        if isinstance(schema, str):
            return cls("json_schema", schema, where, strict)
        raise ConstraintError(where, f"a JSON schema must be an object, not {type(schema).__name__}")


def _check_schema(text: str, where: str) -> None:
    try:
        schema = json.loads(text)
    except RecursionError:  # valid JSON, nested past what the parser follows
        raise ConstraintError(where, f"the schema is nested more than {MAX_DEPTH} deep") from None
    except ValueError as e:
        raise ConstraintError(where, f"not valid JSON ({str(e)[:120]})") from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(where, f"a JSON schema must be an object, not {type(schema).__name__}")
    nodes, stack = 0, [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise ConstraintError(where, f"the schema is nested more than {MAX_DEPTH} deep")
        if nodes > MAX_NODES:
            raise ConstraintError(where, f"the schema holds more than {MAX_NODES} values")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


# JSON as one line with a space after ':' and ',' (as OpenAI's structured
# output writes it): no whitespace between tokens to choose, so a small model
# cannot run on in blank lines, and the keys and separators are forced tokens
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _grammar_text(spec: Spec) -> tuple[str, list[str]]:
    """The spec as llguidance's grammar (a JSON document of grammars), and
    what of a schema was read as an annotation (core/schema.py)."""
    import llguidance

    if spec.kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, overrides=JSON_LAYOUT), []
    if spec.kind == "json_schema":
        schema, notes = lower(json.loads(spec.text))
        try:
            layout = JSON_LAYOUT if spec.strict else {**JSON_LAYOUT, "lenient": True, "coerce_one_of": True}
            return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=layout), notes
        except ValueError as e:
            raise ConstraintError(spec.where, f"{e}") from None
    if spec.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(spec.text), []
    try:  # GBNF (llama.cpp's) or Lark: llguidance reads Lark and converts GBNF
        return llguidance.grammar_from("lark" if spec.kind == "lark" else "gbnf", spec.text), []
    except Exception as e:  # its converter raises whatever its parser met
        raise ConstraintError(spec.where, f"the {spec.kind} grammar does not parse: {str(e)[:300]}") from None


def limits():
    import llguidance

    return llguidance.LLParserLimits(initial_lexer_fuel=INITIAL_LEXER_FUEL, step_lexer_fuel=STEP_LEXER_FUEL,
                                     step_max_items=STEP_MAX_ITEMS, max_grammar_size=MAX_GRAMMAR_SIZE,
                                     verbose_errors=False)


@dataclass(frozen=True, eq=False)
class Grammar:
    """A compiled constraint: a matcher at its start (each generation takes
    a copy), the spec it came from, what compiling took, and what of the
    spec is not enforced (a schema that is not strict: Spec)."""

    spec: Spec
    matcher: object  # llguidance.LLMatcher, never advanced
    n_vocab: int
    compile_s: float
    warnings: tuple[str, ...] = ()

    def start(self) -> "Constraint":
        return Constraint(self.matcher.deep_copy(), self.n_vocab)


def compile_spec(spec: Spec, tokenizer, n_vocab: int) -> Grammar:
    """`spec` compiled for `tokenizer` (an llguidance.LLTokenizer; rows of
    `n_vocab` logits), or ConstraintError naming what is wrong with it (an
    unsupported feature, a grammar over the limits)."""
    import llguidance

    t0 = time.perf_counter()
    grammar, notes = _grammar_text(spec)
    m = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=limits())
    if m.is_error():
        raise ConstraintError(spec.where, f"{_reason(m.get_error())}",
                              hint="Simplify it, or leave out the feature named.")
    if not any(m.compute_bitmask()):
        raise ConstraintError(spec.where, "nothing satisfies it (no token can start a match)")
    return Grammar(spec, m, n_vocab, time.perf_counter() - t0, (*notes, *m.get_grammar_warnings()))


def _reason(error: str) -> str:
    """llguidance's error, made one line and short."""
    line = " ".join(error.split())
    return line if len(line) <= 300 else line[:297] + "..."


def allows(mask: np.ndarray, token: int) -> bool:
    """Whether the bitmask `mask` (bit t of word t // 32) lets `token` through."""
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


def apply_mask(row: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A copy of the logits `row` with every token `mask` refuses at -inf."""
    allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[:row.shape[-1]].view(bool)
    return np.where(allowed, row, np.float32(-np.inf)).astype(np.float32, copy=False)


class Constraint:
    """One generation's constraint state, at the tokens emitted so far.
    `seconds` adds up the host time its masks took (bench reports it)."""

    def __init__(self, matcher, n_vocab: int):
        self.m, self.n_vocab = matcher, n_vocab
        self._words = (n_vocab + 31) // 32
        self._mask = np.zeros(self._words, dtype=np.int32)
        self._forced: list[int] | None = None
        self.seconds = 0.0
        self.masks = 0
        self.count = 0  # tokens it has followed since its start

    # -- what may come ---------------------------------------------------
    def legal(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` (a draft after the tokens emitted) the
        constraint admits in a row."""
        if not tokens:
            return 0
        t0 = time.perf_counter()
        n = self.m.validate_tokens(list(tokens))
        self.seconds += time.perf_counter() - t0
        return n

    def forced(self) -> list[int]:
        """The tokens the constraint admits as the only continuation here
        (llguidance's fast-forward tokens), [] where there is a choice."""
        if self._forced is None:
            t0 = time.perf_counter()
            self._forced = [] if self.m.is_stopped() else list(self.m.compute_ff_tokens())
            self.seconds += time.perf_counter() - t0
        return self._forced

    def mask(self) -> np.ndarray:
        """The bitmask of the next token (bit t of word t // 32: t allowed)."""
        t0 = time.perf_counter()
        self.m.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        self.seconds += time.perf_counter() - t0
        self.masks += 1
        return self._mask

    @staticmethod
    def allows(mask: np.ndarray, token: int) -> bool:
        return allows(mask, token)

    def masked(self, row: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """A copy of the logits `row` with every refused token at -inf."""
        mask = self.mask() if mask is None else mask
        t0 = time.perf_counter()
        out = apply_mask(row, mask)
        self.seconds += time.perf_counter() - t0
        return out

    # -- moving on ---------------------------------------------------------
    def advance(self, tokens: Sequence[int]) -> None:
        """The constraint follows `tokens`, emitted after what it holds."""
        if not tokens:
            return
        self._forced = None
        if not self.m.consume_tokens(list(tokens)) and not self.m.is_stopped():
            raise ConstraintError("the constraint", f"the output left it: {_reason(self.m.get_error())}")
        self.count += len(tokens)

    def rollback(self, n: int) -> None:
        if n:
            self._forced = None
            self.m.rollback(n)
            self.count -= n

    @property
    def done(self) -> bool:
        """Nothing but an end-of-generation token may come."""
        return self.m.is_stopped()

    # -- the rule's rows -----------------------------------------------------
    def choose(self, row: np.ndarray, pick: Callable[[np.ndarray], int], *, greedy: bool,
               keep: list | None = None) -> int:
        """The target's token from `row` under the mask here: `pick` of the
        masked row.  Greedy needs no masked copy where the row's own argmax
        is allowed (it is then the masked argmax too).  `keep` (bench's
        margins) gets the masked row."""
        mask = self.mask()
        if keep is not None:
            keep.append(self.masked(row, mask))
        if greedy:
            top = int(np.argmax(row))
            if self.allows(mask, top):
                return top
        return pick(self.masked(row, mask))

    def rows_along(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        """Every row of a verify batch masked, row i at the state after
        draft[:i] (the residual rule reads them all), as far as the draft is
        legal: the rows after a refused draft token are never read (the rule
        rejects it), and are left as they came.  The state is back where it
        was after."""
        out = np.array(rows[:len(draft) + 1], dtype=np.float32)
        n = self.legal(draft)
        for i in range(n + 1):
            out[i] = self.masked(rows[i])
            if i < n:
                self.m.consume_token(int(draft[i]))
        self.m.rollback(n)
        return out
