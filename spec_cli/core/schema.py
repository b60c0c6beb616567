"""A JSON schema rewritten, before llguidance compiles it, into an equal
schema of the keywords llguidance implements: every rewrite accepts exactly
the instances the original accepts (tests/test_schema.py checks each one
against the `jsonschema` validator), so a strict schema that uses them is
enforced, not refused.

  * `dependencies` (drafts 4-7), `dependentRequired`, `dependentSchemas`:
    "if `a` is present, then ..." is "`a` is absent, or ... with `a`":
    `anyOf: [{properties: {a: false}}, {required: [a, ...]}]`;
  * `not: S`, where S is made of `type`, `required`, `properties`, `allOf`,
    `anyOf` and a `const` or `enum` of strings: the negation
    written out (`negate`); keywords apply to their own kind of value only
    (`required` holds for any non-object), so each negated keyword names
    its kind;
  * `oneOf: [B1, ..., Bn]`: exactly one branch, as `anyOf` over
    `Bi and not Bj` (j != i), where the `not Bj` is left out when Bi and Bj
    cannot both hold (`disjoint`);
  * `format`: `json-pointer` and `relative-json-pointer` as their RFC 6901
    patterns; a format name no JSON Schema draft defines ("url", "") is an
    annotation, as the specification says and validators do: dropped, and
    named in the notes (the response's `constraint.warnings`).

What cannot be rewritten exactly is left as it was, for llguidance to refuse
under `strict` (or to approximate, and say so, without it).  Pure: no I/O.
"""

from __future__ import annotations

import copy
import json

MAX_LOWERED = 1 << 20  # bytes of a rewritten schema (a oneOf's negations grow as its branches squared)
MAX_WORD = 256  # characters of a string a `not` excludes (its pattern nests one group a character)
TYPES = ("null", "boolean", "object", "array", "string", "number")
# the formats some JSON Schema draft defines (2020-12's, and draft 3's)
FORMATS = frozenset((
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
    "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
    "relative-json-pointer", "regex", "utc-millisec", "color", "style", "phone", "ip-address", "host-name"))
POINTER = r"(/([^~/]|~[01])*)*"
PATTERNS = {"json-pointer": f"^{POINTER}$", "relative-json-pointer": f"^(0|[1-9][0-9]*)(#|{POINTER})$"}
# keywords that only describe (negating a schema ignores them)
NOTES = frozenset(("title", "description", "default", "examples", "$comment", "$schema", "$id", "id",
                   "readOnly", "writeOnly", "deprecated", "contentMediaType", "contentEncoding"))
# keywords that constrain: a `not` over any of these but the handled ones is left alone
ASSERTIONS = frozenset((
    "type", "enum", "const", "required", "properties", "patternProperties", "additionalProperties",
    "propertyNames", "minProperties", "maxProperties", "items", "prefixItems", "additionalItems", "contains",
    "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "allOf", "anyOf", "oneOf", "not", "if", "then",
    "else", "$ref", "dependencies", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
    "unevaluatedItems", "minContains", "maxContains", "$dynamicRef", "$recursiveRef"))
