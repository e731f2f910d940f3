"""A `Table` (orchestrator/config/tables.py) rendered: as Markdown (the console and the .md files), as HTML (the
report), in long form (one row per cell, with its state) and in wide form (the paper's layout as Parquet, a state
column beside each value column). Every form says the same of a cell: a number, a partial mean marked `*`,
`missing`, `failed`, `damaged` (with its ledger file: the `why` columns, the HTML cell's title and link) or
`undefined` with its reason; the best complete value of a column on each backbone is bold, in tables whose rows are
compared (`Table.compare_rows`: not the agreement tables of Kendall's tau, nor the signals' correlations)."""
from __future__ import annotations

import html
import json
import math
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.config.tables import Table

LEGEND = ("A number over every trial the cell asks for; `*`: a mean over fewer (some did not run); `missing`: never "
          "run; `failed`: a trial failed (see Errors); `damaged`: a trial's ledger entry could not be read as one (set "
          "aside in ledger/damaged/, named under Damaged ledger entries and in the Parquet `why` columns; resume runs "
          "it again); `undefined (why)`: the trials ran but the statistic has no "
          "value, e.g. a rank correlation across configurations whose R@1 (or signal) is the same for all of them "
          "(constant R@1, constant signal). Best complete value per column and backbone in bold, where the rows are "
          "methods to compare (not Kendall's tau rows). `±`: half the 95% interval, over seeds (Student's t) or, "
          "with one seed, a bootstrap over queries.")


def column_name(t: Table, col: tuple[str, str]) -> str:
    """A column's name in Markdown and Parquet: its own, or "group name" where names repeat across groups (Table 13:
    "skewness Clean", "Robin Hood Clean")."""
    names = [c[1] for c in t.columns]
    return f"{col[0]} {col[1]}".strip() if len(set(names)) < len(names) else col[1]


def table_markdown(t: Table) -> str:
    best = t.best()
    lines = ["| backbone | method | " + " | ".join(column_name(t, c) for c in t.columns) + " |",
             "|---|---|" + "---:|" * len(t.columns)]
    for r in t.rows:
        vals = []
        for c in t.columns:
            v = t.cell(r, c)
            s = v.text(t.digits)
            vals.append(f"**{s}**" if v.state == "ok" and best.get((r[0], c)) == v.value else s)
        lines.append(f"| {r[0]} | {r[1]} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def table_html(t: Table) -> str:
    best = t.best()
    groups: list[list] = []
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
        out.append("<tr>" + "".join(f"<th>{esc(c.split('/')[-1])}</th>" for _, c in t.columns) + "</tr>")
    else:
        out.append("<tr><th>backbone</th><th>method</th>" + "".join(f"<th>{esc(c)}</th>" for _, c in t.columns)
                   + "</tr>")
    for r in t.rows:
        cells = []
        for c in t.columns:
            v = t.cell(r, c)
            text = esc(v.text(t.digits))
            if v.state == "failed":
                cells.append(f'<td class="failed"><a href="#err-{esc(v.key)}">failed</a></td>')
            elif v.state == "damaged":
                cells.append(f'<td class="damaged" title="{esc(v.why)}"><a href="#dmg-{esc(v.key)}">damaged</a></td>')
            elif v.state == "missing":
                cells.append('<td class="missing">missing</td>')
            elif v.state == "undefined":
                title = f' title="{esc(v.of)}"' if v.of else ""
                cells.append(f'<td class="undefined"{title}>{text}</td>')
            else:
                what = ([f"mean over {v.of}"] if v.of else []) + (
                    [f"95% interval [{v.low:.{t.digits}f}, {v.high:.{t.digits}f}]"] if v.has_interval else [])
                title = f' title="{esc("; ".join(what))}"' if what else ""
                bold = v.state == "ok" and best.get((r[0], c)) == v.value
                cells.append(f'<td class="{v.state}"{title}>' + (f"<b>{text}</b>" if bold else text) + "</td>")
        out.append(f"<tr><td>{esc(r[0])}</td><td>{esc(r[1])}</td>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def long_frame(tables: list[Table]) -> pd.DataFrame:
    """Every cell of `tables`, one row each: where it is, its value (null without one) and its state."""
    rows = []
    for t in tables:
        for r in t.rows:
            for c in t.columns:
                v = t.cell(r, c)
                rows.append({"table": t.name, "title": t.title, "dataset": str(t.keys.get("dataset", "")),
                             "direction": str(t.keys.get("direction", "")),
                             "severity": str(t.keys.get("severity", "")), "backbone": r[0], "method": r[1],
                             "group": c[0], "column": c[1], "value": None if math.isnan(v.value) else v.value,
                             "state": v.state, "of": v.of or None, "error_key": v.key or None,
                             "low": v.low if v.has_interval else None, "high": v.high if v.has_interval else None,
                             "seed_values": json.dumps(v.seeds) if v.seeds else None, "why": v.why or None})
    return pd.DataFrame(rows, columns=["table", "title", "dataset", "direction", "severity", "backbone", "method",
                                       "group", "column", "value", "state", "of", "error_key", "low", "high",
                                       "seed_values", "why"])


def wide_frame(t: Table) -> pd.DataFrame:
    """The table in its paper layout: its keys, backbone and method, one value column per column (null where the
    cell has no number), then a `<column>:state` column per column (ok / partial / failed / damaged / missing /
    undefined);
    where cells have intervals, `<column>:low` / `<column>:high`, where they ran at several seeds, each seed's value
    (`<column>:seed<N>`), and where a cell is undefined or damaged, why (`<column>:why`: the reason, or the damaged
    entry's file; null elsewhere). Built column by column,
    the numbers as float64 arrays: a frame of rows cast afterwards took 60% of writing the full matrix's tables
    (docs/notes/2026-11-29-finish.md)."""
    names = [column_name(t, c) for c in t.columns]
    grid = [[t.cell(r, c) for c in t.columns] for r in t.rows]   # the cells, row by row
    all_cells = [v for row in grid for v in row]
    seeds = sorted({s for v in all_cells for s in v.seeds})
    extra = (["low", "high"] if any(v.has_interval for v in all_cells) else []) + [f"seed{s}" for s in seeds]
    why = any(v.why for v in all_cells)
    data: dict[str, Any] = {k: [v] * len(t.rows) for k, v in t.keys.items()}
    data["backbone"], data["method"] = [r[0] for r in t.rows], [r[1] for r in t.rows]

    def numbers(values) -> np.ndarray:
        return np.array([math.nan if v is None else v for v in values], dtype="float64")

    for j, n in enumerate(names):
        data[n] = numbers(row[j].number for row in grid)
    for j, n in enumerate(names):
        data[f"{n}:state"] = [row[j].state for row in grid]
    for j, n in enumerate(names):
        if "low" in extra:
            data[f"{n}:low"] = numbers(row[j].low if row[j].has_interval else None for row in grid)
            data[f"{n}:high"] = numbers(row[j].high if row[j].has_interval else None for row in grid)
        for s in seeds:
            data[f"{n}:seed{s}"] = numbers(row[j].seeds.get(s) for row in grid)
    if why:
        for j, n in enumerate(names):
            data[f"{n}:why"] = [row[j].why or None for row in grid]
    cols = [*t.keys, "backbone", "method", *names, *(f"{n}:state" for n in names),
            *(f"{n}:{e}" for n in names for e in extra), *(f"{n}:why" for n in names if why)]
    return pd.DataFrame(data, columns=cols)
