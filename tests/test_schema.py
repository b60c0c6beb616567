"""core/schema.py's rewrites, as pure logic: each rewritten schema, compiled
by llguidance over a byte-level tokenizer, accepts exactly the values the
`jsonschema` validator accepts under the original -- checked on values made
at random from the names and values the schema mentions (a wrong rewrite
fails here: one such is planted and must be caught)."""

import json
import random
from pathlib import Path

import numpy as np
import pytest

from spec_cli.core.constraint import JSON_LAYOUT, ConstraintError, Spec, compile_spec, limits
from spec_cli.core.schema import PATTERNS, disjoint, lower, negate

jsonschema = pytest.importorskip("jsonschema")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench" / "jsonschemabench.jsonl"


class Bytes:
    """Every byte a token, and an end-of-text token."""

    def __init__(self):
        self.tokens = [bytes([i]) for i in range(256)] + [b"\xff<eos>"]
        self.eos_token_id, self.bos_token_id = 256, None
        self.special_token_ids = [256]

    def __call__(self, s):
        return list(s.encode() if isinstance(s, str) else s)


@pytest.fixture(scope="module")
def tokenizer():
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes()))


class Matcher:
    """llguidance's matcher, with a budget of orders to try (accepts)."""

    def __init__(self, tokenizer, schema):
        import llguidance

        text = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=JSON_LAYOUT)
        self.m = llguidance.LLMatcher(tokenizer, text, log_level=0, limits=limits())
        self.budget = FEEDS

    def __getattr__(self, name):
        return getattr(self.m, name)


def matcher(tokenizer, schema):
    m = Matcher(tokenizer, schema)
    assert not m.is_error(), m.get_error()
    return m


def parted(m, check, values) -> list:
    """The values on which the matcher and the validator part (values with
    too many key orders to try left out: at most a tenth)."""
    out, undecided = [], 0
    for v in values:
        try:
            if accepts(m, v) != check.is_valid(v):
                out.append(v)
        except Undecided:
            undecided += 1
    assert undecided <= len(values) // 10
    return out


def samples(m, n: int, seed: int = 0) -> list[str]:
    """Texts the matcher takes whole: random walks over its masks, leaning
    to close what is open as the text grows (walks past 600 bytes dropped)."""
    rng, out = random.Random(seed), []
    for _ in range(n):
        m.reset()
        data = []
        while len(data) < 600 and not m.is_stopped():
            bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little")
            allowed = [int(t) for t in np.flatnonzero(bits[:256])]
            if m.is_accepting() and (not allowed or rng.random() < 0.5):
                break
            closers = [t for t in allowed if t in b'"}]0123456789,tfn']
            t = rng.choice(closers if closers and rng.random() < min(0.95, len(data) / 60) else allowed)
            assert m.consume_tokens([t])
            data.append(t)
        if m.is_accepting() or m.is_stopped():
            out.append(bytes(data).decode())
    return out


def accepts(m, value) -> bool:
    """Whether the matcher `m` takes `value`, written as the layout writes
    it, with its objects' keys in some order (the grammar writes declared
    keys in their order: a value is accepted where any order of its keys
    is)."""
    m.reset()
    m.budget = FEEDS  # orders tried, at most
    return any(m.is_accepting() for _ in _ways(m, value))


class Undecided(Exception):
    """Too many orders of a value's keys to try."""


FEEDS = 4000


def _feed(m, text: str) -> int | None:
    m.budget -= 1
    if m.budget < 0:
        raise Undecided
    data = list(text.encode())
    if m.validate_tokens(data) != len(data):
        return None
    assert m.consume_tokens(data)
    return len(data)


def _ways(m, value):
    """Each way the matcher can take `value` (it is left after the value at
    each yield, and put back after the last)."""
    if isinstance(value, (dict, list)):
        n = _feed(m, "{" if isinstance(value, dict) else "[")
        if n is not None:
            yield from (_members(m, list(value.items()), True) if isinstance(value, dict)
                        else _items(m, value, True))
            m.rollback(n)
        return
    yield from _text(m, json.dumps(value, ensure_ascii=False))


def _text(m, text: str):
    """The matcher takes `text` (one way, or none)."""
    n = _feed(m, text)
    if n is not None:
        yield
        m.rollback(n)


