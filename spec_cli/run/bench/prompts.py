"""Bench's prompt sets: JSON-lines files of {id, kind, prompt} items, with
a `schema` (a JSON schema) or a `grammar` (GBNF) to generate under; an item
with a schema and no prompt is asked for a value of it (SCHEMA_ASK).  And
an answer under a JSON schema checked: does it parse, does it validate."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import SpecError

# what a schema-only item (JSONSchemaBench's) asks for, as its benchmark does: a value, the schema shown
SCHEMA_ASK = "Give an example of a JSON value that follows this JSON schema. Answer with the JSON only.\n\n{schema}"


def load_prompts(path: Path, n: int | None) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise SpecError(f"cannot read prompt file {path}: {e.strerror}") from e
    items = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            schema, grammar = item.get("schema"), item.get("grammar")
            prompt = item["prompt"] if "prompt" in item or schema is None else SCHEMA_ASK.format(
                schema=json.dumps(schema, ensure_ascii=False))
            kind = item.get("kind", "chat")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SpecError(f"{path}:{i}: not a prompt line ({e})",
                            hint='Each line is a JSON object: {"id": ..., "kind": "completion"|"chat", "prompt": ...} '
                                 '(with "schema" or "grammar" to constrain it; a schema alone asks for a value).') from e
        if kind not in ("completion", "chat"):
            raise SpecError(f"{path}:{i}: kind must be 'completion' or 'chat', not {kind!r}")
        if grammar is not None and not isinstance(grammar, str):
            raise SpecError(f"{path}:{i}: 'grammar' must be a GBNF grammar as a string")
        items.append({"id": str(item.get("id", f"{path.name}:{i}")), "kind": kind, "prompt": prompt,
                      "schema": schema, "grammar": grammar})
    if not items:
        raise SpecError(f"{path} holds no prompts")
    return items[:n] if n else items


def constraint_of(pair, item: dict):
    """The item's schema or grammar compiled for the target (None: none)."""
    from ...core.constraint import Spec
    from ...llama.grammar import compile_for

    if item["schema"] is None and item["grammar"] is None:
        return None
    spec = (Spec.json_schema(item["schema"], f"{item['id']} schema") if item["schema"] is not None
            else Spec("gbnf", item["grammar"], f"{item['id']} grammar"))
    return compile_for(pair.target.vocab, spec)


def valid(text: str, spec) -> tuple[bool, bool | None]:
    """(parses as JSON, validates against the spec's schema: None where the
    jsonschema package is not installed)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False, False
    try:
        import jsonschema
    except ImportError:
        return True, None
    if spec.kind == "json_object":
        return True, isinstance(value, dict)
    try:
        jsonschema.validate(value, json.loads(spec.text))
        return True, True
    except jsonschema.ValidationError:
        return True, False
    except jsonschema.SchemaError:
        return True, None
