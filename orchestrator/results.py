"""Result tables from the ledger: one row per trial (Parquet), and query-shift tables in the layout of the paper's
Table 1 (rows backbone x method, columns perturbation, then Avg; one table per dataset, direction and severity),
for R@1 and for hubness skewness."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from workloads.spec import CLEAN

SPEC_COLUMNS = ["dataset", "direction", "scenario", "perturbation", "severity", "method", "variant", "backbone", "seed",
                "faithful", "source_dataset", "clip_model", "precision", "hub_k", "options", "model_version",
                "data_version"]
METRICS = ["R1", "R5", "R10", "MdR", "MnR"]
HUB = ["hub_skewness", "hub_truncated_skewness", "hub_atkinson", "hub_robin_hood", "hub_antihub_occurrence",
       "hub_hub_occurrence", "hub_max_k_occurrence", "hub_antihub_count"]
TIMINGS = ["gallery_s", "adapt_s", "total_s", "per_query_ms"]
TABLE_METRICS = {"R1": "R@1 (%)", "hub_skewness": "k-occurrence skewness"}


def trial_rows(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for e in entries:
        spec = e["spec"]
        row = {"key": e["key"], "status": e["status"], **{c: spec.get(c) for c in SPEC_COLUMNS}}
        row["row"] = spec.get("variant") or spec["method"]   # the table row: variant name, else method
        row.update({m: e.get("metrics", {}).get(m) for m in METRICS + HUB})
        row.update({t: e.get("timings", {}).get(t) for t in TIMINGS})
        row.update({"n_queries": e.get("n_queries"), "n_gallery": e.get("n_gallery"),
                    "n_dropped": len(e.get("dropped") or []), "faithful_renders": e.get("faithful_renders"),
                    "fallbacks": "; ".join(e.get("fallbacks") or []), "error": e.get("error"),
                    "failed_batch": e.get("failed_batch"), "mlflow_run_id": e.get("mlflow_run_id"),
                    "recorded_at": e.get("recorded_at")})
        rows.append(row)
    return rows


def trials_table(entries: Iterable[dict[str, Any]]) -> pa.Table:
    rows = trial_rows(entries)
    df = pd.DataFrame(rows, columns=None if rows else ["key", "status", *SPEC_COLUMNS, *METRICS, *HUB])
    return pa.Table.from_pandas(df, preserve_index=False)


def qs_tables(df: pd.DataFrame, metric: str, perturbation_order: list[str], method_order: list[str],
              backbone_order: list[str]) -> dict[tuple[str, str, int], pd.DataFrame]:
    """{(dataset, direction, severity): table} with rows (backbone, method), columns perturbations + Avg
    (+ Clean when the clean reference ran). Only successful query-shift trials count."""
    ok = df[(df["status"] == "ok") & (df["scenario"] == "query_shift")]
    out = {}
    for (ds, direction), part in ok.groupby(["dataset", "direction"], sort=False):
        clean = part[part["perturbation"] == CLEAN].set_index(["backbone", "row"])[metric]
        pert = part[part["perturbation"] != CLEAN]
        severities = sorted(pert["severity"].unique()) or [0]
        for sev in severities:
            cells = pert[pert["severity"] == sev]
            if len(cells):
                table = cells.pivot_table(index=["backbone", "row"], columns="perturbation", values=metric,
                                          aggfunc="first")
                cols = [p for p in perturbation_order if p in table.columns]
                table = table[cols]
                table["Avg"] = table[cols].mean(axis=1)
            else:
                table = pd.DataFrame(index=clean.index)
            if len(clean):
                table["Clean"] = clean.reindex(table.index) if len(table.index) else clean
            order = [(b, m) for b in backbone_order for m in method_order if (b, m) in table.index]
            table = table.reindex(order)
            table.index.names = ["backbone", "method"]
            out[(ds, direction, int(sev))] = table
    return out


def to_markdown(table: pd.DataFrame, digits: int = 1) -> str:
    cols = list(table.columns)
    lines = ["| backbone | method | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for (backbone, method), row in table.iterrows():
        vals = ["" if pd.isna(v) else f"{v:.{digits}f}" for v in row.tolist()]
        lines.append(f"| {backbone} | {method} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def write_tables(entries: list[dict[str, Any]], out_dir: Path, perturbation_order: list[str],
                 method_order: list[str], backbone_order: list[str]) -> list[Path]:
    """Write trials.parquet, qs_<metric>.parquet and qs_tables.md under out_dir; returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = trials_table(entries)
    files = [out_dir / "trials.parquet"]
    pq.write_table(table, files[0])
    df = table.to_pandas()
    md = [f"# Query-shift tables\n\n{len(df)} trials ({int((df['status'] == 'ok').sum()) if len(df) else 0} ok).\n"]
    for metric, title in TABLE_METRICS.items():
        if not len(df):
            break
        tables = qs_tables(df, metric, perturbation_order, method_order, backbone_order)
        long = []
        for (ds, direction, sev), t in tables.items():
            md.append(f"## {title}: {ds}, {direction}, severity {sev}\n\n{to_markdown(t, 1 if metric == 'R1' else 2)}\n")
            flat = t.reset_index()
            flat.insert(0, "severity", sev)
            flat.insert(0, "direction", direction)
            flat.insert(0, "dataset", ds)
            long.append(flat)
        if long:
            path = out_dir / f"qs_{metric}.parquet"
            pq.write_table(pa.Table.from_pandas(pd.concat(long, ignore_index=True), preserve_index=False), path)
            files.append(path)
    md_path = out_dir / "qs_tables.md"
    md_path.write_text("\n".join(md))
    files.append(md_path)
    return files
