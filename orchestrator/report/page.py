"""The grid's report: `results/<grid>/report/` with a self-contained `index.html` (tables and plots inline, no
network), `report.md`, `report_tables.parquet` (every table cell in long form, with its state) and `plots/*.png`.

- Query shift, per (dataset, direction), in the paper's Table 1 layout: rows backbone x method (Source first),
  columns the grid's query perturbations grouped by their level (registry metadata: low / mid / high for video,
  character / word / sentence for text) and their average, each cell the mean over the grid's severities; the
  per-severity tables (the paper's Tables 32-35) below; the best value of each column on each backbone in bold.
- Hubness (Table 13): k-occurrence skewness, Robin Hood index and antihub occurrence, clean vs shifted.
- The other scenarios' tables (query-gallery shift, mixed shift) as their scenarios lay them out (orchestrator/
  scenarios).
- Plots (matplotlib, Agg): R@1 against severity per type per method (Fig. 13), k-occurrence histograms clean vs
  shifted vs adapted for one cell (Fig. 2, from the ledger's k-occurrence counts), similarity heatmaps before and
  after adaptation (Fig. 9, from the fp16 score matrices trials save: runtime.save_scores), R@1 over the stream
  (each trial's per-batch R@1) and the TTA cost per query per method (Table 8).

A cell the grid asks for that never ran reads "missing"; a failed one reads "failed", linked to its error at the end
of the page; one whose ledger entry is damaged reads "damaged", linked to its file under "Damaged ledger entries"
(orchestrator/record/ledger.py). None is ever a zero, and averages over incomplete groups are marked with `*`.
"""
from __future__ import annotations

import base64
import html
import shutil
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.config.tables import Table, Value
from orchestrator.record.ledger import DAMAGED, PER_QUERY, count_text
from orchestrator.report.formats import LEGEND, long_frame, table_html, table_markdown
from orchestrator.report.plots import (
    _list,
    focus_cell,
    paper_protocol,
    plot_cost,
    plot_diagnostics,
    plot_k_occurrence,
    plot_protocol_streams,
    plot_severity,
    plot_similarity,
    plot_stream,
)
from orchestrator.report.clean import clean_table
from orchestrator.report.results import analysis_tables, grid_configs, scenario_tables
from orchestrator.report.rows import QS, method_rows, planned_rows, table_order
from orchestrator.report.selection import plot_selection
from workloads.spec import TrialSpec

REPORT_DIR = "report"


def report_sections(grid, df: pd.DataFrame,
                    computed: dict[str, list[Table]] | None = None) -> list[tuple[str, list[Table]]]:
    """The report's tables, by section: every scenario's (query shift first: R@1, skewness, Table 13), the paired
    differences to Source and the hyperparameter selection (orchestrator/report/selection.py), the TTA cost, and
    the clean Source cells beside the papers' clean numbers (orchestrator/report/clean.py). The scenarios' tables
    are those of the grid's Parquet and Markdown files (orchestrator/report/results.py): `computed`, when they were
    made already."""
    sections: list[tuple[str, list[Table]]] = []
    computed = scenario_tables(grid, df) if computed is None else computed
    for name, tables in computed.items():
        if not tables:
            continue
        if name == QS:
            for stem, head in (("qs_R1", "Query shift: R@1 (Table 1 layout; per severity: Tables 32-35)"),
                               ("qs_hub_skewness", "Query shift: k-occurrence skewness"),
                               ("hubness", "Hubness (Table 13)"),
                               ("diagnostics", "Uniformity and modality gap (TCR's Table 12)")):
                mine = [t for t in tables if t.name.removesuffix("_mean") == stem]
                if mine:
                    sections.append((head, mine))
        else:
            sections.append((grid.scenarios[name].title, tables))
    for title, _, tables in analysis_tables(grid, df, computed):
        sections.append((title, tables))
    cost = cost_table(grid, df)
    if cost:
        sections.append(("TTA cost (Table 8)", [cost]))
    clean = clean_table(df)
    if clean:
        sections.append(("Clean retrieval beside the papers", [clean]))
    return sections


def cost_table(grid, df: pd.DataFrame) -> Table | None:
    """Table 8: TTA time per query (ms) per method, the mean over every shifted cell it ran."""
    df = grid_configs(df)
    ok = df[df["status"] == "ok"] if len(df) else df
    if not len(ok) or "per_query_ms" not in ok:
        return None
    rows = table_order(grid).rows(ok)
    cols = [("", "ms per query"), ("", "gallery s")]
    cells = {}
    for r in rows:
        mine = ok[(ok["backbone_label"] == r[0]) & (ok["row"] == r[1])]
        cells[(r, cols[0])] = Value(float(mine["per_query_ms"].mean()), "ok")
        cells[(r, cols[1])] = Value(float(mine["gallery_s"].mean()), "ok")
    return Table("tta_cost", "TTA cost (Table 8): time per query, mean over every trial of the row", rows, cols,
                 cells, {}, 2, False)


CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1250px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}h3{font-size:1em}
table.results{border-collapse:collapse;font-size:12px;margin:.4em 0 1.2em}
table.results td,table.results th{border:1px solid #ccc;padding:2px 6px;text-align:right}
table.results td:nth-child(-n+2){text-align:left}
th.group{background:#eef}th{background:#f6f6f6}
td.missing{color:#999;font-style:italic}td.failed{background:#fdd}td.partial{color:#555}
td.damaged{background:#fed;font-style:italic}
td.undefined{color:#777;font-style:italic;background:#f4f4f4}
img{max-width:100%;border:1px solid #eee;margin:.3em 0}
.summary span{margin-right:1.2em}pre{background:#f7f7f7;padding:.5em;font-size:11px;overflow-x:auto}
"""


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def clear_plots(grid_dir: Path) -> Path:
    """The report's plots folder, emptied: plots of cells no longer in the grid must not linger."""
    plots_dir = grid_dir / REPORT_DIR / "plots"
    if plots_dir.exists():
        shutil.rmtree(plots_dir)
    plots_dir.mkdir(parents=True)
    return plots_dir


def write_report(grid, specs: list[TrialSpec], entries: list[dict[str, Any]], grid_dir: Path,
                 ledger=None, *, severity: Callable[[], list[Path]] | None = None,
                 df: pd.DataFrame | None = None, computed: dict[str, list[Table]] | None = None) -> list[Path]:
    """Write results/<grid>/report/ (index.html, report.md, report_tables.parquet, plots/*.png); returns the
    files. Also keeps where the grid file is (`grid_source.txt`) and a copy (`grid.yaml`) beside the results,
    so `report NAME` finds the grid by its name. Entries read without their per-query lists
    (`TrialLedger.entries(lists=False)`) get them back from `ledger` for the plotted cell only. `severity`: the
    severity figures' files, drawn elsewhere into the cleared plots folder (`severity_apart`), and `df` the
    `planned_rows` they were drawn from, `computed` their `scenario_tables` (as the grid's table files have them)."""
    out = grid_dir / REPORT_DIR
    plots_dir = out / "plots"
    if severity is None:
        clear_plots(grid_dir)
    _remember_grid(grid, grid_dir)
    if df is None:
        df = planned_rows(specs, entries, damaged=ledger.damaged_files() if ledger is not None else None)
    counts = df["status"].value_counts().to_dict() if len(df) else {}

    sections = report_sections(grid, df, computed)
    cost = next((t for _, ts in sections for t in ts if t.name == "tta_cost"), None)

    plots: list[tuple[str, Path]] = []
    for p in (plot_severity(grid, df, plots_dir) if severity is None else severity()):
        plots.append(("R@1 against severity (Fig. 13)", p))
    cell = focus_cell(grid, df)
    if cell is not None and ledger is not None:
        for role in ("clean", "shifted", "adapted"):
            row = cell[role]
            if not _list(row.get("k_occurrence")) and (full := ledger.get(row["key"])) is not None:
                row.update({name: full.get(name) or [] for name in PER_QUERY})
    notes = []
    if cell is not None:
        for title, fn in (("k-occurrence: clean vs shifted vs adapted (Fig. 2)", plot_k_occurrence),
                          ("Similarity before and after adaptation (Fig. 9)", plot_similarity),
                          ("R@1 over the stream", plot_stream)):
            p = fn(cell, plots_dir)
            if p is not None:
                plots.append((title, p))
            else:
                notes.append(f"{title}: not drawn (the trials of {cell['where']} lack the data: scores are saved "
                             "with runtime.save_scores: true, per-batch R@1 by trials of this version)")
    for p in plot_selection([t for _, ts in sections for t in ts], plots_dir):
        plots.append(("R@1 reached per selection protocol, with 95% intervals", p))
    p = plot_cost(cost, plots_dir)
    if p is not None:
        plots.append(("TTA cost per query (Table 8)", p))
    for p in plot_protocol_streams(df, plots_dir, method_rows(grid)):
        plots.append(("R@1 over a protocol's stream (docs/protocols.md)", p))
    for p in plot_diagnostics(paper_protocol(df, grid), plots_dir, method_rows(grid)):
        plots.append(("Uniformity and modality gap: shifted queries before adaptation -> after", p))

    all_tables = [t for _, ts in sections for t in ts]
    files = []
    pq.write_table(pa.Table.from_pandas(long_frame(all_tables), preserve_index=False), out / "report_tables.parquet")
    files.append(out / "report_tables.parquet")

    failed = df[df["status"] == "failed"] if len(df) else df
    damaged = df[df["status"] == DAMAGED] if len(df) else df
    summary = f"{len(df)} cells: {count_text(counts)}"
    # Markdown
    md = [f"# {grid.name}: report\n", summary + "\n", LEGEND + "\n"]
    for head, tables in sections:
        md.append(f"## {head}\n")
        for t in tables:
            md.append(f"### {t.title}\n\n{table_markdown(t)}\n")
    md.append("## Plots\n")
    for title, p in plots:
        md.append(f"### {title}\n\n![{p.stem}](plots/{p.name})\n")
    md.extend(f"- {n}" for n in notes)
    if len(failed):
        md.append("\n## Errors\n")
        for _, f in failed.iterrows():
            md.append(f"- <a id=\"err-{f['key']}\"></a>`{f['key'][:12]}` {_cell_name(f)}: {f.get('error')}")
    if len(damaged):
        md.append("\n## Damaged ledger entries\n")
        for _, f in damaged.iterrows():
            md.append(f"- <a id=\"dmg-{f['key']}\"></a>`{f['key'][:12]}` {_cell_name(f)}: {f.get('why')}")
    (out / "report.md").write_text("\n".join(md) + "\n")
    files.append(out / "report.md")

    # HTML: one file, images inline
    esc = html.escape
    body = [f"<h1>{esc(grid.name)}: results</h1>",
            f'<p class="summary" id="summary">{esc(summary)}</p>',
            f"<p>{esc(LEGEND)} Files beside this page: report.md, report_tables.parquet (every cell with its state), "
            "plots/; the grid's Parquet tables and trials.parquet one folder up.</p>"]
    toc = ["<ul>"] + [f'<li><a href="#sec-{i}">{esc(h)}</a></li>' for i, (h, _) in enumerate(sections)] + \
        ['<li><a href="#plots">Plots</a></li>'] + (['<li><a href="#errors">Errors</a></li>'] if len(failed) else []) \
        + (['<li><a href="#damaged">Damaged ledger entries</a></li>'] if len(damaged) else []) + ["</ul>"]
    body.extend(toc)
    for i, (head, tables) in enumerate(sections):
        body.append(f'<h2 id="sec-{i}">{esc(head)}</h2>')
        for t in tables:
            body.append(f"<h3>{esc(t.title)}</h3>")
            body.append(table_html(t))
    body.append('<h2 id="plots">Plots</h2>')
    for title, p in plots:
        body.append(f"<h3>{esc(title)}</h3>{_img(p)}")
    body.extend(f"<p><i>{esc(n)}</i></p>" for n in notes)
    if len(failed):
        body.append('<h2 id="errors">Errors</h2>')
        for _, f in failed.iterrows():
            tb = f.get("traceback") or ""
            body.append(f'<div class="error" id="err-{esc(f["key"])}"><h3>{esc(_cell_name(f))} '
                        f'<code>{esc(f["key"][:12])}</code></h3><p>{esc(str(f.get("error")))}</p>'
                        + (f"<pre>{esc(str(tb)[-3000:])}</pre>" if tb else "") + "</div>")
    if len(damaged):
        body.append('<h2 id="damaged">Damaged ledger entries</h2>')
        for _, f in damaged.iterrows():
            body.append(f'<div class="damaged" id="dmg-{esc(f["key"])}"><h3>{esc(_cell_name(f))} '
                        f'<code>{esc(f["key"][:12])}</code></h3><p>{esc(str(f.get("why")))}</p></div>')
    page = ("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + esc(grid.name) + " report</title><style>"
            + CSS + "</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    (out / "index.html").write_text(page)
    files.append(out / "index.html")
    files.extend(p for _, p in plots)
    return files


def _cell_name(row) -> str:
    return (f"{row['dataset']}/{row['direction']}/{row['backbone_label']}/{row['row']}/{row['perturbation']}-"
            f"{row['severity']}")


def _remember_grid(grid, grid_dir: Path) -> None:
    source = Path(grid.source) if grid.source else None
    if source is None or not source.is_file():
        return
    grid_dir.mkdir(parents=True, exist_ok=True)
    (grid_dir / "grid_source.txt").write_text(str(source.resolve()) + "\n")
    copy = grid_dir / "grid.yaml"
    if source.resolve() != copy.resolve():
        copy.write_text(source.read_text())


