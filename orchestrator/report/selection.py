"""Hyperparameter selection without test labels, and paired differences to Source: tables (orchestrator/config/
tables.py, rendered like every other) and one plot.

Selection (grids with `search:`, orchestrator/config/search.py). For every searched method, each shifted query-shift
cell and seed holds a set of candidate configurations (the grid's own, `config` "", and the searched ones). A
*protocol* picks one candidate per (cell, seed) and reads its test R@1:
- default: the grid's own configuration (what the paper's tables report);
- oracle (upper bound): the candidate with the best test R@1, which no deployment can know;
- each label-free signal of `SURROGATES` (schema.py): the candidate with the best signal;
- cross-shift: the candidate with the best mean test R@1 over the *other* shift types of the same seed (labels of
  other shifts, never of this one: Cygert et al.'s selection on another benchmark, leave-one-shift-out).
A candidate that failed (a diverged learning rate) cannot be picked by any protocol; a cell whose candidates did not
all run is counted, and the protocol's cell is partial (`*`), never shown as complete.

Tables per (dataset, direction):
- `hp_selection_R1`: R@1 reached per method x protocol, the mean over cells and seeds with its 95% interval (over
  seeds; one seed: bootstrap over queries). Source, which has nothing to tune, reads the same in every column;
- `hp_selection_correlation`: Spearman's rank correlation between each signal (signed so that higher is better) and
  test R@1 across the candidates of a (cell, seed), the mean over them. Where R@1 or the signal is the same for every
  candidate the correlation is undefined (a constant has no ranking): such groups are left out of the mean and
  counted; a cell where it is undefined in every group is `undefined` with the reason (constant R@1, constant
  signal), never `missing`, which says that results are absent. Nothing is bold: the question it answers (which
  signal tracks R@1) compares a row's signals, and its columns hold different signals' correlations;
- `hp_selection_ranking`: each protocol's ranking of the methods by R@1 reached (1 = best), beside the ranking the
  paper's Table 1 gives over the same shift types (workloads/paper.py), and Kendall's tau between each protocol's
  ranking and the paper's and the oracle's (`hp_selection_agreement`: its rows are not compared, nothing is bold).

Paired tables (every grid with a Source row): each method's query-shift R@1 minus Source's, cell by cell, paired
seed by seed (or query by query with one seed), so the interval is that of the difference.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.config.schema import SURROGATES
from orchestrator.config.tables import Table, TableOrder, Value, broken, combine, difference, records, with_interval
from orchestrator.report.rows import QS
from workloads import paper
from workloads.spec import CLEAN

ORACLE = "oracle (upper bound)"
CROSS = "cross-shift"
DEFAULT = "default"
LABEL_FREE = "label-free"


def protocols() -> list[tuple[str, str]]:
    """The selection tables' columns: (group, protocol)."""
    return [("", DEFAULT), ("", ORACLE), *((LABEL_FREE, s) for s in SURROGATES), ("", CROSS)]


# -- the candidates ------------------------------------------------------------------------------------------------
def _shifted(df: pd.DataFrame) -> pd.DataFrame:
    if not len(df):
        return df
    keep = (df["scenario"] == QS) & (df["perturbation"] != CLEAN) & (df["mix"].fillna("") == "")
    return df[keep]


def _candidates(part: pd.DataFrame) -> dict[tuple, list[dict[str, Any]]]:
    """(backbone, row, perturbation, severity, seed) -> the planned rows of its candidate configurations."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records(part):
        key = (rec["backbone_label"], rec["row"], rec["perturbation"], int(rec["severity"]), int(rec["seed"]))
        rec["config"] = rec.get("config") or ""
        out.setdefault(key, []).append(rec)
    return out


def _ran(rec: dict[str, Any], metric: str) -> bool:
    v = rec.get(metric)
    return rec["status"] == "ok" and v is not None and not (isinstance(v, float) and math.isnan(v))


def pick(cands: list[dict[str, Any]], protocol: str) -> dict[str, Any] | None:
    """The candidate a protocol (not cross-shift) picks among one (cell, seed)'s configurations; None: none can be."""
    if protocol == DEFAULT:
        return next((c for c in cands if c["config"] == "" and _ran(c, "R1")), None)
    metric, higher = ("R1", True) if protocol == ORACLE else (protocol, SURROGATES[protocol])
    ok = [c for c in cands if _ran(c, metric) and _ran(c, "R1")]
    if not ok:
        return None
    # ties go to the earlier candidate (the grid's own first, then in the order drawn): deterministic
    return max(ok, key=lambda c: float(c[metric]) if higher else -float(c[metric]))


