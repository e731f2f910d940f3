"""Query shift (QS): perturbed queries against a clean gallery, each dataset with its own fine-tuned checkpoint.

v2t queries are videos (the 12 MLVP video types x 5 severities); t2v queries are captions (the 15 text types, each
at its level's severities: by default character 7, word 2, sentence 1, the authors' example). Tables: the paper's
Table 1 layout per (dataset, direction, severity): rows backbone x method, columns the query perturbations in registry
order, their average, and the clean reference; for t2v at one severity per type, Table 3's single table with the
types grouped character / word / sentence and an average per level. Text types that cannot run with the grid's
assets have no cell; `notes` lists them with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from orchestrator.config.assets import unavailable_reason
from orchestrator.config.errors import GridError, check_names
from orchestrator.config.names import known_text_perturbations, known_video_perturbations
from orchestrator.config.scenarios import register_scenario
from orchestrator.config.scenarios.base import Cell, ResultTable, Scenario, TableOrder, ordered_rows, successful
from workloads.spec import CLEAN

METRICS = {"R1": ("R@1 (%)", 1), "hub_skewness": ("k-occurrence skewness", 2)}


@dataclass
class QueryShiftConfig:
    datasets: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=lambda: ["v2t"])
    perturbations: list[str] = field(default_factory=list)   # video perturbations: they shift v2t queries
    severities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    clean: bool = True                                          # add the unperturbed reference row
    text_perturbations: list[str] = field(default_factory=list)  # text perturbations: they shift t2v queries
    # level (character, word, sentence) -> severities; a level left out takes the authors' default
    text_severities: dict[str, list[int]] = field(default_factory=dict)

    def severities_of(self, level: str) -> list[int]:
        from workloads.perturbations.text import DEFAULT_SEVERITIES

        return self.text_severities.get(level, [DEFAULT_SEVERITIES[level]])


@register_scenario("query_shift", order=0)
class QueryShift(Scenario):
    section = "query_shift"
    Config = QueryShiftConfig
    prefix = "qs"
    title = "Query-shift tables"

    def check(self, grid) -> None:
        from workloads.perturbations.text import LEVELS, SEVERITIES

        c = self.config
        check_names("query_shift.datasets", c.datasets, list(grid.datasets), "dataset (declare it under datasets:)")
        check_names("query_shift.directions", c.directions, ["v2t", "t2v"], "direction")
        check_names("query_shift.perturbations", c.perturbations, known_video_perturbations(), "video perturbation")
        check_names("query_shift.severities", c.severities, [1, 2, 3, 4, 5], "severity")
        check_names("query_shift.text_perturbations", c.text_perturbations, known_text_perturbations(),
                    "text perturbation")
        check_names("query_shift.text_severities", list(c.text_severities), list(LEVELS), "text perturbation level")
        for level, sevs in c.text_severities.items():
            check_names(f"query_shift.text_severities.{level}", sevs, list(SEVERITIES[level]),
                        f"severity of {level}-level text perturbations")
            if not sevs:
                raise GridError(f"query_shift.text_severities.{level}: list at least one severity (or leave the "
                                "level out for its default)")
        if c.perturbations and "v2t" not in c.directions:
            raise GridError("query_shift.perturbations: video perturbations shift video queries (v2t): add v2t to "
                            "directions, or shift t2v queries with text_perturbations")
        if c.text_perturbations and "t2v" not in c.directions:
            raise GridError("query_shift.text_perturbations: text perturbations shift text queries (t2v): add t2v to "
                            "directions, or shift v2t queries with perturbations")
        if not c.datasets:
            raise GridError("query_shift.datasets: list at least one dataset")
        if not c.perturbations and not c.text_perturbations and not c.clean:
            raise GridError("query_shift: no cells: list perturbations or text_perturbations, or set clean: true")
        if c.perturbations and not c.severities:
            raise GridError("query_shift.severities: list at least one severity for the perturbations")

    def cells(self, grid) -> list[Cell]:
        c = self.config
        out = []
        for ds in c.datasets:
            for direction in c.directions:
                if direction == "v2t":
                    shifts = [(p, s) for p in c.perturbations for s in c.severities]
                else:
                    shifts = [(p, s) for p, level in self._text_types(grid, ds) for s in c.severities_of(level)]
                for pert, sev in ([(CLEAN, 0)] if c.clean else []) + shifts:
                    out.append(Cell(ds, direction, ds, pert, sev))
        return out

    def _text_types(self, grid, dataset: str) -> list[tuple[str, str]]:
        """(type, level) of the grid's text perturbations that can run on `dataset` with its assets."""
        from workloads.perturbations.text import TEXT_PERTURBATIONS

        return [(p, TEXT_PERTURBATIONS.static_info(p)["level"]) for p in self.config.text_perturbations
                if unavailable_reason(grid, dataset, p) is None]

    def notes(self, grid) -> list[str]:
        """The grid's text perturbations that cannot run here, per dataset, with why (they have no cells)."""

        c = self.config
        if "t2v" not in c.directions:
            return []
        out = []
        for ds in c.datasets:
            for p in c.text_perturbations:
                reason = unavailable_reason(grid, ds, p)
                if reason:
                    out.append(f"{ds} t2v {p}: unavailable, not run: {reason} [in the grid: assets.* or "
                               f"datasets.{ds}.assets.text_precomputed.{p}]")
        return out

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[ResultTable]:
        ok = successful(df, self.name)
        out = []
        metrics = METRICS if metric is None else {metric: METRICS.get(metric, (metric, 2))}
        for metric, (title, digits) in metrics.items():
            for (ds, direction), part in ok.groupby(["dataset", "direction"], sort=False):
                clean = part[part["perturbation"] == CLEAN].set_index(["backbone", "row"])[metric]
                pert = part[part["perturbation"] != CLEAN]
                # Table 3 averages each text level; Table 1 has one average over the video types
                levels = order.levels.get(direction, {}) if direction == "t2v" else {}
                one_each = len(pert) and pert.groupby("perturbation")["severity"].nunique().max() == 1
                if direction == "t2v" and one_each and pert["severity"].nunique() > 1:
                    # Table 3: each text type at its level's severity, in one table grouped by level
                    table = self._pivot(pert, metric, order.perturbations.get(direction, []), levels)
                    sevs = pert.groupby("perturbation")["severity"].first()
                    by_level = {}
                    for p, sev in sevs.items():
                        by_level.setdefault(levels.get(p, "?"), set()).add(int(sev))
                    what = ", ".join(f"{lv} {'/'.join(map(str, sorted(s)))}" for lv, s in by_level.items())
                    out.append(self._table(metric, f"{title}: {ds}, {direction}, severity {what}", table, clean,
                                           order, digits, {"dataset": ds, "direction": direction, "severity": 0}))
                    continue
                for sev in sorted(pert["severity"].unique()) or [0]:
                    cells = pert[pert["severity"] == sev]
                    if len(cells):
                        table = self._pivot(cells, metric, order.perturbations.get(direction, []), levels)
                    else:
                        table = pd.DataFrame(index=clean.index)
                    out.append(self._table(metric, f"{title}: {ds}, {direction}, severity {int(sev)}", table, clean,
                                           order, digits, {"dataset": ds, "direction": direction,
                                                           "severity": int(sev)}))
        return out

    @staticmethod
    def _pivot(cells: pd.DataFrame, metric: str, columns: list[str], levels: dict[str, str]) -> pd.DataFrame:
        """Columns in registry order, their average, and (when they span several levels) an average per level
        after each level's columns, as the paper's Table 3 groups character / word / sentence."""
        table = cells.pivot_table(index=["backbone", "row"], columns="perturbation", values=metric, aggfunc="first")
        cols = [p for p in columns if p in table.columns]
        used = list(dict.fromkeys(levels.get(p, "") for p in cols))
        if len(used) > 1:
            out = pd.DataFrame(index=table.index)
            for level in used:
                group = [p for p in cols if levels.get(p, "") == level]
                for p in group:
                    out[p] = table[p]
                out[f"Avg {level}"] = table[group].mean(axis=1)
            out["Avg"] = table[cols].mean(axis=1)
            return out
        table = table[cols]
        table["Avg"] = table[cols].mean(axis=1)
        return table

    @staticmethod
    def _table(metric, title, table, clean, order, digits, keys) -> ResultTable:
        if len(clean):
            table["Clean"] = clean.reindex(table.index) if len(table.index) else clean
        return ResultTable(f"qs_{metric}", title, ordered_rows(table, order), digits, keys)
