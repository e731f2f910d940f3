"""The one table model every output renders: a `Table` of rows (backbone, method) x columns (group, name), each
cell a `Value` with its state. The scenarios build tables (orchestrator/config/scenarios) from the *planned*
trials, each with its status, so a cell knows whether its trials ran; the Parquet and Markdown files, the console and
the HTML report (orchestrator/report/formats.py) only render them, so a cell reads the same everywhere:

- ok: a number over every trial the cell asks for;
- partial: a number over fewer (`of` says how many): written with `*`, never bold as a column's best;
- failed: a trial of the cell failed (`key`: the first): written `failed`, never a number;
- missing: no trial of the cell ran: written `missing`, never zero;
- damaged: a trial of the cell has a ledger entry that could not be read as one (orchestrator/record/ledger.py:
  set aside, run again by `resume`; `key`: the first, `why`: its file and what is wrong): written `damaged`, never
  a number and never `missing`, which says that it never ran;
- undefined: the trials ran, but the statistic has no value on them (`why` says why: a rank correlation across
  configurations whose R@1, or whose signal, is the same for every one): written `undefined (<why>)`, never a number
  and never `missing`, which says that results are absent.

A cell with a number also carries a 95% interval (`low`, `high`; written "41.0 ±1.2", half its width) where one can
be had: over seeds when the cell's trials ran at several (`seeds`: each seed's mean; Student's t over them), else a
bootstrap over queries from each trial's per-query R@1 (`draws`: BOOTSTRAP_DRAWS means of queries resampled with
replacement, the same resampled positions for every trial of that query count, so cells over the same queries stay
paired: their difference has its own interval). Averages (`mean_of`) and differences (`difference`) carry them
through, seed by seed or draw by draw. Without either (one seed, a metric with no per-query value) there is none.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

STATES = ("ok", "partial", "failed", "damaged", "missing", "undefined")
NO_NUMBER = ("failed", "damaged", "missing", "undefined")   # the states of a cell without a number
# the paper's level order: video types low / mid / high, text types character / word / sentence
LEVEL_ORDER = ["low", "mid", "high", "character", "word", "sentence"]


CONFIDENCE = 0.95
BOOTSTRAP_DRAWS = 1000


@dataclass
class Value:
    """One table cell: a number, or why there is none (the module docstring says what each state means), and its
    95% interval when it has one."""
    value: float = math.nan
    state: str = "missing"
    key: str = ""
    of: str = ""
    low: float = math.nan                                    # the 95% interval (nan: none)
    high: float = math.nan
    seeds: dict[int, float] = field(default_factory=dict)    # seed -> the cell's value at that seed (2 or more)
    draws: Any = None                                        # bootstrap means over queries (numpy [BOOTSTRAP_DRAWS])
    why: str = ""              # undefined: why there is no value ("constant R@1"); damaged: the entry's file and why

    def text(self, digits: int) -> str:
        if self.state in ("failed", "damaged"):
            return self.state
        if self.state == "undefined":
            return f"undefined ({self.why})" if self.why else "undefined"
        if self.state == "missing" or math.isnan(self.value):
            return "missing"
        out = f"{self.value:.{digits}f}" + ("*" if self.state == "partial" else "")
        return out + (f" ±{self.half_width:.{digits}f}" if self.has_interval else "")

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def number(self) -> float | None:
        """The value when the cell has one (ok or partial), else None."""
        return None if self.state in NO_NUMBER or math.isnan(self.value) else self.value


def broken(trials: list[dict[str, Any]]) -> Value | None:
    """The cell of a group of planned trials of which one failed (failed, `key` the first) or has a damaged entry
    (damaged, `key` the first, `why` its row's `why`: the file); None when neither."""
    for state in ("failed", "damaged"):
        hit = next((t for t in trials if t["status"] == state), None)
        if hit is not None:
            return Value(state=state, key=str(hit.get("key") or ""),
                         why=str(hit.get("why") or "") if state == "damaged" else "")
    return None


def combine(trials: list[dict[str, Any]], metric: str) -> Value:
    """The mean of `metric` over a group of planned trials (each a row with `status`: ok / failed / damaged /
    missing), with its interval over the trials' seeds, or over their queries (module docstring)."""
    if not trials:
        return Value()
    if (bad := broken(trials)) is not None:
        return bad
    ran = [t for t in trials if t["status"] == "ok" and t.get(metric) is not None and not pd.isna(t.get(metric))]
    if not ran:
        return Value()
    out = Value(float(np.mean([t[metric] for t in ran])), "ok" if len(ran) == len(trials) else "partial",
                of="" if len(ran) == len(trials) else f"{len(ran)} of {len(trials)}")
    by_seed: dict[int, list[float]] = {}
    for t in ran:
        by_seed.setdefault(int(t.get("seed") or 0), []).append(float(t[metric]))
    if len(by_seed) > 1:
        out.seeds = {s: float(np.mean(v)) for s, v in sorted(by_seed.items())}
    elif metric == "R1":
        out.draws = query_draws([t.get("query_R1") for t in ran])
    return with_interval(out)


def query_draws(per_query: list[Any]) -> np.ndarray | None:
    """Bootstrap means (in %) of the mean over trials of each trial's per-query R@1 shares (None when a trial has
    none): every trial with n queries is resampled at the same positions (`_resample(n)`), so trials over the same
    queries stay paired."""
    draws = []
    for q in per_query:
        if q is None or (not isinstance(q, np.ndarray) and not isinstance(q, (list, tuple))) or len(q) == 0:
            return None
        q = np.asarray(q, dtype=np.float32)
        draws.append(q[_resample(len(q))].mean(axis=1))
    return 100.0 * np.mean(draws, axis=0)


@functools.lru_cache(maxsize=8)
def _resample(n: int) -> np.ndarray:
    """BOOTSTRAP_DRAWS resamples of n query positions, seeded by n: the same for every trial and every run."""
    return np.random.default_rng(n).integers(0, n, size=(BOOTSTRAP_DRAWS, n), dtype=np.int32)


@functools.lru_cache(maxsize=64)
def _t_quantile(df: int) -> float:
    from scipy.stats import t   # the report's process only

    return float(t.ppf(0.5 + CONFIDENCE / 2, df))


def with_interval(v: Value) -> Value:
    """`v` with low/high set from its seeds (Student's t over their means) or its bootstrap draws (percentiles)."""
    if len(v.seeds) > 1:
        vals = np.asarray(list(v.seeds.values()))
        half = _t_quantile(len(vals) - 1) * float(vals.std(ddof=1)) / math.sqrt(len(vals))
        centre = float(vals.mean())
        v.low, v.high = centre - half, centre + half
    elif v.draws is not None:
        v.low, v.high = (float(x) for x in np.percentile(v.draws, [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)]))
    return v


