"""Result tables from the ledger: one row per trial (`trials.parquet`), and each scenario's tables in the paper's
layouts (query shift: Table 1 per dataset, direction and severity; cross-dataset and zero-shot QGS: Tables 4-5), as
Parquet (Arrow) and Markdown. The tables come from the scenarios (orchestrator/config/scenarios); this module only
collects the rows and writes the files. Cells that never ran are missing in every table, never zero.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.config.scenarios.base import ResultTable, TableOrder
from workloads.spec import SPEC_FIELDS

# every field of a trial spec is a column (a new field appears here, in MLflow params and in the ledger by itself)
METRICS = ["R1", "R5", "R10", "MdR", "MnR"]
HUB = ["hub_skewness", "hub_truncated_skewness", "hub_atkinson", "hub_robin_hood", "hub_antihub_occurrence",
       "hub_hub_occurrence", "hub_max_k_occurrence", "hub_antihub_count"]
TIMINGS = ["gallery_s", "adapt_s", "total_s", "per_query_ms"]


def trial_rows(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for e in entries:
        spec = e["spec"]
        row = {"key": e["key"], "status": e["status"], **{c: spec.get(c) for c in SPEC_FIELDS}}
        row["row"] = spec.get("variant") or spec["method"]   # the table row: variant name, else method
        row.update({m: e.get("metrics", {}).get(m) for m in METRICS + HUB})
        row.update({t: e.get("timings", {}).get(t) for t in TIMINGS})
        row.update({"n_queries": e.get("n_queries"), "n_gallery": e.get("n_gallery"),
                    "n_dropped": len(e.get("dropped") or []), "faithful_renders": e.get("faithful_renders"),
                    "fallbacks": "; ".join(e.get("fallbacks") or []), "error": e.get("error"),
                    "failed_batch": e.get("failed_batch"), "mlflow_runs": json.dumps(e.get("mlflow_runs") or {}),
                    "recorded_at": e.get("recorded_at")})
        rows.append(row)
    return rows


def trials_table(entries: Iterable[dict[str, Any]]) -> pa.Table:
    rows = trial_rows(entries)
    df = pd.DataFrame(rows, columns=None if rows else ["key", "status", *SPEC_FIELDS, "row", *METRICS, *HUB])
    return pa.Table.from_pandas(df, preserve_index=False)


def table_order(grid) -> TableOrder:
    from workloads.perturbations.text import TEXT_PERTURBATIONS
    from workloads.perturbations.video import VIDEO_PERTURBATIONS

    video, text = list(VIDEO_PERTURBATIONS.names()), list(TEXT_PERTURBATIONS.names())
    return TableOrder(backbones=list(grid.backbones), methods=list(grid.methods),
                      perturbations={"v2t": video, "t2v": text},
                      levels={"v2t": {n: VIDEO_PERTURBATIONS.static_info(n)["level"] for n in video},
                              "t2v": {n: TEXT_PERTURBATIONS.static_info(n)["level"] for n in text}})


def scenario_tables(grid, df: pd.DataFrame, metric: str | None = None,
                    skip: tuple[str, ...] = ()) -> dict[str, list[ResultTable]]:
    """Each scenario of the grid but those in `skip` -> its result tables (`metric`: that metric where a layout has a
    choice)."""
    order = table_order(grid)
    return {name: scenario.tables(grid, df, order, metric) if len(df) else []
            for name, scenario in grid.scenarios.items() if name not in skip}


def to_markdown(table: pd.DataFrame, digits: int = 1) -> str:
    cols = list(table.columns)
    lines = ["| backbone | method | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for (backbone, method), row in table.iterrows():
        vals = ["" if pd.isna(v) else f"{v:.{digits}f}" for v in row.tolist()]
        lines.append(f"| {backbone} | {method} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def write_tables(entries: list[dict[str, Any]], out_dir: Path, grid) -> list[Path]:
    """Write trials.parquet, every scenario's tables as <name>.parquet (tables of one name stacked, with their keys
    as leading columns) and <prefix>_tables.md under out_dir; returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = trials_table(entries)
    files = [out_dir / "trials.parquet"]
    pq.write_table(table, files[0])
    df = table.to_pandas()
    n_ok = int((df["status"] == "ok").sum()) if len(df) else 0
    for name, tables in scenario_tables(grid, df).items():
        scenario = grid.scenarios[name]
        md = [f"# {scenario.title}\n\n{len(df)} trials ({n_ok} ok).\n"]
        stacked: dict[str, list[pd.DataFrame]] = {}
        for t in tables:
            md.append(f"## {t.title}\n\n{to_markdown(t.frame, t.digits)}\n")
            flat = t.frame.reset_index()
            for i, (key, value) in enumerate(t.keys.items()):
                flat.insert(i, key, value)
            stacked.setdefault(t.name, []).append(flat)
        for stem, parts in stacked.items():
            path = out_dir / f"{stem}.parquet"
            pq.write_table(pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False), path)
            files.append(path)
        md_path = out_dir / f"{scenario.prefix}_tables.md"
        md_path.write_text("\n".join(md))
        files.append(md_path)
    return files
