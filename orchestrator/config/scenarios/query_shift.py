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
from typing import Any

import pandas as pd

from orchestrator.config.assets import unavailable_reason
from orchestrator.config.errors import GridError, check_names
from orchestrator.config.names import known_text_perturbations, known_video_perturbations
from orchestrator.config.scenarios import register_scenario
from orchestrator.config.scenarios.base import Cell, Scenario
from orchestrator.config.tables import LEVEL_ORDER, Table, TableOrder, combine, groups, mean_of, records
from workloads.perturbations.text import DEFAULT_SEVERITIES, LEVELS, SEVERITIES, TEXT_PERTURBATIONS
from workloads.spec import CLEAN

# the metrics of its tables by default: trials-table column -> (title, digits)
METRICS = {"R1": ("R@1 (%)", 1), "hub_skewness": ("k-occurrence skewness", 2)}
# Table 13's hubness measures: (trials-table column, title); lower is less hubness
HUBNESS = [("hub_skewness", "skewness"), ("hub_robin_hood", "Robin Hood"), ("hub_antihub_occurrence", "antihubs")]


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
    # stream protocols (docs/protocols.md): names or mappings (orchestrator/config/schema.py ProtocolSpec); each
    # multiplies the trials; empty: the default alone (reset_each_shift, the paper's)
    protocols: list[Any] = field(default_factory=list)

    def protocol_specs(self) -> list:
        """The `protocols` entries, checked (orchestrator/config/schema.py protocol_entry); [] = the default. Parsed
        once (the plan asks for every trial)."""
        from orchestrator.config.schema import protocol_entry

        key = repr(self.protocols)
        if self.__dict__.get("_parsed", (None,))[0] != key:
            self.__dict__["_parsed"] = (key, [protocol_entry(v, f"query_shift.protocols[{i}]")
                                              for i, v in enumerate(self.protocols)])
        return self.__dict__["_parsed"][1]

    def severities_of(self, level: str) -> list[int]:
        return self.text_severities.get(level, [DEFAULT_SEVERITIES[level]])


