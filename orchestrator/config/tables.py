"""The one table model every output renders: a `Table` of rows (backbone, method) x columns (group, name), each
cell a `Value` with its state (ok / partial / failed / missing). The scenarios build tables
(orchestrator/config/scenarios); the Parquet and Markdown files, the console and the HTML report
(orchestrator/report) only render them, so a missing, failed or partial cell reads the same everywhere."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


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


