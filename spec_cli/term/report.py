"""Bench's result as one self-contained HTML file (`spec-cli bench --html`,
`spec-cli report bench.json`): readable offline, nothing fetched.

The plots are inline SVG written here, not matplotlib: the file then needs
no plotting stack on the machine that runs bench (often a bare server), it
stays a few tens of kB, its text is selectable and scales, and every mark
carries the number it draws (`data-value`), so a test reads the numbers
back and checks them against the JSON, which is embedded too.

What it shows: the machine, mode, clock and sampling; speedup per prompt
set (end to end, median, with the spread over prompts) with the oracle's
ceiling marked and the 1.0x line; acceptance by draft position; the
accepted length per drafting step; tokens per second per prompt; the
table of every set; the JSON.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

W, BAR_H, GAP = 760, 18, 6
COLOURS = ("#1f7a4d", "#2f6db5", "#b5612f", "#7a3fb5", "#b53f62", "#3f9fb5", "#7a7a2f")
REFERENCES = ("oracle", "ngram-oracle")


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _name(s: dict) -> str:
    return Path(s["file"]).stem


def _bars(rows: list[tuple[str, float, str, dict]], *, chart: str, unit: str, scale: float,
          marks: dict[str, float] | None = None, baseline: float | None = None) -> str:
    """Horizontal bars: (label, value, colour, extra data attributes)."""
    left, width = 230, W - 230 - 70
    h = len(rows) * (BAR_H + GAP) + 24
    out = [f'<svg class="chart" data-chart="{chart}" viewBox="0 0 {W} {h}" width="{W}" height="{h}" '
           f'role="img" xmlns="http://www.w3.org/2000/svg">']
    x = lambda v: left + width * min(max(v, 0.0), scale) / scale  # noqa: E731
    for i, (label, value, colour, data) in enumerate(rows):
        y = 4 + i * (BAR_H + GAP)
        attrs = "".join(f' data-{k}="{_esc(v)}"' for k, v in data.items())
        out.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{_esc(label)}</text>')
        out.append(f'<rect class="bar" x="{left}" y="{y}" width="{x(value) - left:.1f}" height="{BAR_H}" '
                   f'fill="{colour}" data-label="{_esc(label)}" data-value="{value!r}"{attrs}>'
                   f'<title>{_esc(label)}: {value:.3g}{unit}</title></rect>')
        mark = marks.get(label) if marks else None
        after = max(x(value), x(mark) if mark is not None else 0.0)  # the number clear of the ceiling's tick
        out.append(f'<text x="{after + 4:.1f}" y="{y + 13}">{value:.2f}{unit}</text>')
        if mark is not None:
            out.append(f'<line class="ceiling" x1="{x(mark):.1f}" x2="{x(mark):.1f}" y1="{y - 2}" '
                       f'y2="{y + BAR_H + 2}" stroke="#222" stroke-width="2" data-label="{_esc(label)}" '
                       f'data-value="{mark!r}"><title>the oracle: {mark:.2f}{unit}</title></line>')
    if baseline is not None:
        out.append(f'<line class="baseline" x1="{x(baseline):.1f}" x2="{x(baseline):.1f}" y1="0" y2="{h - 18}" '
                   f'stroke="#c33" stroke-dasharray="4 3" data-value="{baseline!r}"/>'
                   f'<text x="{x(baseline):.1f}" y="{h - 4}" text-anchor="middle" fill="#c33">'
                   f'{baseline:g}{unit}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _speedups(sets: list[dict]) -> str:
    """Each set's proposers (the references apart) as bars, the oracle's
    speedup marked on each, the 1.0x line."""
    oracle = {(s["file"], s["proposer"].partition("/")[2]): s["speedup_e2e_median"] for s in sets
              if s["proposer"].split("/")[0] == "oracle"}
    rows, marks = [], {}
    names = sorted({s["proposer"] for s in sets})
    for s in sets:
        if s["proposer"].split("/")[0] in REFERENCES:
            continue
        label = f"{_name(s)} · {s['proposer']}"
        colour = COLOURS[names.index(s["proposer"]) % len(COLOURS)]
        rows.append((label, s["speedup_e2e_median"], colour,
                     {"set": _name(s), "proposer": s["proposer"], "min": s["speedup_e2e_min"],
                      "max": s["speedup_e2e_max"]}))
        top = oracle.get((s["file"], s["proposer"].partition("/")[2]))
        if top is not None:
            marks[label] = top
    if not rows:
        return "<p>No proposer but the references was run.</p>"
    scale = max([r[1] for r in rows] + list(marks.values()) + [1.0]) * 1.1
    return _bars(rows, chart="speedup", unit="×", scale=scale, marks=marks, baseline=1.0)


def _columns(groups: list[tuple[str, list[float], list[dict]]], *, chart: str, axis: str) -> str:
    """A row of columns for each group (label, values in [0, 1], each
    column's data attributes): small multiples, one scale."""
    left, col, band = 230, 16, 62
    h = len(groups) * band + 8
    out = [f'<svg class="chart" data-chart="{chart}" viewBox="0 0 {W} {h}" width="{W}" height="{h}" '
           f'role="img" xmlns="http://www.w3.org/2000/svg">']
    for g, (label, values, data) in enumerate(groups):
        base = g * band + 48
        out.append(f'<text x="{left - 8}" y="{base - 16}" text-anchor="end">{_esc(label)}</text>')
        out.append(f'<line x1="{left}" x2="{left + len(values) * (col + 3)}" y1="{base}" y2="{base}" stroke="#999"/>')
        for i, (v, d) in enumerate(zip(values, data)):
            x, top = left + i * (col + 3), 40 * min(max(v, 0.0), 1.0)
            attrs = "".join(f' data-{k}="{_esc(val)}"' for k, val in d.items())
            out.append(f'<rect class="bar" x="{x}" y="{base - top:.1f}" width="{col}" height="{top:.1f}" '
                       f'fill="{COLOURS[g % len(COLOURS)]}" data-label="{_esc(label)}" data-value="{v!r}"{attrs}>'
                       f'<title>{axis} {i + 1 if axis == "position" else i}: {v:.0%}</title></rect>')
            out.append(f'<text x="{x + col / 2}" y="{base + 12}" text-anchor="middle" font-size="10">'
                       f'{i + 1 if axis == "position" else i}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _drafting(sets: list[dict]) -> list[dict]:
    return [s for s in sets if s["proposer"].split("/")[0] not in REFERENCES]


def _positions(sets: list[dict]) -> str:
    groups = [(f"{_name(s)} · {s['proposer']}", list(s.get("per_position") or []),
               [{"set": _name(s), "proposer": s["proposer"], "position": i + 1}
                for i in range(len(s.get("per_position") or []))])
              for s in _drafting(sets) if s.get("per_position")]
    if not groups:
        return "<p>Nothing was drafted.</p>"
    return _columns(groups, chart="per-position", axis="position")


def _accepted(sets: list[dict]) -> str:
    groups = []
    for s in _drafting(sets):
        hist = s.get("accepted_hist") or []
        total = sum(hist)
        if total:
            groups.append((f"{_name(s)} · {s['proposer']}", [n / total for n in hist],
                           [{"set": _name(s), "proposer": s["proposer"], "accepted": a, "steps": n}
                            for a, n in enumerate(hist)]))
    if not groups:
        return "<p>Nothing was drafted.</p>"
    return _columns(groups, chart="accepted-length", axis="kept")


def _per_prompt(sets: list[dict]) -> str:
    rows, seen = [], set()
    names = sorted({s["proposer"] for s in sets})
    for s in sets:
        speeds = s.get("per_prompt_tokens_per_s") or []
        if s["file"] not in seen:  # the target alone, once per set
            seen.add(s["file"])
            for i, v in enumerate(s.get("per_prompt_baseline_tokens_per_s") or []):
                rows.append((f"{_name(s)} · target alone · {i + 1}", v, "#888",
                             {"set": _name(s), "proposer": "none", "prompt": i + 1}))
        for i, v in enumerate(speeds):
            rows.append((f"{_name(s)} · {s['proposer']} · {i + 1}", v, COLOURS[names.index(s["proposer"]) % len(COLOURS)],
                         {"set": _name(s), "proposer": s["proposer"], "prompt": i + 1}))
    if not rows:
        return "<p>No per-prompt numbers in this result (an older bench?).</p>"
    return _bars(rows, chart="per-prompt", unit=" tok/s", scale=max(r[1] for r in rows) * 1.15 or 1.0)


def _table(sets: list[dict]) -> str:
    cols = [("set", lambda s: _name(s)), ("proposer", lambda s: s["proposer"]), ("prompts", lambda s: s["prompts"]),
            ("speedup (end to end)", lambda s: f"{s['speedup_e2e_median']:.2f}× "
                                               f"({s['speedup_e2e_min']:.2f}–{s['speedup_e2e_max']:.2f})"),
            ("generation speedup", lambda s: f"{s['speedup_median']:.2f}×"),
            ("tok/s", lambda s: f"{s['tokens_per_s']:.1f}"),
            ("target alone tok/s", lambda s: f"{s['baseline_tokens_per_s']:.1f}"),
            ("acceptance", lambda s: f"{s['acceptance_rate']:.0%}"),
            ("mean accepted", lambda s: f"{s['mean_accepted']:.2f}"),
            ("of the ceiling", lambda s: "" if s.get("ceiling_share") is None else f"{s['ceiling_share']:.0%}"),
            ("same text", lambda s: "" if s.get("agreement") is None else f"{s['agreement']:.0%}")]
    head = "".join(f"<th>{_esc(c)}</th>" for c, _ in cols)
    body = "".join("<tr>" + "".join(f"<td>{_esc(f(s))}</td>" for _, f in cols) + "</tr>" for s in sets)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(result: dict) -> str:
    """The report for one bench result (the object `bench --json` prints)."""
    sets = result.get("sets") or []
    m = result.get("machine") or {}
    sampling = ("greedy" if not result.get("temperature") else
                f"temperature {result.get('temperature')}, top-k {result.get('top_k')}, "
                f"top-p {result.get('top_p')}, min-p {result.get('min_p')}")
    facts = [("target", result.get("target")), ("draft", result.get("draft") or ("its own MTP layers"
                                                                                 if result.get("mtp") else "none")),
             ("machine", f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores"), ("mode", result.get("mode")),
             ("clock", result.get("clock")), ("sampling", sampling), ("rules", ", ".join(result.get("rules") or [])),
             ("tokens a prompt", result.get("max_tokens")), ("seed", result.get("seed")),
             ("llama-cpp-python", m.get("llama_cpp_python")), ("choices made by", m.get("sampling"))]
    header = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in facts if v not in (None, ""))
    data = json.dumps(result, ensure_ascii=False).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>spec-cli bench: {_esc(result.get('target', ''))}</title>
<style>
 body {{ font: 14px/1.5 system-ui, sans-serif; color: #1d2733; max-width: 980px; margin: 24px auto; padding: 0 16px; }}
 dl {{ display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; }} dt {{ color: #6b7785; }} dd {{ margin: 0; }}
 svg text {{ font: 12px system-ui, sans-serif; fill: #1d2733; }}
 table {{ border-collapse: collapse; font-size: 12px; }} td, th {{ border-bottom: 1px solid #dde3ea; padding: 3px 8px; text-align: left; }}
 details pre {{ font-size: 11px; white-space: pre-wrap; }}
</style></head><body>
<h1>spec-cli bench</h1>
<dl>{header}</dl>
<h2>Speedup over the target alone, end to end</h2>
<p>Median over the prompts of each set; the black tick is the oracle's (perfect drafts, the ceiling); the red line is 1.0×.</p>
{_speedups(sets)}
<h2>Acceptance by draft position</h2>
<p>Of the drafts that reached position 1, 2, 3, …, the share the target kept.</p>
{_positions(sets)}
<h2>Accepted length per drafting step</h2>
<p>The share of drafting steps that kept 0, 1, 2, … tokens of their draft (the column's number).</p>
{_accepted(sets)}
<h2>Tokens per second, prompt by prompt</h2>
{_per_prompt(sets)}
<h2>Every set</h2>
{_table(sets)}
<details><summary>The result as JSON</summary><pre>{_esc(json.dumps(result, indent=1, ensure_ascii=False))}</pre></details>
<script type="application/json" id="bench-data">{data}</script>
</body></html>
"""


def write(result: dict, path: Path) -> None:
    from ..errors import SpecError

    try:
        Path(path).write_text(render(result), encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot write the report {path}: {e.strerror}") from e