def _carry(values: list[Value], fn) -> dict[str, Any]:
    """Seeds or draws of a cell made from `values` by `fn` (elementwise over them), where every value has them."""
    if values and all(len(v.seeds) > 1 for v in values):
        common = sorted(set.intersection(*(set(v.seeds) for v in values)))
        if len(common) > 1:
            return {"seeds": {s: float(fn([v.seeds[s] for v in values])) for s in common}}
    if values and all(v.draws is not None for v in values) and len({len(v.draws) for v in values}) == 1:
        return {"draws": fn([v.draws for v in values])}
    return {}


def mean_of(values: list[Value]) -> Value:
    """An average column over other cells: partial when some have no number; failed/damaged/missing when none has
    one."""
    have = [v for v in values if v.state in ("ok", "partial")]
    if not have:
        return next((Value(state=v.state, key=v.key, why=v.why) for state in ("failed", "damaged") for v in values
                     if v.state == state), Value())
    complete = len(have) == len(values) and all(v.state == "ok" for v in have)
    return with_interval(Value(float(np.mean([v.value for v in have])), "ok" if complete else "partial",
                               of="" if complete else f"{len(have)} of {len(values)}",
                               **_carry(have, lambda xs: np.mean(xs, axis=0))))


def difference(a: Value, b: Value) -> Value:
    """a - b, paired: seed by seed (the seeds both have) or draw by draw; failed, damaged or missing when either
    is."""
    for state in ("failed", "damaged"):
        for v in (a, b):
            if v.state == state:
                return Value(state=state, key=v.key, why=v.why)
    if a.number is None or b.number is None:
        return Value()
    partial = "partial" in (a.state, b.state)
    return with_interval(Value(a.value - b.value, "partial" if partial else "ok", of=a.of or b.of,
                               **_carry([a, b], lambda xs: xs[0] - xs[1])))