def pick_cross(groups: dict[tuple, list[dict[str, Any]]], key: tuple) -> dict[str, Any] | None:
    """Cross-shift: the configuration with the best mean test R@1 over the other shifted cells of the same backbone,
    method and seed (each config counted where it ran everywhere there), read on this cell."""
    backbone, row, pert, sev, seed = key
    others = [g for k, g in groups.items() if k[:2] == (backbone, row) and k[4] == seed and (k[2], k[3]) != (pert, sev)]
    if not others:
        return None
    score: dict[str, list[float]] = {}
    for g in others:
        for c in g:
            if _ran(c, "R1"):
                score.setdefault(c["config"], []).append(float(c["R1"]))
    full = {cfg: np.mean(v) for cfg, v in score.items() if len(v) == len(others)}
    here = {c["config"]: c for c in groups[key] if _ran(c, "R1")}
    chosen = [cfg for cfg in sorted(full, key=lambda cfg: -full[cfg]) if cfg in here]
    return here[chosen[0]] if chosen else None


def _protocol_value(groups: dict[tuple, list[dict[str, Any]]], keys: list[tuple], protocol: str) -> Value:
    """R@1 reached by one protocol over the (cell, seed) groups `keys`: the picked trials combined (mean, interval);
    partial when a group's candidates did not all run or none could be picked, failed/missing when none has one."""
    picked, complete = [], 0
    for key in keys:
        cands = groups[key]
        chosen = pick_cross(groups, key) if protocol == CROSS else pick(cands, protocol)
        if chosen is not None:
            picked.append(chosen)
        complete += chosen is not None and all(c["status"] not in ("missing", "damaged") for c in cands)
    if not picked:
        bad = broken([c for k in keys for c in groups[k]])
        return bad if bad is not None and protocol == DEFAULT else Value()
    v = combine(picked, "R1")
    if complete < len(keys):
        v.state, v.of = "partial", f"{complete} of {len(keys)} cells with every configuration run"
    return v


# -- tables --------------------------------------------------------------------------------------------------
def selection_tables(grid, df: pd.DataFrame, order: TableOrder) -> list[Table]:
    """The selection tables of a grid with `search:` (module docstring); [] without one."""
    if getattr(grid, "search", None) is None:
        return []
    shifted = _shifted(df)
    out: list[Table] = []
    searched = set(grid.search.methods)
    for (ds, direction), part in shifted.groupby(["dataset", "direction"], sort=False) if len(shifted) else []:
        groups = _candidates(part)
        rows = order.rows(part)
        cols = protocols()
        cells: dict = {}
        for r in rows:
            keys = [k for k in groups if k[:2] == r]
            for col in cols:
                proto = col[1] if r[1] in searched else DEFAULT   # nothing to choose: the grid's own everywhere
                cells[(r, col)] = _protocol_value(groups, keys, proto)
        where = f"{ds}, {direction}"
        out.append(Table("hp_selection_R1", f"R@1 reached by each selection protocol (mean over shifted cells and "
                         f"seeds; oracle: an upper bound): {where}", rows, cols, cells,
                         {"dataset": ds, "direction": direction}, 1, True))
        reached = out[-1]
        out.append(_correlation_table(groups, rows, searched, where, ds, direction))
        out.extend(_ranking_tables(reached, part, where, ds, direction))
    return out


def _spearman(x: list[float], y: list[float]) -> float:
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def _constant(signal: list[float], r1: list[float]) -> tuple[bool, bool]:
    """Whether R@1, and whether the signal, is the same for every candidate: either makes the rank correlation
    undefined (a constant has no ranking), which is not the same as a result being absent."""
    return len(set(r1)) == 1, len(set(signal)) == 1


def _why_undefined(constant: list[tuple[bool, bool]]) -> str:
    """Why a correlation over these (cell, seed) groups is undefined, each group's (R@1 constant, signal constant)."""
    r1, signal = all(c[0] for c in constant), all(c[1] for c in constant)
    if r1 and signal:
        return "constant R@1 and signal"
    return "constant R@1" if r1 else "constant signal" if signal else "constant R@1 or signal"


