"""Function calling on the Berkeley Function-Calling Leaderboard's cases,
scored by its own AST checker, against any OpenAI-compatible server
(spec-cli serve, or llama-server --jinja, side by side).

    pip install --no-deps bfcl-eval==2026.3.23     # its data and its checker (not its model clients)
    python tools/bfcl.py --url http://127.0.0.1:8012 --n 20
    python tools/bfcl.py --url http://127.0.0.1:8080 --n 20     # llama-server, the same cases

Each case's question goes to /v1/chat/completions with its functions as
`tools` (BFCL's types made JSON Schema's: dict -> object, float -> number,
tuple -> array), tool_choice auto, greedy, 256 tokens.  The calls that come
back are scored by bfcl_eval's ast_checker (the categories simple_python,
multiple, parallel, parallel_multiple; irrelevance: right where no call
comes).  Besides the checker's verdict, each call's arguments are checked
against its tool's schema (jsonschema), and for the parallel categories
how many cases got every call the answer needs.

The checker module imports bfcl_eval's model registry, which imports every
vendor's client; only one value of it is read (whether a model's function
names had '.' made '_': not here), so that registry is replaced by that
one value before the import.  The checker's code runs as published.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
import urllib.request
from pathlib import Path

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def checker():
    """bfcl_eval's ast_checker and Language, its model registry reduced to the one value read."""
    registry = types.ModuleType("bfcl_eval.constants.model_config")

    class _Any(dict):
        def __missing__(self, key):
            return types.SimpleNamespace(underscore_to_dot=False)
    registry.MODEL_CONFIG_MAPPING = _Any()
    sys.modules["bfcl_eval.constants.model_config"] = registry
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    return ast_checker, Language


def json_schema(node):
    """A BFCL parameter schema as JSON Schema."""
    if isinstance(node, list):
        return [json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, str):
            if TYPES.get(v, v) is not None:
                out["type"] = TYPES.get(v, v)
        elif k == "properties" and isinstance(v, dict):  # its keys are parameter names, not keywords
            out[k] = {name: json_schema(p) for name, p in v.items()}
        else:
            out[k] = json_schema(v)
    return out


def load(data: Path, category: str, n: int) -> list[tuple[dict, list | None]]:
    name = f"BFCL_v4_{category}.json"
    questions = [json.loads(line) for line in (data / name).read_text().splitlines() if line.strip()]
    answers = {}
    if category != "irrelevance":
        for line in (data / "possible_answer" / name).read_text().splitlines():
            if line.strip():
                a = json.loads(line)
                answers[a["id"]] = a["ground_truth"]
    step = max(1, len(questions) // n)  # spread over the set
    picked = questions[::step][:n]
    return [(q, answers.get(q["id"])) for q in picked]


def ask(url: str, q: dict, key: str | None) -> tuple[list, float]:
    tools = [{"type": "function", "function": {"name": f["name"], "description": f.get("description", ""),
                                               "parameters": json_schema(f["parameters"])}} for f in q["function"]]
    body = {"messages": q["question"][0], "tools": tools, "tool_choice": "auto", "temperature": 0,
            "max_tokens": 256, "model": "m"}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json",
                                  **({"Authorization": f"Bearer {key}"} if key else {})})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        reply = json.load(r)
    calls = reply["choices"][0]["message"].get("tool_calls") or []
    return calls, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8012")
    ap.add_argument("--n", type=int, default=20, help="cases a category, spread over it")
    ap.add_argument("--categories", default=",".join(CATEGORIES))
    ap.add_argument("--key", default=None)
    ap.add_argument("--out", default=None, help="write every case's calls and verdict here (JSON lines)")
    args = ap.parse_args()
    ast_checker, Language = checker()
    import bfcl_eval
    import jsonschema

    data = Path(bfcl_eval.__file__).parent / "data"
    out = open(args.out, "w") if args.out else None
    print(f"{'category':<18} {'cases':>5} {'right':>6} {'args valid':>10} {'all calls':>9} {'median s':>8}")
    for cat in args.categories.split(","):
        right = valid = checked = every = 0
        times = []
        cases = load(data, cat, args.n)
        for q, answer in cases:
            try:
                calls, seconds = ask(args.url, q, args.key)
            except Exception as e:  # a server's refusal: the case counts as wrong, and says why
                calls, seconds = [], 0.0
                print(f"  {q['id']}: {e}", file=sys.stderr)
            times.append(seconds)
            schemas = {f["name"]: json_schema(f["parameters"]) for f in q["function"]}
            model_output, ok_args = [], True
            for c in calls:
                name = c["function"]["name"]
                try:
                    a = json.loads(c["function"]["arguments"])
                except ValueError:
                    a, ok_args = {}, False
                else:
                    try:
                        jsonschema.validate(a, schemas.get(name, {}))
                    except jsonschema.ValidationError:
                        ok_args = False
                model_output.append({name: a})
            checked += bool(calls)
            valid += bool(calls) and ok_args
            if cat == "irrelevance":
                ok = not calls
            else:
                verdict = ast_checker(q["function"], model_output, answer, Language.PYTHON, cat, "spec-cli")
                ok = verdict["valid"]
                every += len(calls) >= len(answer)
            right += ok
            if out:
                out.write(json.dumps({"id": q["id"], "calls": model_output, "right": ok}) + "\n")
        times.sort()
        many = f"{every}/{len(cases)}" if cat.startswith("parallel") else "-"
        print(f"{cat:<18} {len(cases):>5} {right:>3}/{len(cases):<2} {valid:>5}/{checked:<4} {many:>9} "
              f"{times[len(times) // 2]:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