@register_scenario("query_shift", order=0)
class QueryShift(Scenario):
    section = "query_shift"
    Config = QueryShiftConfig
    prefix = "qs"
    title = "Query-shift tables"

    def check(self, grid) -> None:
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
        self._check_protocols(grid)

    def _check_protocols(self, grid) -> None:
        """Each protocol entry checked; its segments name video perturbations at severities 1-5; a batch size under
        the smallest a method's batch statistic needs is refused, naming both."""
        from workloads.methods import METHODS
        from workloads.protocols import PROTOCOLS, check_batch_size
        from workloads.options import OptionError

        specs = self.config.protocol_specs()
        seen = [repr((s.name, s.batch_size, s.segments, sorted(s.options.items()))) for s in specs]
        for i, s in enumerate(specs):
            where = f"query_shift.protocols[{i}]"
            if seen.index(seen[i]) != i:
                raise GridError(f"{where}: the same protocol entry twice")
            for j, (pert, sev) in enumerate(s.segments or []):
                check_names(f"{where}.segments[{j}]", [pert], known_video_perturbations(), "video perturbation")
                check_names(f"{where}.segments[{j}]", [sev], [1, 2, 3, 4, 5], "severity")
            if PROTOCOLS.lookup(s.name).multi_segment and s.segments is None and not self.config.perturbations:
                raise GridError(f"{where}: protocol {s.name!r} streams the grid's video perturbations: list some "
                                "under query_shift.perturbations, or give segments")
            batch = s.batch_size or grid.runtime.batch_size
            for entry in grid.methods:
                method = grid.variants[entry].method if entry in grid.variants else entry
                try:
                    check_batch_size(METHODS.lookup(method), batch)
                except OptionError as err:
                    raise GridError(f"{where}.batch_size: {err}") from None

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

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[Table]:
        """Per (dataset, direction), in the paper's Table 1 layout: the mean over the grid's severities first (the
        headline), then one table per severity (Tables 32-35); for t2v with one severity per type, Table 3's single
        table. Columns: the types grouped by level, an average per level when there are several, Avg, Clean. With
        no `metric`: R@1 and k-occurrence skewness, then Table 13's hubness measures clean vs shifted."""
        mine = self.mine(df)
        plain = mine[mine["mix"].fillna("") == ""] if len(mine) and "mix" in mine else mine
        if len(plain) and "protocol" in plain:   # the paper's protocol at the grid's batch size (docs/protocols.md)
            plain = plain[(plain["protocol"].fillna("") == "") & (plain["batch_size"] == grid.runtime.batch_size)]
        metrics = list(METRICS) if metric is None else [metric]
        recs = records(plain)   # once: every metric's tables and Table 13 read the same rows
        idx = groups(recs, ["dataset", "direction", "backbone_label", "row", "perturbation", "severity"])
        out = [t for m in metrics for t in self._metric_tables(plain, order, m, idx)]
        # the headline tables first: the means over severities, then the tables of one severity
        out.sort(key=lambda t: 0 if t.name.endswith("_mean") or t.keys.get("severity") == 0 else 1)
        if metric is None:
            out += self._hubness_tables(plain, order, recs)
            out += self._diagnostics_tables(plain, order, recs)
        return out

    def _metric_tables(self, df: pd.DataFrame, order: TableOrder, metric: str,
                       idx: dict[tuple, list[dict[str, Any]]]) -> list[Table]:
        """`idx`: the rows of `df` grouped by (dataset, direction, backbone, row, perturbation, severity)."""
        label, digits = METRICS.get(metric, (metric, 2))
        higher = metric not in ("MdR", "MnR") and not metric.startswith("hub_")
        out = []
        for (ds, direction), part in df.groupby(["dataset", "direction"], sort=False):
            levels = order.levels.get(direction, {})
            present = set(part["perturbation"])
            types = [p for p in order.perturbations.get(direction, []) if p in present]
            types.sort(key=lambda p: LEVEL_ORDER.index(levels[p]) if levels.get(p) in LEVEL_ORDER else 99)
            sevs = {p: sorted(int(s) for s in part.loc[part["perturbation"] == p, "severity"].unique()) for p in types}
            rows = order.rows(part)
            has_clean = CLEAN in present
            used_levels = list(dict.fromkeys(levels.get(p, "") for p in types))

            def build(name: str, title: str, severity: int | None, keys: dict[str, Any]) -> Table:
                shown = [p for p in types if severity is None or severity in sevs[p]]
                cols: list[tuple[str, str]] = []
                for level in used_levels:
                    group = [(level, p) for p in shown if levels.get(p, "") == level]
                    cols += group
                    if len(used_levels) > 1 and group:
                        cols.append((level, f"Avg {level}"))
                cells = {}
                for r in rows:
                    for col in cols:
                        if col[1].startswith("Avg "):
                            continue
                        chosen = sevs[col[1]] if severity is None else [severity]
                        cells[(r, col)] = combine([t for s in chosen for t in idx.get((ds, direction, *r, col[1], s),
                                                                                      [])], metric)
                    for col in cols:
                        if col[1].startswith("Avg "):
                            cells[(r, col)] = mean_of([cells[(r, c)] for c in cols
                                                       if c[0] == col[0] and not c[1].startswith("Avg ")])
                    cells[(r, ("", "Avg"))] = mean_of([cells[(r, c)] for c in cols if not c[1].startswith("Avg ")])
                    if has_clean:
                        cells[(r, ("", "Clean"))] = combine(idx.get((ds, direction, *r, CLEAN, 0), []), metric)
                extra = ([("", "Avg")] if shown else []) + ([("", "Clean")] if has_clean else [])
                return Table(name, title, rows, cols + extra, cells, keys, digits, higher)

            all_sevs = sorted({s for v in sevs.values() for s in v})
            one_each = bool(types) and all(len(v) == 1 for v in sevs.values())
            if one_each and len(all_sevs) > 1:
                # each type at its level's one severity (t2v, Table 3): one table, the severities named per level
                by_level: dict[str, set[int]] = {}
                for p in types:
                    by_level.setdefault(levels.get(p, ""), set()).update(sevs[p])
                what = ", ".join(f"{lv} {'/'.join(map(str, sorted(v)))}" for lv, v in by_level.items())
                out.append(build(f"qs_{metric}", f"{label}: {ds}, {direction}, severity {what}", None,
                                 {"dataset": ds, "direction": direction, "severity": 0}))
                continue
            if len(all_sevs) > 1:
                out.append(build(f"qs_{metric}_mean", f"{label}: {ds}, {direction}, mean over severity "
                                 + "/".join(map(str, all_sevs)), None,
                                 {"dataset": ds, "direction": direction, "severity": "mean"}))
            for sev in all_sevs or [0]:
                what = f"severity {sev}" if types else "clean"
                out.append(build(f"qs_{metric}", f"{label}: {ds}, {direction}, {what}", sev if types else None,
                                 {"dataset": ds, "direction": direction, "severity": int(sev)}))
        return out

    @staticmethod
    def _hubness_tables(df: pd.DataFrame, order: TableOrder, all_recs: list[dict[str, Any]]) -> list[Table]:
        """Table 13: per (dataset, direction), each hubness measure on clean queries and on the shifted ones (the
        mean over every perturbed cell of the row). `all_recs`: the rows of `df` (`records`)."""
        out = []
        by_part = groups(all_recs, ["dataset", "direction"])
        for (ds, direction), part in df.groupby(["dataset", "direction"], sort=False):
            rows = order.rows(part)
            recs = by_part[(ds, direction)]
            shifts = [s for s, has in (("Clean", (part["perturbation"] == CLEAN).any()),
                                       ("Shifted", (part["perturbation"] != CLEAN).any())) if has]
            cols = [(title, s) for _, title in HUBNESS for s in shifts]
            cells = {}
            for r in rows:
                row_recs = [t for t in recs if (t["backbone_label"], t["row"]) == r]
                for metric, title in HUBNESS:
                    for s in shifts:
                        cells[(r, (title, s))] = combine([t for t in row_recs
                                                          if (t["perturbation"] == CLEAN) == (s == "Clean")], metric)
            k = int(part["hub_k"].dropna().iloc[0]) if part["hub_k"].notna().any() else 10
            out.append(Table("hubness", f"Hubness at k={k} (Table 13): {ds}, {direction} (lower: less hubness)",
                             rows, cols, cells, {"dataset": ds, "direction": direction}, 3, False))
        return out

    @staticmethod
    def _diagnostics_tables(df: pd.DataFrame, order: TableOrder, recs: list[dict[str, Any]]) -> list[Table]:
        """TCR's Table 12 per dataset: the uniformity of the query embeddings (higher: more spread) and their modality
        gap to the gallery (lower: closer; workloads/metrics.py), with R@1, per direction: for the clean queries and
        the shifted ones before adaptation (reference rows; their R@1 is Source's), then after each method adapted;
        means over the shifted cells. Only where trials report them. `recs`: the rows of `df` (`records`)."""
        if not len(df) or "uniformity_adapted" not in df:
            return []
        measures = {"uniformity": ("uniformity_{}", True), "modality gap": ("modality_gap_{}", False),
                    "R@1": ("R1", True)}
        out = []
        by_dataset = groups(recs, ["dataset"])
        for ds, part in df.groupby("dataset", sort=False):
            directions = [d for d in ("v2t", "t2v") if (part["direction"] == d).any()]
            cols = [(name, d) for name in measures for d in directions]
            rows, cells = [], {}
            for b in order.backbones:
                mine = [t for t in by_dataset[(ds,)] if t["backbone_label"] == b]
                if not mine:
                    continue
                shifted = [t for t in mine if t["perturbation"] != CLEAN]
                refs = [((b, "clean queries"), [t for t in mine if t["perturbation"] == CLEAN], "clean"),
                        ((b, "shifted, before adaptation"), shifted, "shifted")]
                adapted = [(r, [t for t in shifted if t["row"] == r[1]], "adapted")
                           for r in order.rows(part) if r[0] == b]
                for row, trials, stage in refs + adapted:
                    rows.append(row)
                    for name, d in cols:
                        group = [t for t in trials if t["direction"] == d]
                        if name == "R@1" and stage != "adapted":   # a reference row's R@1: Source's, where it ran
                            group = [t for t in group if t["row"] == "source"] or group
                        cells[(row, (name, d))] = combine(group, measures[name][0].format(stage))
            out.append(Table("diagnostics", f"Uniformity and modality gap (TCR's Table 12): {ds}, mean over the "
                             "shifted cells", rows, cols, cells, {"dataset": ds}, 3,
                             {name: higher for name, (_, higher) in measures.items()}))
        return out