def _members(m, items, first: bool):
    if not items:
        yield from _text(m, "}")
    for i, (k, v) in enumerate(items):
        n = _feed(m, ("" if first else ", ") + json.dumps(k, ensure_ascii=False) + ": ")
        if n is None:
            continue
        for _ in _ways(m, v):
            yield from _members(m, items[:i] + items[i + 1:], False)
        m.rollback(n)


def _items(m, values, first: bool):
    if not values:
        yield from _text(m, "]")
        return
    n = 0 if first else _feed(m, ", ")
    if n is None:
        return
    for _ in _ways(m, values[0]):
        yield from _items(m, values[1:], False)
    if n:
        m.rollback(n)


# -- values to try: made from what the schema names -----------------------------
TYPICAL = {"string": "x", "number": 2.5, "integer": 1, "boolean": True, "null": None, "object": {}, "array": []}


def _mentioned(schema, names: dict, values: list) -> None:
    """The property names the schema mentions, each with the values its
    own subschemas suggest (their types' and enums'), and every enum value."""
    stack = [schema]
    while stack:
        s = stack.pop()
        if isinstance(s, list):
            stack.extend(s)
        if not isinstance(s, dict):
            continue
        for k, v in s.items():
            if k == "required" and isinstance(v, list):
                for x in (x for x in v if isinstance(x, str)):
                    names.setdefault(x, [])
            elif k in ("properties", "dependencies", "dependentRequired", "dependentSchemas") and isinstance(v, dict):
                for name, sub in v.items():
                    names.setdefault(name, []).extend(_suggested(sub))
                    for x in sub if isinstance(sub, list) else []:
                        names.setdefault(x, [])
            elif k in ("enum", "const"):
                values.extend(v if k == "enum" and isinstance(v, list) else [v])
        stack.extend(s.values())


def _suggested(sub) -> list:
    if not isinstance(sub, dict):
        return []
    t = sub.get("type")
    out = [TYPICAL[x] for x in ([t] if isinstance(t, str) else t if isinstance(t, list) else []) if x in TYPICAL]
    return out + (sub["enum"] if isinstance(sub.get("enum"), list) else []) + ([sub["const"]] if "const" in sub else [])


def values_for(schema, n: int, seed: int = 0) -> list:
    names, pool = {}, [None, True, 1, 2.5, -3, "x", "", "/a~1b", "0#", [], {}]
    _mentioned(schema, names, pool)
    keys = sorted(names) or ["a"]
    rng = random.Random(seed)

    def value(depth: int):
        r = rng.random()
        if depth < 3 and r < 0.45:  # at most 5 keys: accepts() tries their orders
            chosen = [k for k in keys if rng.random() < 0.55]
            return {k: member(k, depth) for k in rng.sample(chosen, min(len(chosen), 5))}
        if depth < 3 and r < 0.55:
            return [value(depth + 1) for _ in range(rng.randrange(3))]
        return rng.choice(pool)

    def member(k: str, depth: int):
        return rng.choice(names[k]) if names.get(k) and rng.random() < 0.7 else value(depth + 1)
    return [value(0) for _ in range(n)]


def validator(schema):
    """The validator of the schema's draft; without `$schema`, the draft its
    keywords are from (`dependencies` is draft 7's, `dependent*` 2019's)."""
    default = jsonschema.Draft202012Validator if "dependent" in json.dumps(schema) else jsonschema.Draft7Validator
    return jsonschema.validators.validator_for(schema, default=default)(schema, format_checker=POINTERS)


def agree(tokenizer, schema, n: int = 300) -> list:
    """The values on which the rewritten schema and the validator part."""
    lowered, _ = lower(schema)
    m = matcher(tokenizer, lowered)
    check = validator(schema)
    made = [t for t in samples(m, 25) if not check.is_valid(json.loads(t))]
    return parted(m, check, values_for(schema, n)) + made


