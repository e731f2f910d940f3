"""The report's tables from the planned trials (one row per trial the grid asks for, with its state): the query-shift
tables in the paper's Table 1 layout (mean over severities, then per severity), hubness (Table 13), TTA cost
(Table 8), and the other scenarios' tables as their scenarios lay them out."""
from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from orchestrator.config.tables import Table, Value, combine, mean_of
from orchestrator.record.ledger import PER_QUERY  # noqa: F401
from orchestrator.report.results import scenario_tables as layouts
from orchestrator.report.results import trial_rows
from workloads.spec import CLEAN, TrialSpec

QS = "query_shift"


LEVEL_ORDER = ["low", "mid", "high", "character", "word", "sentence"]


# Table 13's hubness measures: (trials-table column, title); lower is less hubness
HUBNESS = [("hub_skewness", "skewness"), ("hub_robin_hood", "Robin Hood"), ("hub_antihub_occurrence", "antihubs")]


def planned_rows(specs: Iterable[TrialSpec], entries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per planned trial: its axes, `status` (ok / failed / missing) and what the ledger holds."""

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


