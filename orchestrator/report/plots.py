"""The report's plots (matplotlib, Agg): R@1 against severity per type per method (Fig. 13; each point the mean over
seeds with its 95% interval, as the tables compute it; points only where a severity ran, lines and bands only
between neighbouring severities that both ran), k-occurrence histograms clean vs shifted vs adapted
for one cell (Fig. 2), similarity heatmaps before and after adaptation (Fig. 9), R@1 over the stream and the TTA cost
per query (Table 8). Per-cell figures show the first seed's trials."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd

from orchestrator.config.tables import Table, Value, combine, groups
from orchestrator.report.rows import QS, levels, method_rows
from workloads.spec import CLEAN


# -- plots ----------------------------------------------------------------------------------------------------------
def _plt():
    import matplotlib   # matplotlib: only when plots are drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # matplotlib: only when plots are drawn

    return plt


def plot_severity(grid, df: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 13: R@1 against severity (0 = clean), one panel per type, one line per method, per (dataset,
    direction, backbone): `severity_figures` drawn, each written as a PNG under `out`."""
    return [_write(fig, out / name) for name, fig in severity_figures(grid, df)]


def severity_figures(grid, df: pd.DataFrame) -> Iterator[tuple[str, Any]]:
    """The figures of `plot_severity`, each with its file name, as they are drawn: the figure is redrawn for the next
    (dataset, direction, backbone) when the caller asks for the next one, and closed at the end.

    Only what was measured is drawn: a point at each severity that ran (the mean over seeds with its 95% interval, as
    the tables compute it); a line, and its interval's band, only between severities next to one another that both
    ran (severities 1 and 5 alone are two points with no line between them: nothing says R@1 falls linearly across
    2-4); a point with no neighbour shows its interval as an error bar. A method keeps its colour (`C<i>`, its row)
    in every figure.

    One figure per panel layout, redrawn for each (dataset, direction, backbone): a new 12-panel figure spends
    most of its time in matplotlib making its axes and tick objects, and the full matrix has ten such figures
    (docs/notes/2026-11-results-history.md §15)."""
    plt = _plt()
    qs = paper_protocol(_qs_ok(df), grid)
    figures: dict[tuple[int, int, int], Any] = {}
    methods = method_rows(grid)
    try:
        for (ds, direction, backbone), part in qs.groupby(["dataset", "direction", "backbone_label"], sort=False):
            level_of = levels(direction)
            types = [p for p in level_of if p in set(part["perturbation"])]
            if not types:
                continue
            n = len(types)
            ncol = min(4, n)
            nrow = math.ceil(n / ncol)
            if (nrow, ncol, n) not in figures:
                figures[nrow, ncol, n] = _severity_figure(plt, nrow, ncol, n)
            fig, axes = figures[nrow, ncol, n]
            # one point per (type, method, severity): the mean over its seeds with its 95% interval (tables.py)
            curves: dict[tuple[str, str], list[tuple[int, Value]]] = {}
            for (pert, row, sev), trials in groups(part, ["perturbation", "row", "severity"]).items():
                curves.setdefault((pert, row), []).append((int(sev), combine(trials, "R1")))
            for ax, p in zip(axes.flat, types):
                for line in list(ax.lines):   # the previous cell's
                    line.remove()
                for band in list(ax.collections):
                    band.remove()
                for i, m in enumerate(methods):
                    points = sorted(curves.get((CLEAN, m), [])[:1] + curves.get((p, m), []), key=lambda pv: pv[0])
                    _draw_method(ax, points, m, f"C{i}")
                ax.relim()                    # the limits of this cell's lines only
                ax.autoscale_view()
                ax.set_title(f"{p} ({level_of[p]})", fontsize=9)
            axes[0][0].legend(fontsize=7)     # replaces the previous cell's
            fig.suptitle(f"R@1 against severity: {ds}, {direction}, {backbone}", fontsize=10)
            yield f"r1_severity_{ds}_{direction}_{backbone}.png", fig
    finally:
        for fig, _ in figures.values():
            plt.close(fig)