AREA = {"radius": {"type": "number"}, "length": {"type": "number"}, "width": {"type": "number"}}
REWRITES = {
    "dependencies, names": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}, "c": {}},
                            "dependencies": {"a": ["b", "c"], "b": ["c"]}},
    "dependentRequired": {"type": "object", "dependentRequired": {"a": ["b"]}},
    "dependencies, a schema": {"dependencies": {"a": {"properties": {"b": {"type": "string"}}, "required": ["b"]}}},
    "dependentSchemas": {"dependentSchemas": {"a": {"required": ["c"]}}, "properties": {"a": {"type": "null"}}},
    "not required": {"type": "object", "required": ["a"], "not": {"required": ["b", "c"]}},
    "not a type": {"anyOf": [{"type": "string"}, {"type": "object"}, {"type": "array"}], "not": {"type": "object"}},
    "not properties": {"not": {"properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                               "required": ["a", "b"]}},
    "not anything": {"type": "object", "properties": {"a": {"not": {}}, "b": {"type": "integer"}}},
    "not an enum": {"properties": {"a": {"not": {"enum": ["x", "xy", "a.b", "/a~1b"]}}}},
    "not a const": {"not": {"const": "x"}},
    "not anyOf, allOf": {"not": {"anyOf": [{"type": "string"}, {"allOf": [{"type": "object"}, {"required": ["a"]}]}]}},
    "oneOf of key groups": {"type": "object", "properties": AREA,
                            "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}]},
    "oneOf of key groups, any kind": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"required": ["c"]}]},
    "oneOf of kinds": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    "oneOf, a const apart": {"oneOf": [
        {"additionalProperties": False, "properties": {"a": {"enum": ["x"]}}, "required": ["a"]},
        {"additionalProperties": False, "properties": {"a": {"enum": ["xy"]}, "b": {"type": "integer"}},
         "required": ["a", "b"]}]},
    "oneOf, one branch anything": {"oneOf": [{}, {"type": "string"}]},
    "oneOf, nested": {"type": "object", "properties": {"d": {"type": "object", "oneOf": [
        {"required": ["a"], "not": {"required": ["b"]}}, {"required": ["b"]}]}}, "required": ["d"]},
    "a format no draft defines": {"type": "object", "properties": {"u": {"type": "string", "format": "url"}}},
}


@pytest.mark.parametrize("name", REWRITES)
def test_each_rewrite_accepts_exactly_what_the_validator_accepts(tokenizer, name):
    schema = REWRITES[name]
    lowered, _ = lower(schema)
    text = json.dumps(lowered)
    for word in ("dependencies", "dependent", '"not"', "oneOf", "url"):
        assert word not in text, f"{name}: {word} left in {text}"
    assert agree(tokenizer, schema) == []


def test_a_wrong_rewrite_is_caught(tokenizer, monkeypatch):
    """Reading oneOf as anyOf (what `coerce_one_of` does) must part from the
    validator: the check above can fail."""
    from spec_cli.core import schema as mod

    monkeypatch.setattr(mod, "_not_also", lambda b, c, context: True)
    assert agree(tokenizer, REWRITES["oneOf of key groups"]) != []


def test_what_cannot_be_written_exactly_is_left_for_the_engine_to_refuse(tokenizer):
    for schema in ({"oneOf": [{"type": "integer"}, {"type": "number"}]},          # non-integer numbers
                   {"not": {"minLength": 3}},                                    # no negated keyword
                   {"type": "array", "uniqueItems": True}):
        assert lower(schema) == (schema, [])
        with pytest.raises(ConstraintError):
            compile_spec(Spec.json_schema(schema, "response_format"), tokenizer, 257)
    pointed = {"$defs": {"x": {"oneOf": [{"type": "string"}, {}]}}, "$ref": "#/$defs/x/oneOf/0"}
    assert lower(pointed) == (pointed, [])  # a $ref into a oneOf: its path must stay
    mixed, _ = lower({"dependentRequired": {"a": ["b"]}, "dependencies": {"c": 5}})
    assert mixed["dependencies"] == {"c": 5} and "dependentRequired" not in mixed  # each keyword on its own
    assert negate({"type": "integer"}) is None and negate({}) is False and negate(False) is True


@pytest.mark.parametrize("schema", [
    {"not": {"type": [{}]}}, {"oneOf": [{"type": [{}]}, {"type": "string"}]},
    {"type": "object", "oneOf": [{"required": [{}]}, {"properties": {"a": False}}]},
    {"oneOf": [{"enum": [[1]]}, {"const": {"a": 1}}]}, {"dependencies": {"a": 5}},
    {"not": {"enum": ["a" * 100_000]}}, {"not": {"enum": [f"w{i}" * 20 for i in range(5000)]}},
    {"oneOf": [{"required": [f"k{i}"]} for i in range(300)]},
])
def test_a_malformed_or_hostile_schema_is_compiled_or_refused_never_a_crash(tokenizer, schema):
    """Malformed keywords are left for the compiler to name; a long excluded
    string, a large excluded set or a oneOf of hundreds of branches is left
    as it was (over MAX_WORD, MAX_LOWERED) or compiled within the limits."""
    try:
        compile_spec(Spec.json_schema(schema, "response_format"), tokenizer, 257)
    except ConstraintError as e:
        assert e.where == "response_format"


