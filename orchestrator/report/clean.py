"""The report's "clean retrieval beside the papers" table: each clean Source cell of a grid (no perturbation, no
adaptation; the mean over seeds where a grid runs several) next to the published clean R@1 for the same backbone,
checkpoint source, dataset and direction, on the same protocol (the comparison of `mlvp check`:
orchestrator/planning/clean_check.py over workloads/paper.py). Only cases for which a paper publishes something are
listed; a published number on another protocol (another query or gallery count) is never compared and shows as
`missing`."""
from __future__ import annotations

import math

import pandas as pd

from orchestrator.config.tables import Table, Value, broken
from orchestrator.planning.clean_check import CheckCase, compare
from workloads.spec import CLEAN

COLUMNS = [("R@1", "ours"), ("R@1", "paper"), ("R@1", "ours - paper")]


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def clean_table(df: pd.DataFrame) -> Table | None:
    """The table, or None when no clean Source cell of the grid has a published counterpart."""
    if not len(df) or "perturbation" not in df:
        return None
    clean = df[(df["perturbation"] == CLEAN) & (df["row"] == "source")].copy()
    if not len(clean):
        return None
    # one row per case: with several seeds (docs/selection.md), the mean of the seeds that ran
    clean["source"] = [s or d for s, d in zip(clean.get("source_dataset", clean["dataset"]).fillna(""),
                                              clean["dataset"])]
    cases = []
    for _, part in clean.groupby(["backbone_label", "source", "dataset", "direction"], sort=False):
        ok = part[part["status"] == "ok"]
        r = (ok if len(ok) else part).iloc[0].copy()
        if len(ok):
            r["R1"] = float(pd.to_numeric(ok["R1"]).mean())
        cases.append(r)
    rows, cells = [], {}
    for r in cases:
        source = r["source"]
        case = CheckCase(r["backbone_label"], source, r["dataset"], {}, registered=r["backbone"])
        n = _number(r.get("n_queries"))
        case.results[r["direction"]] = {"status": r["status"], "n_queries": 0 if math.isnan(n) else int(n),
                                        "n_gallery": _number(r.get("n_gallery")),
                                        "error": r.get("error") if isinstance(r.get("error"), str) else None,
                                        "metrics": {k: _number(r.get(k)) for k in ("R1", "R5", "R10")}}
        c = compare(case, r["direction"])
        if not [p for p in c.rows if not p.bound]:
            continue
        where = "" if source == r["dataset"] else f"{source} -> "
        row = (r["backbone_label"], f"{case.setting}: {where}{r['dataset']} {r['direction']}")
        rows.append(row)
        if r["status"] != "ok":
            cells.update({(row, col): broken([r]) or Value() for col in COLUMNS})   # failed, damaged or missing
            continue
        ours = c.metrics["R1"]
        cells[(row, COLUMNS[0])] = Value(ours, "ok")
        if c.compared:
            paper = min(c.compared, key=lambda p: abs(ours - p.r1)).r1
            cells[(row, COLUMNS[1])] = Value(paper, "ok")
            cells[(row, COLUMNS[2])] = Value(ours - paper, "ok")
    if not rows:
        return None
    return Table("clean_vs_paper", "Clean retrieval beside the papers: Source R@1 without perturbation and the "
                 "nearest published R@1 on the same protocol (workloads/paper.py; `missing`: none published on "
                 "this protocol)", rows, COLUMNS, cells, {}, 1, {"R@1": True})