def _draw_method(ax, points: list[tuple[int, Value]], label: str, colour: str) -> None:
    """One method's points on one panel: a line and band over each run of consecutive severities that ran, a marker
    with an error bar for a severity with no neighbour that ran (`severity_figures`). The label is on its first
    line only, so that the legend names the method once."""
    runs: list[list[tuple[int, Value]]] = []
    for sev, v in points:
        if runs and sev == runs[-1][-1][0] + 1:
            runs[-1].append((sev, v))
        else:
            runs.append([(sev, v)])
    for k, run in enumerate(runs):
        xs, vs = [x for x, _ in run], [v for _, v in run]
        ax.plot(xs, [v.value for v in vs], marker="o", ms=3, color=colour, label=label if k == 0 else "_nolegend_",
                linestyle="-" if len(run) > 1 else "none")
        if not any(v.has_interval for v in vs):
            continue
        lows = [v.low if v.has_interval else v.value for v in vs]
        highs = [v.high if v.has_interval else v.value for v in vs]
        if len(run) > 1:
            ax.fill_between(xs, lows, highs, color=colour, alpha=0.15, linewidth=0)
        else:
            ax.vlines(xs, lows, highs, color=colour, alpha=0.5, linewidth=1)


def _qs_ok(df: pd.DataFrame) -> pd.DataFrame:
    """The query-shift cells that ran ok, mixes aside: what the severity figures and the focus cell read."""
    if not len(df):
        return df
    keep = (df["scenario"] == QS) & (df["status"] == "ok") & (df["mix"].fillna("") == "")
    if "config" in df:   # the grid's own configurations: searched ones are the selection tables'
        keep &= df["config"].fillna("") == ""
    return df[keep]


def paper_protocol(qs: pd.DataFrame, grid) -> pd.DataFrame:
    """The rows of the paper's protocol at the grid's batch size (docs/protocols.md), as the query-shift tables read
    them: the per-cell figures must not average a cell's trials under other protocols in."""
    if not len(qs) or "protocol" not in qs:
        return qs
    return qs[(qs["protocol"].fillna("") == "") & (qs["batch_size"] == grid.runtime.batch_size)]


def severity_apart(grid, df: pd.DataFrame, plots_dir: Path) -> Callable[[], list[Path]]:
    """`plot_severity` started in a forked process, to draw beside the tables and the rest of the report (the
    full matrix's ten 12-panel figures are about half of writing its outputs: docs/notes/2026-11-results-history.md
    §15); returns a call that waits for its files. In this process where there is one core, no fork, or one figure to
    draw. Only for a process that runs no threads of its own (orchestrator/report/outputs.py's child): a fork copies no
    thread."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cells = _qs_ok(df)
    figures = cells.groupby(["dataset", "direction", "backbone_label"]).ngroups if len(cells) else 0
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
    qs = paper_protocol(_qs_ok(df), grid)
    if len(qs) and qs["seed"].nunique() > 1:   # one seed's trials: the figures show single runs
        qs = qs[qs["seed"] == qs["seed"].min()]
    if not len(qs):
        return None
    adapted = next((m for m in ("hat_vtr", *method_rows(grid)) if m != "source" and m in set(qs["row"])), None)
    for (ds, direction, backbone), part in qs.groupby(["dataset", "direction", "backbone_label"], sort=False):
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


def plot_protocol_streams(df: pd.DataFrame, out: Path, methods: list[str]) -> list[Path]:
    """Per multi-segment stream (docs/protocols.md): R@1 over the queries seen so far along it (the trials'
    `running_R1`), a line per method, a panel per backbone, the segments' boundaries dashed."""
    qs = _qs_ok(df)
    if not len(qs) or "running_R1" not in qs or "segments" not in qs:
        return []
    streams = qs[qs["segments"].fillna("") != ""]
    plt, files = _plt(), []
    for (ds, direction, stream), part in streams.groupby(["dataset", "direction", "perturbation"], sort=False):
        backbones = list(dict.fromkeys(part["backbone_label"]))
        fig, axes = plt.subplots(1, len(backbones), figsize=(5.0 * len(backbones), 3.0), squeeze=False)
        drawn = False
        for ax, b in zip(axes[0], backbones):
            mine = part[part["backbone_label"] == b]
            for i, m in enumerate(x for x in methods if (mine["row"] == x).any()):
                points = _list(mine[mine["row"] == m]["running_R1"].iloc[0])
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], color=f"C{i % 10}", lw=1.2, label=m)
                    drawn = True
            first = mine.iloc[0]
            n_seg = len(_list(first.get("segment_R1"))) or 1
            if first.get("n_queries") and n_seg > 1:
                for s in range(1, n_seg):
                    ax.axvline(s * float(first["n_queries"]) / n_seg, color="grey", ls="--", lw=0.6)
            _panel(ax, "queries seen", "R@1 so far (%)", b)
        fig.suptitle(f"R@1 over the stream: {ds}, {direction}, {stream}", fontsize=10)
        fig.tight_layout()
        if drawn:
            files.append(_save(fig, out / f"stream_{ds}_{direction}_{stream}.png"))
        else:
            plt.close(fig)
    return files