def test_an_unsatisfiable_oneof_is_refused_as_such(tokenizer):
    """Every branch's keys required beside the oneOf: no value has exactly
    one group (oneOf read as anyOf would have let every one through)."""
    schema = {"type": "object", "properties": AREA, "required": list(AREA),
              "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}]}
    with pytest.raises(ConstraintError, match="nsatisfiable|nothing satisfies"):
        compile_spec(Spec.json_schema(schema, "response_format"), tokenizer, 257)


def test_a_format_no_draft_defines_is_an_annotation_and_said(tokenizer):
    g = compile_spec(Spec.json_schema(REWRITES["a format no draft defines"], "response_format"), tokenizer, 257)
    assert any("'url'" in w and "annotation" in w for w in g.warnings)
    assert lower({"type": "string", "format": "email"}) == ({"type": "string", "format": "email"}, [])


def _pointer(s: str) -> bool:
    """RFC 6901: '' or '/'-led reference tokens whose '~' is '~0' or '~1'."""
    return s == "" or (s.startswith("/") and all(
        "~" not in t.replace("~0", "").replace("~1", "") for t in s[1:].split("/")))


def _relative(s: str) -> bool:
    digits = len(s) - len(s.lstrip("0123456789"))
    head, rest = s[:digits], s[digits:]
    return bool(head) and (head == "0" or not head.startswith("0")) and (rest == "#" or _pointer(rest))


# the two formats rewritten as patterns, checked as RFC 6901 says (the
# validator checks no other format: the rest are llguidance's own)
POINTERS = jsonschema.FormatChecker(formats=())
POINTERS.checks("json-pointer")(_pointer)
POINTERS.checks("relative-json-pointer")(_relative)


@pytest.mark.parametrize("fmt, ref", [("json-pointer", _pointer), ("relative-json-pointer", _relative)])
def test_the_pointer_formats_are_their_rfc_patterns(tokenizer, fmt, ref):
    m = matcher(tokenizer, lower({"type": "string", "format": fmt})[0])
    rng = random.Random(1)
    words = ["", "/", "//", "~0", "~1", "~", "~2", "a", "0", "1", "12", "01", "#", "/a~1b", "/~01", "é"]
    for _ in range(400):
        s = "".join(rng.choice(words) for _ in range(rng.randrange(4)))
        assert accepts(m, s) == ref(s), (fmt, s)
    assert PATTERNS[fmt].startswith("^")


def test_branches_apart_by_kind_or_by_a_key():
    assert disjoint({"type": "string"}, {"type": "array"})
    assert not disjoint({"type": "integer"}, {"type": "number"})
    assert disjoint({"required": ["a"]}, {"properties": {"a": False}}, {"object"})
    assert not disjoint({"required": ["a"]}, {"properties": {"a": False}})  # a number meets both
    assert disjoint({"required": ["k"], "properties": {"k": {"const": "x"}}},
                    {"required": ["k"], "properties": {"k": {"enum": ["y", 1]}}}, {"object"})


def test_the_shared_schemas_that_are_rewritten_mean_what_they_meant(tokenizer):
    """Every JSONSchemaBench schema the rewrites change and llguidance then
    compiles: the same values accepted as the validator accepts."""
    if not SHARED.exists():
        pytest.skip(f"{SHARED} is absent (the shared bench sets, beside the repository)")
    items = [json.loads(line) for line in SHARED.read_text().splitlines() if line.strip()]
    tried = walked = 0
    for item in items:
        lowered, _ = lower(item["schema"])
        if lowered == item["schema"]:
            continue
        m = Matcher(tokenizer, lowered)
        if m.is_error():
            continue
        check = validator(item["schema"])
        wrong = parted(m, check, values_for(item["schema"], 100))
        made = samples(m, 12)
        wrong += [t for t in made if not check.is_valid(json.loads(t))]
        assert wrong == [], (item["id"], wrong[:3])
        tried += 1
        walked += len(made)
    assert tried >= 10 and walked >= 5 * tried  # the walks end, mostly
