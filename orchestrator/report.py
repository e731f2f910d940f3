"""The grid's report: `results/<grid>/report/` with a self-contained `index.html` (tables and plots inline, no
network), `report.md`, `report_tables.parquet` (every table cell in long form, with its state) and `plots/*.png`.

- Query shift, per (dataset, direction), in the paper's Table 1 layout: rows backbone x method (Source first),
  columns the grid's query perturbations grouped by their level (registry metadata: low / mid / high for video,
  character / word / sentence for text) and their average, each cell the mean over the grid's severities; the
  per-severity tables (the paper's Tables 32-35) below; the best value of each column in bold.
- Hubness (Table 13): k-occurrence skewness, Robin Hood index and antihub occurrence, clean vs shifted.
- The other scenarios' tables (query-gallery shift, mixed shift) as their scenarios lay them out (orchestrator/
  scenarios).
- Plots (matplotlib, Agg): R@1 against severity per type per method (Fig. 13), k-occurrence histograms clean vs
  shifted vs adapted for one cell (Fig. 2, from the ledger's k-occurrence counts), similarity heatmaps before and
  after adaptation (Fig. 9, from the fp16 score matrices trials save: runtime.save_scores), R@1 over the stream
  (each trial's per-batch R@1) and the TTA cost per query per method (Table 8).

A cell the grid asks for that never ran reads "missing"; a failed one reads "failed", linked to its error at the end
of the page. Neither is ever a zero, and averages over incomplete groups are marked with `*`.
"""
from __future__ import annotations

import base64
import html
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.ledger import PER_QUERY
from workloads.spec import CLEAN, TrialSpec

QS = "query_shift"
LEVEL_ORDER = ["low", "mid", "high", "character", "word", "sentence"]
# Table 13's hubness measures: (trials-table column, title); lower is less hubness
HUBNESS = [("hub_skewness", "skewness"), ("hub_robin_hood", "Robin Hood"), ("hub_antihub_occurrence", "antihubs")]
REPORT_DIR = "report"


# -- cells --------------------------------------------------------------------------------------------------------
@dataclass
class Value:
    """One table cell: a number, or why there is none. state: ok | partial (a mean over fewer cells than asked:
    `of` says how many) | failed (`key`: the first failed trial) | missing (never ran)."""
    value: float = math.nan
    state: str = "missing"
    key: str = ""
    of: str = ""

    def text(self, digits: int) -> str:
        if self.state == "failed":
            return "failed"
        if self.state == "missing" or math.isnan(self.value):
            return "missing"
        return f"{self.value:.{digits}f}" + ("*" if self.state == "partial" else "")


def combine(trials: list[dict[str, Any]], metric: str) -> Value:
    """The mean of `metric` over a group of planned trials (each a row with `status`)."""
    if not trials:
        return Value()
    failed = [t for t in trials if t["status"] == "failed"]
    if failed:
        return Value(state="failed", key=failed[0]["key"])
    vals = [t[metric] for t in trials if t["status"] == "ok" and t.get(metric) is not None
            and not pd.isna(t.get(metric))]
    if not vals:
        return Value()
    return Value(float(np.mean(vals)), "ok" if len(vals) == len(trials) else "partial",
                 of="" if len(vals) == len(trials) else f"{len(vals)} of {len(trials)}")


def mean_of(values: list[Value]) -> Value:
    """An average column over other cells: partial when some have no number; failed/missing when none has one."""
    have = [v for v in values if v.state in ("ok", "partial")]
    if not have:
        failed = [v for v in values if v.state == "failed"]
        return Value(state="failed", key=failed[0].key) if failed else Value()
    complete = len(have) == len(values) and all(v.state == "ok" for v in have)
    return Value(float(np.mean([v.value for v in have])), "ok" if complete else "partial",
                 of="" if complete else f"{len(have)} of {len(values)}")


