"""A `Table` (orchestrator/config/tables.py) as Markdown, as HTML and in long form (one row per cell, with its state):
missing and failed cells read as such, partial means carry `*`, the best value of a column is bold."""
from __future__ import annotations

import html
import math

import pandas as pd

from orchestrator.config.tables import Table, Value


# -- output ---------------------------------------------------------------------------------------------------------
def table_markdown(t: Table) -> str:
    groups = [g for g, _ in t.columns]
    head = [f"{g} {c}".strip() if len(set(groups)) > 1 else c for g, c in t.columns]
    best = t.best()
    lines = ["| backbone | method | " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(t.columns)]
    for r in t.rows:
        vals = []
        for c in t.columns:
            v = t.cells.get((r, c), Value())
            s = v.text(t.digits)
            vals.append(f"**{s}**" if v.state in ("ok", "partial") and best.get(c) == v.value else s)
        lines.append(f"| {r[0]} | {r[1]} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def table_html(t: Table) -> str:
    best = t.best()
    groups = []
    for g, _ in t.columns:
        if groups and groups[-1][0] == g:
            groups[-1][1] += 1
        else:
            groups.append([g, 1])
    esc = html.escape
    out = [f'<table class="results" data-name="{esc(t.name)}">']
    if any(g for g, _ in groups):
        out.append('<tr><th rowspan="2">backbone</th><th rowspan="2">method</th>' + "".join(
            f'<th colspan="{n}" class="group">{esc(g)}</th>' for g, n in groups) + "</tr>")
        out.append("<tr>" + "".join(f"<th>{esc(c)}</th>" for _, c in t.columns) + "</tr>")
    else:
        out.append("<tr><th>backbone</th><th>method</th>" + "".join(f"<th>{esc(c)}</th>" for _, c in t.columns)
                   + "</tr>")
    for r in t.rows:
        cells = []
        for c in t.columns:
            v = t.cells.get((r, c), Value())
            text = esc(v.text(t.digits))
            if v.state == "failed":
                cells.append(f'<td class="failed"><a href="#err-{esc(v.key)}">failed</a></td>')
            elif v.state == "missing":
                cells.append('<td class="missing">missing</td>')
            else:
                title = f' title="mean over {esc(v.of)}"' if v.of else ""
                bold = best.get(c) == v.value
                cells.append(f'<td class="{v.state}"{title}>' + (f"<b>{text}</b>" if bold else text) + "</td>")
        out.append(f"<tr><td>{esc(r[0])}</td><td>{esc(r[1])}</td>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def long_frame(tables: list[Table]) -> pd.DataFrame:
    rows = []
    for t in tables:
        for r in t.rows:
            for c in t.columns:
                v = t.cells.get((r, c), Value())
                rows.append({"table": t.name, "title": t.title, "dataset": str(t.keys.get("dataset", "")),
                             "direction": str(t.keys.get("direction", "")),
                             "severity": str(t.keys.get("severity", "")), "backbone": r[0], "method": r[1],
                             "group": c[0], "column": c[1], "value": None if math.isnan(v.value) else v.value,
                             "state": v.state, "error_key": v.key or None})
    return pd.DataFrame(rows, columns=["table", "title", "dataset", "direction", "severity", "backbone", "method",
                                       "group", "column", "value", "state", "error_key"])