class _Correlations:
    """The rank correlations of one table cell, per (cell, seed) group: the defined ones by seed, and the groups where
    it is undefined (`_constant`)."""

    def __init__(self):
        self.by_seed: dict[int, list[float]] = {}
        self.constant: list[tuple[bool, bool]] = []

    def add(self, seed: int, signal: list[float], r1: list[float]) -> None:
        r1_constant, signal_constant = _constant(signal, r1)
        if r1_constant or signal_constant:
            self.constant.append((r1_constant, signal_constant))
            return
        rho = _spearman(signal, r1)
        if not math.isnan(rho):
            self.by_seed.setdefault(seed, []).append(rho)

    def extend(self, other: "_Correlations") -> None:
        for seed, rhos in other.by_seed.items():
            self.by_seed.setdefault(seed, []).extend(rhos)
        self.constant.extend(other.constant)

    def value(self) -> Value:
        """The mean over the groups where it is defined (those where it is not are counted in `of`); undefined when
        it is defined in none and undefined in some; missing when no group had the candidates to compute it."""
        n = len(self.constant)
        if not self.by_seed and n:
            why = _why_undefined(self.constant)
            return Value(state="undefined", why=why,
                         of=f"undefined in all {n} cells x seeds ({why}: a constant has no ranking)")
        v = _mean_by_seed(self.by_seed)
        if n and v.state == "ok":
            v.of += f"; {n} more undefined ({_why_undefined(self.constant)})"
        return v


def _correlation_table(groups, rows, searched, where, ds, direction) -> Table:
    cols = [(LABEL_FREE, s) for s in SURROGATES]
    cells: dict = {}
    all_rows = [r for r in rows if r[1] in searched]
    pooled = {s: _Correlations() for s in SURROGATES}
    for r in all_rows:
        for s, higher in SURROGATES.items():
            corr = _Correlations()
            for key in (k for k in groups if k[:2] == r):
                ok = [c for c in groups[key] if _ran(c, s) and _ran(c, "R1")]
                if len(ok) < 3:
                    continue
                corr.add(key[4], [float(c[s]) * (1 if higher else -1) for c in ok], [float(c["R1"]) for c in ok])
            pooled[s].extend(corr)
            cells[(r, (LABEL_FREE, s))] = corr.value()
    out_rows = list(all_rows)
    if len({r[1] for r in all_rows}) > 1:
        every = (all_rows[0][0], "all searched methods")
        out_rows.append(every)
        for s in SURROGATES:
            cells[(every, (LABEL_FREE, s))] = pooled[s].value()
    return Table("hp_selection_correlation", f"Spearman correlation of each label-free signal (signed: higher is "
                 f"better) with test R@1 across configurations, mean over cells and seeds: {where}", out_rows, cols,
                 cells, {"dataset": ds, "direction": direction}, 2, True, compare_rows=False)


def _mean_by_seed(by_seed: dict[int, list[float]]) -> Value:
    vals = [x for v in by_seed.values() for x in v]
    if not vals:
        return Value()
    v = Value(float(np.mean(vals)), "ok", of=f"{len(vals)} cells x seeds")
    if len(by_seed) > 1:
        v.seeds = {s: float(np.mean(x)) for s, x in sorted(by_seed.items())}
    return with_interval(v)


def _ranks(values: dict[tuple, float | None]) -> dict[tuple, float | None]:
    have = {r: v for r, v in values.items() if v is not None}
    ranked = pd.Series(have, dtype=float).rank(ascending=False, method="min") if have else pd.Series(dtype=float)
    return {r: (float(ranked[r]) if r in have else None) for r in values}


def _kendall(a: dict[tuple, float | None], b: dict[tuple, float | None]) -> float:
    both = [r for r in a if a[r] is not None and b.get(r) is not None]
    if len(both) < 2:
        return math.nan
    agree = 0.0
    pairs = 0
    for i, r in enumerate(both):
        for q in both[i + 1:]:
            pairs += 1
            agree += np.sign(a[r] - a[q]) * np.sign(b[r] - b[q])
    return float(agree / pairs)