@dataclass
class Table:
    name: str                                  # what kind of table (qs_R1, qs_R1_severity, hubness, ...)
    title: str
    rows: list[tuple[str, str]]                # (backbone, method row)
    columns: list[tuple[str, str]]             # (group: a level or a measure, column name)
    cells: dict[tuple[tuple[str, str], tuple[str, str]], Value]
    keys: dict[str, Any] = field(default_factory=dict)
    digits: int = 1
    higher_better: bool | dict[str, bool] = True

    def better_high(self, col: tuple[str, str]) -> bool:
        hb = self.higher_better
        return hb.get(col[0], True) if isinstance(hb, dict) else hb

    def best(self) -> dict[tuple[str, str], float]:
        out = {}
        for col in self.columns:
            vals = [v.value for r in self.rows if (v := self.cells.get((r, col))) and v.state in ("ok", "partial")]
            if vals:
                out[col] = max(vals) if self.better_high(col) else min(vals)
        return out


def planned_rows(specs: Iterable[TrialSpec], entries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per planned trial: its axes, `status` (ok / failed / missing) and what the ledger holds."""
    from orchestrator.results import trial_rows

    by_key = {e["key"]: e for e in entries}
    rows = []
    for spec in specs:
        e = by_key.get(spec.key)
        if e is None:
            d = spec.to_dict()
            row = {"key": spec.key, "status": "missing", **d, "row": d.get("variant") or d["method"]}
        else:
            row = trial_rows([e])[0]
            row["k_occurrence"] = e.get("k_occurrence") or []
            row["batch_R1"] = e.get("batch_R1") or []
            row["scores_path"] = e.get("scores_path")
            row["traceback"] = e.get("traceback")
        rows.append(row)
    return pd.DataFrame(rows)


def _row_order(grid) -> list[str]:
    """Method rows: Source first, then the grid's order."""
    rows = list(grid.methods)
    return sorted(rows, key=lambda m: m != "source")


def _index(df: pd.DataFrame) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = {}
    for rec in df.to_dict("records"):
        out.setdefault((rec["dataset"], rec["direction"], rec["backbone"], rec["row"], rec["perturbation"],
                        int(rec["severity"])), []).append(rec)
    return out


def _levels(direction: str) -> dict[str, str]:
    from workloads.perturbations.text import TEXT_PERTURBATIONS
    from workloads.perturbations.video import VIDEO_PERTURBATIONS

    reg = VIDEO_PERTURBATIONS if direction == "v2t" else TEXT_PERTURBATIONS
    return {n: reg.static_info(n)["level"] for n in reg.names()}


def qs_tables(grid, df: pd.DataFrame, metric: str = "R1") -> list[Table]:
    """The query-shift tables of one metric: per (dataset, direction) the mean over severities, then one per
    severity; columns the grid's types grouped by level, Avg, Clean."""
    qs = df[(df["scenario"] == QS) & (df["mix"].fillna("") == "")] if len(df) else df
    if not len(qs):
        return []
    idx = _index(qs)
    backbones, methods = list(grid.backbones), _row_order(grid)
    out = []
    for (ds, direction), part in qs.groupby(["dataset", "direction"], sort=False):
        levels = _levels(direction)
        types = [p for p in levels if p in set(part["perturbation"])]
        types.sort(key=lambda p: LEVEL_ORDER.index(levels[p]) if levels[p] in LEVEL_ORDER else 99)
        sevs = {p: sorted(int(s) for s in part.loc[part["perturbation"] == p, "severity"].unique()) for p in types}
        rows = [(b, m) for b in backbones for m in methods
                if ((part["backbone"] == b) & (part["row"] == m)).any()]
        has_clean = (part["perturbation"] == CLEAN).any()
        higher = metric not in ("MdR", "MnR") and not metric.startswith("hub_")

        def build(title: str, name: str, severity: int | None, keys: dict[str, Any]) -> Table:
            cols = [(levels[p], p) for p in types if severity is None or severity in sevs[p]]
            cells = {}
            for r in rows:
                for col in cols:
                    chosen = sevs[col[1]] if severity is None else [severity]
                    group = [t for s in chosen for t in idx.get((ds, direction, *r, col[1], s), [])]
                    cells[(r, col)] = combine(group, metric)
                cells[(r, ("", "Avg"))] = mean_of([cells[(r, c)] for c in cols])
                if has_clean:
                    cells[(r, ("", "Clean"))] = combine(idx.get((ds, direction, *r, CLEAN, 0), []), metric)
            extra = [("", "Avg")] + ([("", "Clean")] if has_clean else [])
            return Table(name, title, rows, cols + extra, cells, keys, 2 if metric.startswith("hub_") else 1,
                         higher)

        all_sevs = sorted({s for v in sevs.values() for s in v})
        label = metric_label(metric)
        one_each = bool(types) and all(len(v) == 1 for v in sevs.values())
        if types and one_each and len(all_sevs) > 1:
            # each type at its level's one severity (t2v, Table 3): one table, the severities named per level
            by_level: dict[str, set[int]] = {}
            for p in types:
                by_level.setdefault(levels[p], set()).update(sevs[p])
            what = ", ".join(f"{lv} {'/'.join(map(str, sorted(v)))}" for lv, v in by_level.items())
            out.append(build(f"{label}: {ds}, {direction}, severity {what}", f"qs_{metric}", None,
                             {"dataset": ds, "direction": direction, "severity": "mean"}))
            continue
        if types:
            what = "severity " + "/".join(map(str, all_sevs)) if len(all_sevs) > 1 else f"severity {all_sevs[0]}"
            out.append(build(f"{label}: {ds}, {direction}, mean over {what}", f"qs_{metric}",
                             None, {"dataset": ds, "direction": direction, "severity": "mean"}))
        for s in all_sevs if len(all_sevs) > 1 or not types else []:
            out.append(build(f"{label}: {ds}, {direction}, severity {s}", f"qs_{metric}_severity", s,
                             {"dataset": ds, "direction": direction, "severity": s}))
        if not types and has_clean:
            out.append(build(f"{label}: {ds}, {direction}, clean", f"qs_{metric}", None,
                             {"dataset": ds, "direction": direction, "severity": 0}))
    return out


def hubness_tables(grid, df: pd.DataFrame) -> list[Table]:
    """Table 13: per (dataset, direction), each hubness measure on clean queries and on the shifted ones (the
    mean over every perturbed cell)."""
    qs = df[(df["scenario"] == QS) & (df["mix"].fillna("") == "")] if len(df) else df
    out = []
    if not len(qs):
        return out
    backbones, methods = list(grid.backbones), _row_order(grid)
    for (ds, direction), part in qs.groupby(["dataset", "direction"], sort=False):
        rows = [(b, m) for b in backbones for m in methods if ((part["backbone"] == b) & (part["row"] == m)).any()]
        shifts = [s for s, has in (("Clean", (part["perturbation"] == CLEAN).any()),
                                   ("Shifted", (part["perturbation"] != CLEAN).any())) if has]
        cols = [(title, s) for _, title in HUBNESS for s in shifts]
        recs = part.to_dict("records")
        cells = {}
        for r in rows:
            mine = [t for t in recs if (t["backbone"], t["row"]) == r]
            for col, title in HUBNESS:
                for s in shifts:
                    group = [t for t in mine if (t["perturbation"] == CLEAN) == (s == "Clean")]
                    cells[(r, (title, s))] = combine(group, col)
        k = int(part["hub_k"].dropna().iloc[0]) if "hub_k" in part and part["hub_k"].notna().any() else 10
        out.append(Table("hubness", f"Hubness at k={k} (Table 13): {ds}, {direction} (lower: less hubness)", rows,
                         cols, cells, {"dataset": ds, "direction": direction}, 3, False))
    return out


def cost_table(grid, df: pd.DataFrame) -> Table | None:
    """Table 8: TTA time per query (ms) per method, the mean over every shifted cell it ran."""
    ok = df[df["status"] == "ok"] if len(df) else df
    if not len(ok) or "per_query_ms" not in ok:
        return None
    rows = [(b, m) for b in grid.backbones for m in _row_order(grid)
            if ((ok["backbone"] == b) & (ok["row"] == m)).any()]
    cols = [("", "ms per query"), ("", "gallery s")]
    cells = {}
    for r in rows:
        mine = ok[(ok["backbone"] == r[0]) & (ok["row"] == r[1])]
        cells[(r, cols[0])] = Value(float(mine["per_query_ms"].mean()), "ok")
        cells[(r, cols[1])] = Value(float(mine["gallery_s"].mean()), "ok")
    return Table("tta_cost", "TTA cost (Table 8): time per query, mean over every trial of the row", rows, cols,
                 cells, {}, 2, False)


def metric_label(metric: str) -> str:
    return {"R1": "R@1 (%)", "R5": "R@5 (%)", "R10": "R@10 (%)", "hub_skewness": "k-occurrence skewness"}.get(
        metric, metric)


def scenario_tables(grid, df: pd.DataFrame) -> list[Table]:
    """The other scenarios' tables (QGS, mixed shift) as their scenario lays them out; missing cells are blank
    there (the scenarios only see trials that ran)."""
    from orchestrator.results import scenario_tables as layouts

    done = df[df["status"] != "missing"].copy() if len(df) else df
    out = []
    # the query-shift tables are the report's own (qs_tables): not laid out here only to be dropped (~100 pivots at
    # the full matrix)
    for tables in layouts(grid, done, skip=(QS,)).values():
        for t in tables:
            frame = t.frame
            cols = [("", str(c)) for c in frame.columns]
            rows = [tuple(map(str, i)) for i in frame.index]
            cells = {}
            for r, (_, vals) in zip(rows, frame.iterrows()):
                for c, v in zip(cols, vals.tolist()):
                    cells[(r, c)] = Value(float(v), "ok") if v is not None and not pd.isna(v) else Value()
            out.append(Table(t.name, t.title, rows, cols, cells, dict(t.keys), t.digits,
                             not t.name.endswith("hubness") and "hub" not in t.name))
    return out


# -- plots ----------------------------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_severity(grid, df: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 13: R@1 against severity (0 = clean), one panel per type, one line per method, per (dataset,
    direction, backbone).

    One figure per panel layout, redrawn for each (dataset, direction, backbone): a new 12-panel figure spends
    most of its time in matplotlib making its axes and tick objects, and the full matrix has ten such figures
    (benchmarks/RESULTS.md section 15)."""
    plt = _plt()
    qs = _qs_ok(df)
    files = []
    figures: dict[tuple[int, int, int], Any] = {}
    try:
        for (ds, direction, backbone), part in qs.groupby(["dataset", "direction", "backbone"], sort=False):
            levels = _levels(direction)
            types = [p for p in levels if p in set(part["perturbation"])]
            if not types:
                continue
            n = len(types)
            ncol = min(4, n)
            nrow = math.ceil(n / ncol)
            if (nrow, ncol, n) not in figures:
                figures[nrow, ncol, n] = _severity_figure(plt, nrow, ncol, n)
            fig, axes = figures[nrow, ncol, n]
            curves: dict[tuple[str, str], list[tuple[int, float]]] = {}
            for rec in part[["perturbation", "row", "severity", "R1"]].itertuples(index=False):
                curves.setdefault((rec.perturbation, rec.row), []).append((int(rec.severity), float(rec.R1)))
            for ax, p in zip(axes.flat, types):
                for line in list(ax.lines):   # the previous cell's
                    line.remove()
                ax.set_prop_cycle(None)       # a method keeps its colour from figure to figure
                for m in _row_order(grid):
                    points = sorted(curves.get((CLEAN, m), [])[:1] + curves.get((p, m), []))
                    if points:
                        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", ms=3, label=m)
                ax.relim()                    # the limits of this cell's lines only
                ax.autoscale_view()
                ax.set_title(f"{p} ({levels[p]})", fontsize=9)
            axes[0][0].legend(fontsize=7)     # replaces the previous cell's
            fig.suptitle(f"R@1 against severity: {ds}, {direction}, {backbone}", fontsize=10)
            files.append(_write(fig, out / f"r1_severity_{ds}_{direction}_{backbone}.png"))
    finally:
        for fig, _ in figures.values():
            plt.close(fig)
    return files


def _qs_ok(df: pd.DataFrame) -> pd.DataFrame:
    """The query-shift cells that ran ok, mixes aside: what the severity figures and the focus cell read."""
    return df[(df["scenario"] == QS) & (df["status"] == "ok") & (df["mix"].fillna("") == "")] if len(df) else df


def severity_apart(grid, df: pd.DataFrame, plots_dir: Path) -> Callable[[], list[Path]]:
    """`plot_severity` started in a forked process, to draw beside the tables and the rest of the report (the
    full matrix's ten 12-panel figures are about half of writing its outputs: benchmarks/RESULTS.md section 15);
    returns a call that waits for its files. In this process where there is one core, no fork, or one figure to
    draw. Only for a process that runs no threads of its own (orchestrator/outputs.py's child): a fork copies no
    thread."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cells = _qs_ok(df)
    figures = cells.groupby(["dataset", "direction", "backbone"]).ngroups if len(cells) else 0
    if cores < 2 or figures < 2 or "fork" not in multiprocessing.get_all_start_methods():
        files = plot_severity(grid, df, plots_dir)
        return lambda: files
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    future = pool.submit(plot_severity, grid, df, plots_dir)

    def files() -> list[Path]:
        try:
            return future.result()
        finally:
            pool.shutdown()

    return files


def _severity_figure(plt, nrow: int, ncol: int, n: int):
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.0 * ncol, 2.4 * nrow), squeeze=False, sharey=True)
    for ax in list(axes.flat)[:n]:
        ax.set_xlabel("severity", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes[0][0].set_ylabel("R@1 (%)", fontsize=8)
    fig.subplots_adjust(left=0.07 if ncol > 2 else 0.15, right=0.98, bottom=0.12 / nrow + 0.05, top=1 - 0.3 / nrow,
                        wspace=0.12, hspace=0.55)
    return fig, axes


def focus_cell(grid, df: pd.DataFrame) -> dict[str, Any] | None:
    """The cell the per-cell figures show: the first (dataset, direction, backbone) with a clean Source trial, at
    the worst Source R@1 among the shifted cells, with the adapted row HAT-VTR where the grid has it, else the first
    method after Source. Returns the three trials: clean, shifted (Source), adapted."""
    qs = _qs_ok(df)
    if not len(qs):
        return None
    adapted = next((m for m in ("hat_vtr", *_row_order(grid)) if m != "source" and m in set(qs["row"])), None)
    for (ds, direction, backbone), part in qs.groupby(["dataset", "direction", "backbone"], sort=False):
        src = part[part["row"] == "source"]
        clean = src[src["perturbation"] == CLEAN]
        shifted = src[src["perturbation"] != CLEAN].sort_values(["R1", "severity"], ascending=[True, False])
        if not len(clean) or not len(shifted) or adapted is None:
            continue
        for _, s in shifted.iterrows():
            a = part[(part["row"] == adapted) & (part["perturbation"] == s["perturbation"])
                     & (part["severity"] == s["severity"])]
            if len(a):
                return {"clean": clean.iloc[0].to_dict(), "shifted": s.to_dict(), "adapted": a.iloc[0].to_dict(),
                        "where": f"{ds}, {direction}, {backbone}, {s['perturbation']} severity {int(s['severity'])}",
                        "method": adapted}
    return None


def plot_k_occurrence(cell: dict[str, Any], out: Path) -> Path | None:
    """Fig. 2: histograms of N_k (how often each gallery item is in a query's top k) for clean queries, shifted
    queries and shifted queries after adaptation: hubs are the long right tail, antihubs the bar at 0."""
    series = [("clean (Source)", cell["clean"]), ("shifted (Source)", cell["shifted"]),
              (f"adapted ({cell['method']})", cell["adapted"])]
    if not all(len(_list(t.get("k_occurrence"))) for _, t in series):
        return None
    plt = _plt()
    top = max(max(t["k_occurrence"]) for _, t in series)
    bins = np.arange(0, top + 2) - 0.5
    fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), sharey=True)
    for ax, (label, t) in zip(axes, series):
        counts = np.asarray(t["k_occurrence"])
        ax.hist(counts, bins=bins, color="#4477aa")
        skew = t.get("hub_skewness")
        ax.set_title(f"{label}\nR@1 {t['R1']:.1f}, skewness {skew:.2f}", fontsize=9)
        ax.set_xlabel(f"k-occurrence (k={int(t.get('hub_k') or 10)})", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("gallery items", fontsize=8)
    fig.suptitle(f"k-occurrence: {cell['where']}", fontsize=10)
    fig.tight_layout()
    return _save(fig, out / "k_occurrence.png")


def plot_similarity(cell: dict[str, Any], out: Path, n: int = 64) -> Path | None:
    """Fig. 9: the query x gallery similarity matrix (first n x n, ground truth on the diagonal in v2t) before
    adaptation (Source on the shifted queries) and after (the adapted method), from the saved fp16 scores."""
    mats = []
    for label, t in (("before adaptation (Source)", cell["shifted"]), (f"after ({cell['method']})", cell["adapted"])):
        path = t.get("scores_path")
        if not isinstance(path, str) or not path or not Path(path).is_file():
            return None
        mats.append((label, np.load(path, mmap_mode="r")[:n, :n].astype(np.float32)))
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.4))
    for ax, (label, m) in zip(axes, mats):
        im = ax.imshow(m, cmap="viridis", interpolation="nearest")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("gallery", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        ax.tick_params(labelsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"similarity (first {mats[0][1].shape[0]} queries): {cell['where']}", fontsize=10)
    fig.tight_layout()
    return _save(fig, out / "similarity.png")


def plot_stream(cell: dict[str, Any], out: Path) -> Path | None:
    """R@1 of each stream batch of the focus cell, Source vs the adapted method (the step metric in MLflow)."""
    s, a = _list(cell["shifted"].get("batch_R1")), _list(cell["adapted"].get("batch_R1"))
    if not len(s) or not len(a):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.plot(range(len(s)), s, marker="o", ms=3, label="Source")
    ax.plot(range(len(a)), a, marker="o", ms=3, label=cell["method"])
    ax.set_xlabel("stream batch", fontsize=8)
    ax.set_ylabel("R@1 (%)", fontsize=8)
    ax.set_title(f"R@1 per batch: {cell['where']}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, out / "stream_r1.png")


def _list(v) -> list:
    """A list column's value (pandas leaves NaN where a trial has none)."""
    return list(v) if isinstance(v, (list, tuple, np.ndarray)) else []


def plot_cost(table: Table | None, out: Path) -> Path | None:
    """Table 8 as bars: TTA milliseconds per query per method, one group per backbone."""
    if table is None or not table.rows:
        return None
    plt = _plt()
    backbones = list(dict.fromkeys(b for b, _ in table.rows))
    methods = list(dict.fromkeys(m for _, m in table.rows))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 + 0.6 * len(methods) * len(backbones)), 2.8))
    width = 0.8 / max(1, len(backbones))
    for i, b in enumerate(backbones):
        ys = [table.cells.get(((b, m), table.columns[0]), Value()).value for m in methods]
        ax.bar(np.arange(len(methods)) + i * width, ys, width, label=b)
    ax.set_xticks(np.arange(len(methods)) + width * (len(backbones) - 1) / 2, methods, fontsize=8)
    ax.set_ylabel("ms per query", fontsize=8)
    ax.set_title("TTA cost per query", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out / "tta_cost.png")