Row = tuple[str, str]        # (backbone as the grid names it: a variant's label, else the backbone; method row)
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
    # whether the rows are alternatives to one another (methods), so that a column's best value means something and
    # is marked; False for rows of another kind, such as agreement measures (Kendall's tau of a ranking with the
    # paper's and with the oracle's), which nothing ranks
    compare_rows: bool = True

    def cell(self, row: Row, col: Column) -> Value:
        return self.cells.get((row, col), Value())

    def better_high(self, col: Column) -> bool:
        hb = self.higher_better
        return hb.get(col[0], True) if isinstance(hb, dict) else hb

    def best(self) -> dict[tuple[str, Column], float]:
        """Each column's best value per backbone, (backbone, column) -> value, among its complete (ok) cells: the
        methods are compared on the same backbone, as the paper bolds them, and a partial mean is never a column's
        best. None in a table whose rows are not compared (`compare_rows`)."""
        out: dict[tuple[str, Column], float] = {}
        if not self.compare_rows:
            return out
        for col in self.columns:
            for backbone in dict.fromkeys(r[0] for r in self.rows):
                vals = [v.value for r in self.rows
                        if r[0] == backbone and (v := self.cells.get((r, col))) and v.state == "ok"]
                if vals:
                    out[backbone, col] = max(vals) if self.better_high(col) else min(vals)
        return out


@dataclass
class TableOrder:
    """Row and column orders every table follows: the grid's backbones and method rows, the registries' types."""
    backbones: list[str]
    methods: list[str]
    perturbations: dict[str, list[str]] = field(default_factory=dict)   # direction -> query perturbation order
    levels: dict[str, dict[str, str]] = field(default_factory=dict)     # direction -> perturbation -> level

    def rows(self, part: pd.DataFrame) -> list[Row]:
        """The (backbone, method row) pairs of `part`, in the grid's order with Source first (a backbone as the grid
        names it: the `backbone_label` column, a backbone variant's label or the backbone)."""
        present = set(zip(part["backbone_label"], part["row"])) if len(part) else set()
        methods = sorted(self.methods, key=lambda m: m != "source")
        return [(b, m) for b in self.backbones for m in methods if (b, m) in present]


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of `df` as dicts of Python values, as `df.to_dict("records")` gives them, built column by column:
    `to_dict` boxes every value on its own (pandas' Arrow-backed string columns one element at a time), 3.4x slower
    on the full matrix's 7,200 planned rows (docs/notes/2026-11-29-finish.md)."""
    cols = list(df.columns)
    return [dict(zip(cols, values)) for values in zip(*(df[c].tolist() for c in cols))]


def groups(df: pd.DataFrame | list[dict[str, Any]], by: list[str]) -> dict[tuple, list[dict[str, Any]]]:
    """The planned rows of `df` (a frame, or its `records`) grouped by the values of `by`: a cell's trials are one
    group."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records(df) if isinstance(df, pd.DataFrame) else df:
        out.setdefault(tuple(rec[k] for k in by), []).append(rec)
    return out