def _panel(ax, xlabel: str, ylabel: str, title: str) -> None:
    """One backbone's panel of a per-backbone figure, labelled and styled as the others."""
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


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


def plot_diagnostics(df: pd.DataFrame, out: Path, methods: list[str]) -> list[Path]:
    """Per (dataset, direction): the query embeddings' uniformity against their modality gap (TCR's Section 4.3,
    workloads/metrics.py), one panel per backbone: the clean queries, the shifted ones before adaptation, and an
    arrow from there to each method's adapted queries (means over the shifted cells)."""
    qs = _qs_ok(df)
    if not len(qs) or "uniformity_adapted" not in qs:
        return []
    plt, files = _plt(), []
    for (ds, direction), part in qs.groupby(["dataset", "direction"], sort=False):
        shifted = part[part["perturbation"] != CLEAN]
        backbones = [b for b in dict.fromkeys(part["backbone_label"]) if shifted["uniformity_adapted"].notna().any()]
        if not backbones or not len(shifted):
            continue
        fig, axes = plt.subplots(1, len(backbones), figsize=(4.2 * len(backbones), 3.4), squeeze=False)
        for ax, b in zip(axes[0], backbones):
            mine = shifted[shifted["backbone_label"] == b]
            clean = part[(part["backbone_label"] == b)]
            start = (mine["uniformity_shifted"].mean(), mine["modality_gap_shifted"].mean())
            ax.scatter([clean["uniformity_clean"].mean()], [clean["modality_gap_clean"].mean()], marker="*", s=90,
                       color="black", label="clean")
            ax.scatter([start[0]], [start[1]], marker="o", color="grey", label="shifted, before")
            for i, m in enumerate(x for x in methods if (mine["row"] == x).any()):
                rows = mine[mine["row"] == m]
                end = (rows["uniformity_adapted"].mean(), rows["modality_gap_adapted"].mean())
                if any(pd.isna(v) for v in (*start, *end)):
                    continue
                colour = f"C{i}"
                ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": colour})
                ax.scatter([end[0]], [end[1]], color=colour, s=18, label=m)
            _panel(ax, "uniformity (higher: more spread)", "modality gap (lower: closer)", b)
        fig.suptitle(f"query embeddings under shift: {ds}, {direction}", fontsize=10)
        fig.tight_layout()
        files.append(_save(fig, out / f"diagnostics_{ds}_{direction}.png"))
    return files


def _save(fig, path: Path) -> Path:
    _write(fig, path)
    _plt().close(fig)
    return path


def _write(fig, path: Path) -> Path:
    """The PNG of every report figure; `plot_severity` writes its figures with it and keeps them open to redraw."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