def _save(fig, path: Path) -> Path:
    _write(fig, path)
    _plt().close(fig)
    return path


def _write(fig, path: Path) -> Path:
    """The PNG of every report figure; `plot_severity` writes its figures with it and keeps them open to redraw."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


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


CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1250px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}h3{font-size:1em}
table.results{border-collapse:collapse;font-size:12px;margin:.4em 0 1.2em}
table.results td,table.results th{border:1px solid #ccc;padding:2px 6px;text-align:right}
table.results td:nth-child(-n+2){text-align:left}
th.group{background:#eef}th{background:#f6f6f6}
td.missing{color:#999;font-style:italic}td.failed{background:#fdd}td.partial{color:#555}
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
                 df: pd.DataFrame | None = None) -> list[Path]:
    """Write results/<grid>/report/ (index.html, report.md, report_tables.parquet, plots/*.png); returns the
    files. Also keeps where the grid file is (`grid_source.txt`) and a copy (`grid.yaml`) beside the results,
    so `report NAME` finds the grid by its name. Entries read without their per-query lists
    (`TrialLedger.entries(lists=False)`) get them back from `ledger` for the plotted cell only. `severity`: the
    severity figures' files, drawn elsewhere into the cleared plots folder (`severity_apart`), and `df` the
    `planned_rows` they were drawn from."""
    out = grid_dir / REPORT_DIR
    plots_dir = out / "plots"
    if severity is None:
        clear_plots(grid_dir)
    _remember_grid(grid, grid_dir)
    df = planned_rows(specs, entries) if df is None else df
    counts = df["status"].value_counts().to_dict() if len(df) else {}

    sections: list[tuple[str, list[Table]]] = []
    qs = qs_tables(grid, df, "R1")
    if qs:
        sections.append(("Query shift: R@1 (Table 1 layout; per-severity tables: Tables 32-35)", qs))
        sections.append(("Query shift: k-occurrence skewness", qs_tables(grid, df, "hub_skewness")))
    hub = hubness_tables(grid, df)
    if hub:
        sections.append(("Hubness (Table 13)", hub))
    other = scenario_tables(grid, df)
    if other:
        sections.append(("Query-gallery and mixed shift", other))
    cost = cost_table(grid, df)
    if cost:
        sections.append(("TTA cost (Table 8)", [cost]))

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
    p = plot_cost(cost, plots_dir)
    if p is not None:
        plots.append(("TTA cost per query (Table 8)", p))

    all_tables = [t for _, ts in sections for t in ts]
    files = []
    pq.write_table(pa.Table.from_pandas(long_frame(all_tables), preserve_index=False), out / "report_tables.parquet")
    files.append(out / "report_tables.parquet")
    cells_path = out / "cells.parquet"
    keep = [c for c in df.columns if c not in ("k_occurrence", "batch_R1", "traceback")]
    pq.write_table(pa.Table.from_pandas(df[keep].astype({"severity": "int64"}) if len(df) else df,
                                        preserve_index=False), cells_path)
    files.append(cells_path)

    failed = df[df["status"] == "failed"] if len(df) else df
    summary = (f"{len(df)} cells: {counts.get('ok', 0)} done, {counts.get('failed', 0)} failed, "
               f"{counts.get('missing', 0)} never run")
    # Markdown
    md = [f"# {grid.name}: report\n", summary + "\n",
          "Cells: a number is the mean over the severities asked for (`*`: over fewer, some did not run); "
          "`missing`: never run; `failed`: see Errors. Best per column in bold.\n"]
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
    (out / "report.md").write_text("\n".join(md) + "\n")
    files.append(out / "report.md")

    # HTML: one file, images inline
    esc = html.escape
    body = [f"<h1>{esc(grid.name)}: results</h1>",
            f'<p class="summary" id="summary">{esc(summary)}</p>',
            "<p>A number is the mean over the severities asked for (<code>*</code>: over fewer, some did not run); "
            "<i>missing</i>: never run; <i>failed</i>: links to its error. Best value per column in bold. "
            "Files beside this page: report.md, report_tables.parquet (every cell with its state), plots/.</p>"]
    toc = ["<ul>"] + [f'<li><a href="#sec-{i}">{esc(h)}</a></li>' for i, (h, _) in enumerate(sections)] + \
        ['<li><a href="#plots">Plots</a></li>'] + (['<li><a href="#errors">Errors</a></li>'] if len(failed) else []) \
        + ["</ul>"]
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
    page = ("<!doctype html><html><head><meta charset=\"utf-8\"><title>" + esc(grid.name) + " report</title><style>"
            + CSS + "</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
    (out / "index.html").write_text(page)
    files.append(out / "index.html")
    files.extend(p for _, p in plots)
    return files


def _cell_name(row) -> str:
    return f"{row['dataset']}/{row['direction']}/{row['backbone']}/{row['row']}/{row['perturbation']}-{row['severity']}"


def _remember_grid(grid, grid_dir: Path) -> None:
    source = Path(grid.source) if grid.source else None
    if source is None or not source.is_file():
        return
    grid_dir.mkdir(parents=True, exist_ok=True)
    (grid_dir / "grid_source.txt").write_text(str(source.resolve()) + "\n")
    copy = grid_dir / "grid.yaml"
    if source.resolve() != copy.resolve():
        copy.write_text(source.read_text())


def resolve_grid(arg: str, results_dir: str | Path) -> str:
    """A grid file, or the name of a grid whose results exist under results_dir: its original file when it is
    still there, else the copy kept beside its results."""
    if Path(arg).is_file():
        return arg
    grid_dir = Path(results_dir) / arg
    source = grid_dir / "grid_source.txt"
    if source.is_file():
        original = Path(source.read_text().strip())
        if original.is_file():
            return str(original)
    if (grid_dir / "grid.yaml").is_file():
        return str(grid_dir / "grid.yaml")
    raise ValueError(f"report: {arg!r} is neither a grid file nor a grid with results under {results_dir} "
                     f"(no {grid_dir / 'grid.yaml'}); give the grid's YAML file, e.g. grids/quickstart.yaml")

