"""Query shift (QS): perturbed queries against a clean gallery, each dataset with its own fine-tuned checkpoint.

v2t queries are videos (the 12 MLVP types x 5 severities); t2v queries are captions. Tables: the paper's Table 1
layout per (dataset, direction, severity): rows backbone x method, columns the query perturbations in registry order,
their average, and the clean reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from orchestrator.scenarios import register_scenario
from orchestrator.scenarios.base import Cell, ResultTable, Scenario, TableOrder, ordered_rows, successful
from workloads.spec import CLEAN

METRICS = {"R1": ("R@1 (%)", 1), "hub_skewness": ("k-occurrence skewness", 2)}


@dataclass
class QueryShiftConfig:
    datasets: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=lambda: ["v2t"])
    perturbations: list[str] = field(default_factory=list)   # video perturbations: they shift v2t queries
    severities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    clean: bool = True                                          # add the unperturbed reference row


@register_scenario("query_shift", order=0)
class QueryShift(Scenario):
    section = "query_shift"
    Config = QueryShiftConfig
    prefix = "qs"
    title = "Query-shift tables"

    def check(self, grid) -> None:
        from orchestrator.grid import GridError, check_names, known_video_perturbations

        c = self.config
        check_names("query_shift.datasets", c.datasets, list(grid.datasets), "dataset (declare it under datasets:)")
        check_names("query_shift.directions", c.directions, ["v2t", "t2v"], "direction")
        check_names("query_shift.perturbations", c.perturbations, known_video_perturbations(), "video perturbation")
        check_names("query_shift.severities", c.severities, [1, 2, 3, 4, 5], "severity")
        if c.directions == ["t2v"] and c.perturbations:
            raise GridError("query_shift.perturbations: video perturbations shift video queries (v2t); t2v queries "
                            "are text, and text perturbations are not implemented yet: add v2t to directions or list "
                            "no perturbations")
        if "t2v" in c.directions and not c.clean:
            raise GridError("query_shift.clean: t2v runs only the clean cell so far (no text perturbations yet): set "
                            "clean: true or drop t2v")
        if not c.datasets:
            raise GridError("query_shift.datasets: list at least one dataset")
        if not c.perturbations and not c.clean:
            raise GridError("query_shift: no cells: list perturbations or set clean: true")
        if c.perturbations and not c.severities:
            raise GridError("query_shift.severities: list at least one severity for the perturbations")

    def cells(self, grid) -> list[Cell]:
        c = self.config
        out = []
        for ds in c.datasets:
            for direction in c.directions:
                shifts = [(p, s) for p in c.perturbations for s in c.severities] if direction == "v2t" else []
                for pert, sev in ([(CLEAN, 0)] if c.clean else []) + shifts:
                    out.append(Cell(ds, direction, ds, pert, sev))
        return out

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[ResultTable]:
        ok = successful(df, self.name)
        out = []
        metrics = METRICS if metric is None else {metric: METRICS.get(metric, (metric, 2))}
        for metric, (title, digits) in metrics.items():
            for (ds, direction), part in ok.groupby(["dataset", "direction"], sort=False):
                clean = part[part["perturbation"] == CLEAN].set_index(["backbone", "row"])[metric]
                pert = part[part["perturbation"] != CLEAN]
                for sev in sorted(pert["severity"].unique()) or [0]:
                    cells = pert[pert["severity"] == sev]
                    if len(cells):
                        table = cells.pivot_table(index=["backbone", "row"], columns="perturbation", values=metric,
                                                  aggfunc="first")
                        cols = [p for p in order.perturbations.get(direction, []) if p in table.columns]
                        table = table[cols]
                        table["Avg"] = table[cols].mean(axis=1)
                    else:
                        table = pd.DataFrame(index=clean.index)
                    if len(clean):
                        table["Clean"] = clean.reindex(table.index) if len(table.index) else clean
                    out.append(ResultTable(f"qs_{metric}", f"{title}: {ds}, {direction}, severity {int(sev)}",
                                           ordered_rows(table, order), digits,
                                           {"dataset": ds, "direction": direction, "severity": int(sev)}))
        return out