# keywords that hold for every value but an object
OBJECT_KEYWORDS = frozenset((
    "required", "properties", "patternProperties", "additionalProperties", "propertyNames", "minProperties",
    "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "unevaluatedProperties"))
# where a schema holds schemas: one, a list, or a name -> schema map
ONE = ("additionalProperties", "items", "additionalItems", "contains", "not", "if", "then", "else",
       "propertyNames", "unevaluatedProperties", "unevaluatedItems")
MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
NAMED = ("properties", "patternProperties", "definitions", "$defs")  # dependentSchemas: below
REWRITTEN = ("/oneOf", "/not", "/dependencies", "/dependentSchemas")


def lower(schema):
    """`schema` (parsed JSON) as an equal schema of llguidance's keywords,
    and the notes on what was dropped as an annotation.  The input is not
    changed.  A schema whose `$ref`s point inside a keyword that would be
    rewritten, or whose rewriting would pass MAX_LOWERED bytes, is returned
    as it is."""
    refs: list[str] = []
    _collect_refs(schema, refs)
    if any(part in ref for ref in refs for part in REWRITTEN):
        return schema, []
    notes: list[str] = []
    out = _lower(copy.deepcopy(schema), notes, "#")
    if len(json.dumps(out)) > MAX_LOWERED:  # the negations of many branches multiply
        return schema, []
    return out, notes


def _collect_refs(node, out: list[str]) -> None:
    stack = [node]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str):
                out.append(value["$ref"])
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _lower(s, notes: list[str], where: str):
    if not isinstance(s, dict):
        return s
    for key in ONE:
        if isinstance(s.get(key), (dict, bool)):
            s[key] = _lower(s[key], notes, f"{where}/{key}")
    for key in MANY:
        if isinstance(s.get(key), list):
            s[key] = [_lower(v, notes, f"{where}/{key}/{i}") for i, v in enumerate(s[key])]
    for key in NAMED:
        if isinstance(s.get(key), dict):
            s[key] = {k: _lower(v, notes, f"{where}/{key}/{k}") for k, v in s[key].items()}
    extra = _format(s, notes, where) + _dependencies(s, notes, where) + _not(s) + _one_of(s)
    if extra:
        s["allOf"] = list(s.get("allOf", [])) + extra
    return s


def _format(s: dict, notes: list[str], where: str) -> list:
    name = s.get("format")
    if not isinstance(name, str):
        return []
    if name in PATTERNS:
        del s["format"]
        return [{"pattern": PATTERNS[name]}]
    if name not in FORMATS:
        del s["format"]
        notes.append(f"{where}: format {name!r} is no JSON Schema format; read as an annotation (not enforced)")
    return []


def _dependencies(s: dict, notes: list[str], where: str) -> list:
    out = []
    for key in ("dependencies", "dependentRequired", "dependentSchemas"):
        deps = s.get(key)
        if not isinstance(deps, dict):
            continue
        made = []
        for name, then in deps.items():
            if isinstance(then, list) and all(isinstance(x, str) for x in then):
                present = {"required": [name, *then]}
            elif isinstance(then, (dict, bool)):
                present = {"allOf": [{"required": [name]}, _lower(then, notes, f"{where}/{key}/{name}")]}
            else:
                break  # malformed: the keyword is left for the compiler to name
            made.append({"anyOf": [{"properties": {name: False}}, present]})
        else:
            out.extend(made)
            del s[key]
    return out


def _not(s: dict) -> list:
    if "not" not in s:
        return []
    negation = negate(s["not"])
    if negation is None:
        return []
    del s["not"]
    return [negation]


def _one_of(s: dict) -> list:
    branches = s.get("oneOf")
    if not isinstance(branches, list) or not branches:
        return []
    context = types_of(s)
    out = []
    for i, b in enumerate(branches):
        others = [_not_also(b, c, context) for j, c in enumerate(branches) if j != i]
        if any(o is None for o in others):
            return []
        others = [o for o in others if o is not True]
        if False not in others:  # a branch that holds only where another does adds nothing
            out.append({"allOf": [b, *others]} if others else b)
    del s["oneOf"]
    return [{"anyOf": out} if out else False]


def _not_also(b, c, context: set[str]):
    """What a value meeting `b` must also meet so as not to meet `c`: True
    where they cannot both hold; `type: object` where no object meets both
    and both hold for every other value (keywords of objects alone: every
    non-object meets both, so only objects can meet exactly one); else the
    negation of `c`, or None."""
    if disjoint(b, c, context):
        return True
    if isinstance(b, dict) and isinstance(c, dict) and _objects_only(b) and _objects_only(c) \
            and (_apart(b, c) or _apart(c, b)):
        return {"type": "object"}
    return negate(c)


def _objects_only(s: dict) -> bool:
    """Whether `s` constrains objects alone (every other value meets it)."""
    return all(k in OBJECT_KEYWORDS or k in NOTES or k not in ASSERTIONS for k in s)


# -- negation ------------------------------------------------------------------
def negate(s):
    """A schema accepting exactly what `s` refuses, or None where it cannot
    be written with the keywords handled here."""
    if s is True or s == {}:
        return False
    if s is False:
        return True
    if not isinstance(s, dict):
        return None
    known = [k for k in s if k not in NOTES and k in ASSERTIONS]
    terms = []
    for key in known:
        term = _NEGATE.get(key, lambda v: None)(s[key])
        if term is None:
            return None
        terms.extend(term)
    if not terms:
        return False
    return terms[0] if len(terms) == 1 else {"anyOf": terms}


def _negate_type(t) -> list | None:
    named = _type_names(t)
    if named is None or not named <= set(TYPES) | {"integer"}:
        return None
    if "integer" in named and "number" not in named:
        return None  # the numbers that are not integers have no keyword
    rest = [x for x in TYPES if x not in named]
    return [{"type": rest}] if rest else []


def _negate_required(names) -> list | None:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return [{"type": "object", "properties": {n: False}} for n in names]


def _negate_properties(props) -> list | None:
    if not isinstance(props, dict):
        return None
    out = []
    for name, sub in props.items():
        n = negate(sub)
        if n is None:
            return None
        if n is not False:
            out.append({"type": "object", "required": [name], "properties": {name: n}})
    return out


def _negate_all(items) -> list | None:
    if not isinstance(items, list):
        return None
    out = [negate(x) for x in items]
    return None if any(o is None for o in out) else [o for o in out if o is not False]


def _negate_any(items) -> list | None:
    if not isinstance(items, list):
        return None
    out = [negate(x) for x in items]
    return None if any(o is None for o in out) else [{"allOf": out}]


def _negate_values(values) -> list | None:
    """`not {enum: [...]}` of strings: any other type, or a string outside
    the set (a pattern of the strings that are none of them)."""
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values) \
            or max(map(len, values)) > MAX_WORD:
        return None
    return [{"type": [x for x in TYPES if x != "string"]}, {"type": "string", "pattern": _none_of(values)}]


