"""Mixed query shift (the paper's appendix D.2): queries of one stream perturbed differently from one another.

- `severity_mix` (Table 17): for each listed type, every query corrupted by that type at a severity drawn per query
  from `severities` (1-5 by default). One cell per type; table columns the types, then their average.
- `type_mix` (Table 18): for each fraction, that share of the queries corrupted, each by a type and a severity drawn
  from the lists (every registered type and 1-5 by default), the rest clean. One cell per fraction; columns the
  fractions, then their average.
Each dataset with its own checkpoint, as query shift; the draws are in the trial key (workloads/mixing.py).

The paper mixes video perturbations (v2t). t2v mixes draw from `text_perturbations` / `text_severities` instead: the
character- and word-level text types ("all": those that can run here), severities 1-7; the sentence-level types have
one severity and no place in a severity mix, so t2v mixes leave them out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from orchestrator.config.assets import unavailable_reason
from orchestrator.config.errors import GridError, check_names, short_repr
from orchestrator.config.names import known_video_perturbations
from orchestrator.config.scenarios import register_scenario
from orchestrator.config.scenarios.base import Cell, Scenario
from orchestrator.config.tables import Table, TableOrder, combine, groups, mean_of
from workloads.mixing import Mix
from workloads.perturbations.text import TEXT_PERTURBATIONS

TEXT_SEVERITIES = [1, 2, 3, 4, 5, 6, 7]
MIXABLE_TEXT_LEVELS = ("character", "word")


@dataclass
class SeverityMixConfig:
    perturbations: list[str] | str = "all"           # types, or "all" registered video types (v2t)
    severities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    text_perturbations: list[str] | str = "all"      # t2v: character- and word-level text types, or "all"
    text_severities: list[int] = field(default_factory=lambda: list(TEXT_SEVERITIES))


@dataclass
class TypeMixConfig:
    fractions: list[float] = field(default_factory=lambda: [0.2, 0.4, 0.6, 0.8])
    perturbations: list[str] | str = "all"
    severities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    text_perturbations: list[str] | str = "all"
    text_severities: list[int] = field(default_factory=lambda: list(TEXT_SEVERITIES))


@dataclass
class MixedShiftConfig:
    datasets: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=lambda: ["v2t"])
    severity_mix: SeverityMixConfig | None = None
    type_mix: TypeMixConfig | None = None


MIXED = "mixed"   # the perturbation column of a type-mix cell


@register_scenario("mixed_shift", order=3)
class MixedShift(Scenario):
    section = "mixed_shift"
    Config = MixedShiftConfig
    prefix = "mixed"
    title = "Mixed query-shift tables"

    def _types(self, chosen) -> list[str]:

        return known_video_perturbations() if chosen == "all" else list(chosen)

    @staticmethod
    def _mixable_text() -> list[str]:
        return [n for n in TEXT_PERTURBATIONS.names()
                if TEXT_PERTURBATIONS.static_info(n)["level"] in MIXABLE_TEXT_LEVELS]

    def _pool(self, grid, part, direction: str, dataset: str) -> tuple[list[str], list[int]]:
        """(types, severities) a query of this direction draws from: video types for v2t; for t2v the text types
        that can run on `dataset` with the grid's assets (the others are plan notes)."""
        if direction == "v2t":
            return self._types(part.perturbations), list(part.severities)

        chosen = self._mixable_text() if part.text_perturbations == "all" else list(part.text_perturbations)
        return [p for p in chosen if unavailable_reason(grid, dataset, p) is None], list(part.text_severities)

    def notes(self, grid) -> list[str]:

        c, out = self.config, []
        if "t2v" not in c.directions:
            return out
        for ds in c.datasets:
            for name, part in (("severity_mix", c.severity_mix), ("type_mix", c.type_mix)):
                if part is None:
                    continue
                chosen = self._mixable_text() if part.text_perturbations == "all" else part.text_perturbations
                for p in chosen:
                    reason = unavailable_reason(grid, ds, p)
                    if reason:
                        out.append(f"{ds} t2v mixed_shift.{name}: {p} left out of the mix: {reason}")
        return out

    def check(self, grid) -> None:

        c, where = self.config, "mixed_shift"
        check_names(f"{where}.datasets", c.datasets, list(grid.datasets), "dataset (declare it under datasets:)")
        check_names(f"{where}.directions", c.directions, ["v2t", "t2v"], "direction")
        if not c.datasets:
            raise GridError(f"{where}.datasets: list at least one dataset")
        if c.severity_mix is None and c.type_mix is None:
            raise GridError(f"{where}: give severity_mix (Table 17), type_mix (Table 18) or both")
        for name, part in (("severity_mix", c.severity_mix), ("type_mix", c.type_mix)):
            if part is None:
                continue
            if isinstance(part.perturbations, str) and part.perturbations != "all":
                raise GridError(f"{where}.{name}.perturbations: a list of video perturbations or 'all', got "
                                f"{short_repr(part.perturbations)}")
            if part.perturbations != "all":
                check_names(f"{where}.{name}.perturbations", part.perturbations, known_video_perturbations(),
                            "video perturbation")
            check_names(f"{where}.{name}.severities", part.severities, [1, 2, 3, 4, 5], "severity")
            if not part.severities or not self._types(part.perturbations):
                raise GridError(f"{where}.{name}: list at least one perturbation and one severity")
            if isinstance(part.text_perturbations, str) and part.text_perturbations != "all":
                raise GridError(f"{where}.{name}.text_perturbations: a list of character- or word-level text "
                                f"perturbations or 'all', got {short_repr(part.text_perturbations)}")
            if part.text_perturbations != "all":
                check_names(f"{where}.{name}.text_perturbations", part.text_perturbations, self._mixable_text(),
                            "character- or word-level text perturbation (sentence-level types have one severity)")
            check_names(f"{where}.{name}.text_severities", part.text_severities, TEXT_SEVERITIES,
                        "text severity")
            if "t2v" in c.directions and (not part.text_severities or not part.text_perturbations):
                raise GridError(f"{where}.{name}: list at least one text perturbation and one text severity for t2v")
        if c.type_mix is not None:
            for i, f in enumerate(c.type_mix.fractions):
                if not 0.0 < f <= 1.0:
                    raise GridError(f"{where}.type_mix.fractions[{i}]: a share of the queries in (0, 1], got {f}")
            if not c.type_mix.fractions:
                raise GridError(f"{where}.type_mix.fractions: list at least one fraction")

    def cells(self, grid) -> list[Cell]:
        c, out = self.config, []
        for ds in c.datasets:
            for direction in c.directions:
                if c.severity_mix is not None:
                    types, severities = self._pool(grid, c.severity_mix, direction, ds)
                    for p in types:
                        out.append(Cell(ds, direction, ds, p, 0, Mix((p,), tuple(severities)).to_json()))
                if c.type_mix is not None:
                    types, severities = self._pool(grid, c.type_mix, direction, ds)
                    if not types:
                        continue
                    for f in c.type_mix.fractions:
                        out.append(Cell(ds, direction, ds, MIXED, 0, Mix(tuple(types), tuple(severities),
                                                                         float(f)).to_json()))
        return out

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[Table]:
        """Per (dataset, direction): Table 17 (each type at mixed severities, and their average) and Table 18 (the
        share of queries corrupted by random types, and the average over the shares)."""
        metric = metric or "R1"
        mine = self.mine(df)
        out = []
        for (ds, direction), part in mine.groupby(["dataset", "direction"], sort=False):
            by_type = part[part["perturbation"] != MIXED]
            if len(by_type):
                present = set(by_type["perturbation"])
                cols = [("", p) for p in order.perturbations.get(direction, []) if p in present]
                out.append(self._table(by_type, "perturbation", cols, "mixed_severities",
                                       f"{metric}: {ds}, {direction}, mixed severities per type", metric, order,
                                       {"dataset": ds, "direction": direction}))
            by_fraction = part[part["perturbation"] == MIXED]
            if len(by_fraction):
                by_fraction = by_fraction.assign(fraction=[f"{round(100 * Mix.from_json(m).fraction)}%"
                                                           for m in by_fraction["mix"]])
                cols = [("", f) for f in sorted(set(by_fraction["fraction"]), key=lambda c: int(c[:-1]))]
                out.append(self._table(by_fraction, "fraction", cols, "mixed_types", f"{metric}: {ds}, {direction}, "
                                       "share of queries corrupted by random types", metric, order,
                                       {"dataset": ds, "direction": direction}))
        return out

    @staticmethod
    def _table(part: pd.DataFrame, by: str, cols: list, name: str, title: str, metric: str, order: TableOrder,
               keys: dict) -> Table:
        idx = groups(part, ["backbone_label", "row", by])
        rows = order.rows(part)
        cells = {}
        for r in rows:
            for col in cols:
                cells[(r, col)] = combine(idx.get((*r, col[1]), []), metric)
            cells[(r, ("", "Avg"))] = mean_of([cells[(r, c)] for c in cols])
        return Table(name, title, rows, cols + [("", "Avg")], cells, keys, 1)
