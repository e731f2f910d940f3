"""The one table model every output renders: a `Table` of rows (backbone, method) x columns (group, name), each
cell a `Value` with its state. The scenarios build tables (orchestrator/config/scenarios) from the *planned*
trials, each with its status, so a cell knows whether its trials ran; the Parquet and Markdown files, the console and
the HTML report (orchestrator/report/formats.py) only render them, so a cell reads the same everywhere:

- ok: a number over every trial the cell asks for;
- partial: a number over fewer (`of` says how many): written with `*`, never bold as a column's best;
- failed: a trial of the cell failed (`key`: the first): written `failed`, never a number;
- missing: no trial of the cell ran: written `missing`, never zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

STATES = ("ok", "partial", "failed", "missing")
# the paper's level order: video types low / mid / high, text types character / word / sentence
LEVEL_ORDER = ["low", "mid", "high", "character", "word", "sentence"]


@dataclass
class Value:
    """One table cell: a number, or why there is none (the module docstring says what each state means)."""
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

    @property
    def number(self) -> float | None:
        """The value when the cell has one (ok or partial), else None."""
        return None if self.state in ("failed", "missing") or math.isnan(self.value) else self.value


def combine(trials: list[dict[str, Any]], metric: str) -> Value:
    """The mean of `metric` over a group of planned trials (each a row with `status`: ok / failed / missing)."""
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


Row = tuple[str, str]        # (backbone, method row)
Column = tuple[str, str]     # (group: a level, a setting or "", column name)


@dataclass
class Table:
    name: str                                  # its file stem: qs_R1, qs_R1_mean, hubness, qgs_cross, ...
    title: str
    rows: list[Row]
    columns: list[Column]
    cells: dict[tuple[Row, Column], Value]
    keys: dict[str, Any] = field(default_factory=dict)   # what it is a table of (dataset, direction, severity, ...)
    digits: int = 1
    higher_better: bool | dict[str, bool] = True          # per column group when a mapping

    def cell(self, row: Row, col: Column) -> Value:
        return self.cells.get((row, col), Value())

    def better_high(self, col: Column) -> bool:
        hb = self.higher_better
        return hb.get(col[0], True) if isinstance(hb, dict) else hb

    def best(self) -> dict[Column, float]:
        """Each column's best value among its complete (ok) cells: a partial mean is never a column's best."""
        out = {}
        for col in self.columns:
            vals = [v.value for r in self.rows if (v := self.cells.get((r, col))) and v.state == "ok"]
            if vals:
                out[col] = max(vals) if self.better_high(col) else min(vals)
        return out


@dataclass
class TableOrder:
    """Row and column orders every table follows: the grid's backbones and method rows, the registries' types."""
    backbones: list[str]
    methods: list[str]
    perturbations: dict[str, list[str]] = field(default_factory=dict)   # direction -> query perturbation order
    levels: dict[str, dict[str, str]] = field(default_factory=dict)     # direction -> perturbation -> level

    def rows(self, part: pd.DataFrame) -> list[Row]:
        """The (backbone, method row) pairs of `part`, in the grid's order with Source first."""
        present = set(zip(part["backbone"], part["row"])) if len(part) else set()
        methods = sorted(self.methods, key=lambda m: m != "source")
        return [(b, m) for b in self.backbones for m in methods if (b, m) in present]


def groups(df: pd.DataFrame, by: list[str]) -> dict[tuple, list[dict[str, Any]]]:
    """The planned rows of `df` grouped by the values of `by`: a cell's trials are one group."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    if not len(df):
        return out
    for rec in df.to_dict("records"):
        out.setdefault(tuple(rec[k] for k in by), []).append(rec)
    return out