_NEGATE = {"type": _negate_type, "required": _negate_required, "properties": _negate_properties,
           "allOf": _negate_all, "anyOf": _negate_any, "enum": _negate_values,
           "const": lambda v: _negate_values([v])}


def _none_of(words: list[str]) -> str:
    """A regex (full match) of the strings that are none of `words`: a
    string is one of them exactly when it walks the words' trie to a word's
    end, so the others leave the trie, or stop where no word ends."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}
    return "^" + _off(trie) + "$"


def _off(node: dict) -> str:
    """The strings that, read from `node`, end off every word."""
    chars = sorted(k for k in node if k)
    ways = []
    if "" not in node:
        ways.append("")  # stop here: no word ends here
    other = "[^" + "".join(_escape(c) for c in chars) + "]" if chars else "[\\s\\S]"
    ways.append(f"{other}[\\s\\S]*")  # a character no word has here, then anything
    ways.extend(_escape(c) + f"(?:{_off(node[c])})" for c in chars)
    return "(?:" + "|".join(ways) + ")"


def _escape(c: str) -> str:
    """A character as itself in a regex, in a class or out of one."""
    return c if c.isalnum() and c.isascii() else "\\x{%x}" % ord(c)


# -- when two branches cannot both hold ---------------------------------------
def types_of(s) -> set[str]:
    """The kinds of value `s` can accept, as far as its `type`, `const` and
    `enum` say ("integer" read as "number")."""
    if s is False:
        return set()
    if not isinstance(s, dict):
        return set(TYPES)
    out = set(TYPES)
    named = _type_names(s.get("type"))
    if named is not None:
        out &= {"number" if x == "integer" else x for x in named}
    values = _listed(s)
    if values is not None:
        out &= {_kind(v) for v in values}
    return out


def _type_names(t) -> set[str] | None:
    """A `type`'s names, or None where it names none (absent, or malformed:
    left for the compiler to name)."""
    if isinstance(t, str):
        return {t}
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return set(t)
    return None


def _listed(s: dict) -> list | None:
    """The values a `const` or `enum` allows, or None where it has neither."""
    values = [s["const"]] if "const" in s else s.get("enum")
    return values if isinstance(values, list) else None


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string"}[type(v)]


def disjoint(a, b, context: set[str] = set(TYPES)) -> bool:
    """True only where no value can meet both `a` and `b` (inside a schema
    whose own types are `context`); False where that is not shown."""
    kinds = types_of(a) & types_of(b) & context
    if not kinds:
        return True
    if kinds != {"object"} or not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return _apart(a, b) or _apart(b, a)


def _apart(a: dict, b: dict) -> bool:
    """Objects: a key `a` requires that `b` refuses, or whose values the two
    allow from sets with nothing in common."""
    required = [n for n in a["required"] if isinstance(n, str)] if isinstance(a.get("required"), list) else []
    props_a = a.get("properties") if isinstance(a.get("properties"), dict) else {}
    props_b = b.get("properties") if isinstance(b.get("properties"), dict) else {}
    closed = b.get("additionalProperties") is False and not b.get("patternProperties")
    for name in required:
        if props_b.get(name) is False or (closed and name not in props_b):
            return True
        va, vb = _values(props_a.get(name)), _values(props_b.get(name))
        if va is not None and vb is not None and not (va & vb):
            return True
    return False


def _values(s) -> set[str] | None:
    values = _listed(s) if isinstance(s, dict) else None
    if values is None:
        return None
    return {json.dumps(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v,
                       sort_keys=True) for v in values}
