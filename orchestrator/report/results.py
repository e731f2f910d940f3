"""Result files from the ledger: one row per planned trial (`trials.parquet`, with its status), and each scenario's
tables in the paper's layouts (query shift: Table 1 per dataset and direction, the mean over severities and each
severity, Table 3 for text queries, Table 13; QGS: Tables 4-5; mixed shift: Tables 17-18) as Parquet (wide, a state
column beside each value: orchestrator/report/formats.py) and Markdown. The tables come from the scenarios
(orchestrator/config/scenarios); this module only writes them. Cells that never ran are missing in every file,
failed ones failed, those whose ledger entry is damaged damaged (its file in the `why` columns), partial means
marked: never a zero, never a silent mean over fewer cells.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.config.tables import Table
from orchestrator.record.ledger import count_text
from orchestrator.report.formats import LEGEND, table_markdown, wide_frame
from orchestrator.report.protocols import protocol_tables
from orchestrator.report.rows import QS, planned_rows, table_order
from orchestrator.report.selection import paired_tables, selection_tables
from workloads.spec import TrialSpec


def scenario_tables(grid, df: pd.DataFrame, metric: str | None = None,
                    skip: tuple[str, ...] = ()) -> dict[str, list[Table]]:
    """Each scenario of the grid but those in `skip` -> its tables from the planned rows `df` (`metric`: that metric
    where a layout has a choice)."""
    order = table_order(grid)
    df = grid_configs(df)
    return {name: scenario.tables(grid, df, order, metric) if len(df) else []
            for name, scenario in grid.scenarios.items() if name not in skip}


def grid_configs(df: pd.DataFrame) -> pd.DataFrame:
    """The planned rows of the grid's own configurations: the paper-layout tables and plots read these; searched
    configurations (`config` set) are read by the selection tables (orchestrator/report/selection.py)."""
    if not len(df) or "config" not in df:
        return df
    return df[df["config"].fillna("") == ""]


def trials_table(df: pd.DataFrame) -> pa.Table:
    """`trials.parquet`: the planned rows, without their per-query lists; `status` ok / failed / damaged / missing,
    and `why` a damaged trial's ledger file and what is wrong with it (orchestrator/report/rows.py)."""
    keep = [c for c in df.columns if c not in ("k_occurrence", "batch_R1", "traceback", "query_R1", "running_R1")]
    return pa.Table.from_pandas(df[keep] if len(df) else pd.DataFrame(columns=["key", "status"]),
                                preserve_index=False)


def write_tables(entries: list[dict[str, Any]], out_dir: Path, grid, specs: list[TrialSpec] | None = None,
                 df: pd.DataFrame | None = None, computed: dict[str, list[Table]] | None = None) -> list[Path]:
    """Write trials.parquet, every scenario's tables as <name>.parquet (tables of one name stacked, with their keys
    as leading columns) and <prefix>_tables.md under out_dir; returns the files. `specs`: the planned trials (a
    trial without an entry is missing); default: the entries' own. `df`: their planned rows, and `computed` their
    `scenario_tables`, when made already (the report shows the same tables: orchestrator/report/outputs.py)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if df is None:
        specs = specs if specs is not None else [TrialSpec.from_dict(e["spec"]) for e in entries]
        df = planned_rows(specs, entries, lists=False)
    files = [out_dir / "trials.parquet"]
    pq.write_table(trials_table(df), files[0])
    computed = scenario_tables(grid, df) if computed is None else computed
    for name, tables in computed.items():
        scenario = grid.scenarios[name]
        mine = df[df["scenario"] == name] if len(df) else df
        done = dict(mine["status"].value_counts()) if len(mine) else {}
        head = f"# {scenario.title}\n\n{len(mine)} trials: {count_text(done)}. {LEGEND}\n"
        files += _write_stacked(out_dir, scenario.prefix, head, tables)
    for title, prefix, tables in analysis_tables(grid, df, computed):
        files += _write_stacked(out_dir, prefix, f"# {title}\n\n{LEGEND}\n", tables)
    return files


def analysis_tables(grid, df: pd.DataFrame, computed: dict[str, list[Table]]) -> list[tuple[str, str, list[Table]]]:
    """(title, file prefix, tables) of the tables read across scenarios' cells: the query-shift R@1 minus Source,
    paired (every grid with a Source row), and hyperparameter selection (grids with `search:`), both from
    orchestrator/report/selection.py; the stream protocols' (orchestrator/report/protocols.py: grids with several
    protocols or a multi-segment stream)."""
    out = []
    paired = paired_tables(computed.get(QS, []))
    if paired:
        out.append(("Query shift: R@1 minus Source, paired by seed (one seed: by query)", "paired", paired))
    protocols = protocol_tables(grid, grid_configs(df), table_order(grid)) if QS in grid.scenarios else []
    if protocols:
        out.append(("Query shift: stream protocols (docs/protocols.md)", "protocols", protocols))
    selection = selection_tables(grid, df, table_order(grid)) if len(df) else []
    if selection:
        out.append(("Hyperparameter selection without test labels", "hp_selection", selection))
    return out


def _write_stacked(out_dir: Path, prefix: str, head: str, tables: list[Table]) -> list[Path]:
    """Tables as <name>.parquet (tables of one name stacked, their keys as leading columns) and <prefix>_tables.md."""
    md, stacked, files = [head], {}, []
    for t in tables:
        md.append(f"## {t.title}\n\n{table_markdown(t)}\n")
        stacked.setdefault(t.name, []).append(wide_frame(t))
    for stem, parts in stacked.items():
        path = out_dir / f"{stem}.parquet"
        pq.write_table(pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False), path)
        files.append(path)
    md_path = out_dir / f"{prefix}_tables.md"
    md_path.write_text("\n".join(md))
    return files + [md_path]
