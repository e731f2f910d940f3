"""The stream protocols' tables (docs/protocols.md: Tables), from the planned rows (orchestrator/report/rows.py), in
the table model every output renders (orchestrator/config/tables.py), so a cell that never ran reads `missing`, one
that failed `failed`, a damaged entry `damaged`, as everywhere:

- `protocols` (a grid with more than one protocol): per (dataset, direction), rows backbone x method, a column per
  protocol (a single-segment protocol by its name, with its options and its batch size where these are not the
  default; a multi-segment stream by its column name, e.g. `continual`, `gradual-2`), each cell the mean R@1 over the
  protocol's trials of the row (every shifted cell of the grid; a stream: its one trial), with the interval of
  `combine` (over seeds, else a bootstrap over queries);
- `protocol_segments` (a grid with a multi-segment stream): per stream, CoTTA's layout: rows backbone x method,
  columns the stream's segments in stream order (`mixed_domains`: its segments as listed, their queries being
  interleaved), then their mean; each cell the R@1 of the trial's queries of that segment; below each row, where
  the grid plans them, the same method's reset-each-shift trials of the same cells (`<method> (reset_each_shift)`)."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.config.tables import Table, TableOrder, combine, groups, mean_of, records
from orchestrator.report.rows import QS
from workloads.spec import CLEAN


def protocol_tables(grid, df: pd.DataFrame, order: TableOrder) -> list[Table]:
    """The leaderboard across protocols, then the per-segment table of each multi-segment stream."""
    mine = df[(df["scenario"] == QS) & (df["mix"].fillna("") == "")] if len(df) and "protocol_label" in df else df[:0]
    if not len(mine):
        return []
    mine = mine.assign(protocol_column=[_column(r, grid.runtime.batch_size) for r in records(mine)])
    out = []
    if mine["protocol_column"].nunique() > 1:
        out += _leaderboards(mine, order)
    return out + _segment_tables(mine, order)


def _column(row: dict[str, Any], batch_size: int) -> str:
    """A trial's protocol column: a stream's own name (its `perturbation`: orchestrator/planning/plan.py
    stream_trials), else the protocol with its options and a batch size other than the grid's."""
    if row.get("segments"):
        return str(row["perturbation"])
    name = str(row["protocol_label"])
    options = json.loads(row.get("protocol_options") or "{}")
    if options:
        name += " " + ",".join(f"{k}={v}" for k, v in sorted(options.items()))
    if row.get("batch_size") and int(row["batch_size"]) != batch_size:
        name += f" (batch {int(row['batch_size'])})"
    return name


def _leaderboards(mine: pd.DataFrame, order: TableOrder) -> list[Table]:
    shifted = mine[(mine["perturbation"] != CLEAN) | (mine["segments"].fillna("") != "")]
    out = []
    for (ds, direction), part in shifted.groupby(["dataset", "direction"], sort=False):
        rows = order.rows(part)
        cols = [("", c) for c in dict.fromkeys(part["protocol_column"])]
        idx = groups(part, ["backbone_label", "row", "protocol_column"])
        cells = {(r, c): combine(idx.get((*r, c[1]), []), "R1") for r in rows for c in cols}
        out.append(Table("protocols", f"R@1 (%) per stream protocol: {ds}, {direction} (mean over the protocol's "
                         "shifted cells; a stream: its whole stream)", rows, cols, cells,
                         {"dataset": ds, "direction": direction}))
    return out


def _segment_tables(mine: pd.DataFrame, order: TableOrder) -> list[Table]:
    streams = mine[mine["segments"].fillna("") != ""]
    plain = mine[(mine["protocol_column"] == "reset_each_shift") & (mine["segments"].fillna("") == "")]
    resets = groups(plain, ["dataset", "direction", "backbone_label", "row", "perturbation", "severity"])
    out = []
    for (ds, direction, stream), part in streams.groupby(["dataset", "direction", "perturbation"], sort=False):
        cells_of = [(str(p), int(s)) for p, s in json.loads(part["segments"].iloc[0])]
        segments = [f"{p}-{s}" for p, s in cells_of]
        cols = [(str(i + 1), cell) for i, cell in enumerate(segments)]
        rows = order.rows(part)
        recs = records(part)
        for rec in recs:   # each segment's R@1 as a metric of its own, for `combine`
            values = rec.get("segment_R1")
            values = list(values) if isinstance(values, (list, tuple, np.ndarray)) else []
            rec.update({f"seg{i}": values[i] if i < len(values) else None for i in range(len(cols))})
        idx = groups(recs, ["backbone_label", "row"])
        cells = {}
        for r in rows:
            for i, col in enumerate(cols):
                cells[(r, col)] = combine(idx.get(r, []), f"seg{i}")
            cells[(r, ("", "Mean"))] = mean_of([cells[(r, c)] for c in cols])
        # beside each row, the same method reset on each segment's cell (the paper's protocol), where the grid plans
        # those trials for every segment: what the stream's carried-over state gains or loses
        beside = {r: [resets.get((ds, direction, *r, p, s), []) for p, s in cells_of] for r in rows}
        shown = []
        for r in rows:
            shown.append(r)
            if all(beside[r]):
                twin = (r[0], f"{r[1]} (reset_each_shift)")
                shown.append(twin)
                for col, trials in zip(cols, beside[r]):
                    cells[(twin, col)] = combine(trials, "R1")
                cells[(twin, ("", "Mean"))] = mean_of([cells[(twin, c)] for c in cols])
        out.append(Table("protocol_segments", f"R@1 (%) per segment, in stream order: {ds}, {direction}, {stream} "
                         f"({part['protocol_label'].iloc[0]}), each method beside its reset-each-shift R@1 on the "
                         "same cells", shown, cols + [("", "Mean")], cells,
                         {"dataset": ds, "direction": direction, "stream": stream}))
    return out