def _ranking_tables(reached: Table, part: pd.DataFrame, where, ds, direction) -> list[Table]:
    types = list(dict.fromkeys(part["perturbation"]))
    cols = [*reached.columns, ("", "paper (Table 1)")]
    rows = list(reached.rows)
    cells: dict = {}
    rankings: dict[tuple[str, str], dict[tuple, float | None]] = {}
    for col in reached.columns:
        rankings[col] = _ranks({r: reached.cell(r, col).number for r in rows})
    paper_values = {r: paper.table1_mean(r[0], r[1], types) for r in rows}
    rankings[cols[-1]] = _ranks(paper_values)
    for col, ranking in rankings.items():
        for r in rows:
            rank = ranking.get(r)
            partial = col != cols[-1] and reached.cell(r, col).state == "partial"
            cells[(r, col)] = Value(rank, "partial" if partial else "ok") if rank is not None else Value()
    agree_rows, agree = [], {}
    for label, ref in (("vs paper (Table 1)", cols[-1]), ("vs oracle", ("", ORACLE))):
        row = ("Kendall tau", label)
        agree_rows.append(row)
        for col in reached.columns:
            tau = _kendall(rankings[col], rankings[ref])
            agree[(row, col)] = Value(tau, "ok") if not math.isnan(tau) else Value()
    n_paper = sum(v is not None for v in paper_values.values())
    keys = {"dataset": ds, "direction": direction}
    return [Table("hp_selection_ranking", f"Ranking of the methods by R@1 reached under each protocol (1 = best), "
                  f"beside the paper's Table 1 over the same types ({n_paper} of its rows; MSRVTT, severity 5): "
                  f"{where}", rows, cols, cells, keys, 0, False),
            # Kendall's tau against two references: rows of another kind than methods, so no column's best is marked
            Table("hp_selection_agreement", f"Agreement of each protocol's ranking with the paper's and the oracle's "
                  f"(Kendall tau over the methods, 1 = same order): {where}", agree_rows, reached.columns, agree,
                  keys, 2, True, compare_rows=False)]


def paired_tables(tables: list[Table]) -> list[Table]:
    """Each query-shift R@1 table's methods minus Source, cell by cell, paired by seed or query (module docstring)."""
    out = []
    for t in tables:
        if t.name not in ("qs_R1", "qs_R1_mean"):
            continue
        rows = [r for r in t.rows if r[1] != "source" and (r[0], "source") in t.rows]
        if not rows:
            continue
        cells = {(r, c): difference(t.cell(r, c), t.cell((r[0], "source"), c)) for r in rows for c in t.columns}
        name = "qs_R1_minus_source" + ("_mean" if t.name.endswith("_mean") else "")
        out.append(Table(name, f"{t.title.replace('R@1 (%)', 'R@1 minus Source (points, paired)')}", rows,
                         t.columns, cells, dict(t.keys), t.digits, True))
    return out


def plot_selection(tables: list[Table], out: Path) -> list[Path]:
    """R@1 reached per method and protocol with its 95% interval, one figure per selection table."""
    files = []
    for t in (t for t in tables if t.name == "hp_selection_R1"):
        if not t.rows:
            continue
        import matplotlib   # matplotlib: only when plots are drawn

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt   # matplotlib: only when plots are drawn

        fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(t.columns) * max(1, len(t.rows)) / 3), 3.2))
        width = 0.8 / len(t.rows)
        for i, r in enumerate(t.rows):
            vals = [t.cell(r, c) for c in t.columns]
            ys = [v.value if v.number is not None else np.nan for v in vals]
            err = np.array([[v.value - v.low, v.high - v.value] if v.has_interval else [0.0, 0.0] for v in vals]).T
            ax.bar(np.arange(len(vals)) + i * width, ys, width, yerr=err, capsize=2, label=f"{r[1]} ({r[0]})")
        ax.set_xticks(np.arange(len(t.columns)) + width * (len(t.rows) - 1) / 2, [c[1] for c in t.columns],
                      fontsize=7, rotation=20)
        ax.set_ylabel("R@1 (%)", fontsize=8)
        ax.set_title(t.title[:110], fontsize=8)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = out / f"hp_selection_{t.keys.get('dataset', '')}_{t.keys.get('direction', '')}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=90)
        plt.close(fig)
        files.append(path)
    return files
