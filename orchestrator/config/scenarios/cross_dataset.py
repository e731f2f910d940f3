"""Cross-dataset query-gallery shift (QGS): a model fine-tuned on dataset A is adapted and evaluated on dataset B's
clean test split (queries and gallery both from B), in both directions. The authors run it with severity 1 on clean
data ("transdata"); the paper's Tables 4 and 26-30 list six pairs, each both ways. Table layout: rows backbone x
method, columns A->B x direction x R@1/R@5/R@10."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations

import pandas as pd

from orchestrator.config.errors import GridError, check_names, short_repr
from orchestrator.config.scenarios import register_scenario
from orchestrator.config.scenarios._qgs import qgs_tables
from orchestrator.config.scenarios.base import Cell, Scenario
from orchestrator.config.tables import Table, TableOrder


@dataclass
class CrossDatasetConfig:
    pairs: list[list[str]] | str = field(default_factory=list)   # [[source, target], ...] or "all" (ordered pairs)
    directions: list[str] = field(default_factory=lambda: ["v2t", "t2v"])


def pair_label(source: str, target: str) -> str:
    return f"{source}->{target}"


@register_scenario("cross_dataset", order=1)
class CrossDataset(Scenario):
    section = "query_gallery_shift.cross_dataset"
    Config = CrossDatasetConfig
    prefix = "qgs_cross"
    title = "Cross-dataset query-gallery-shift tables"

    def pairs(self, grid) -> list[tuple[str, str]]:
        if self.config.pairs == "all":
            return list(permutations(grid.datasets, 2))
        return [(p[0], p[1]) for p in self.config.pairs]

    def check(self, grid) -> None:

        where = "query_gallery_shift.cross_dataset"
        check_names(f"{where}.directions", self.config.directions, ["v2t", "t2v"], "direction")
        if isinstance(self.config.pairs, str) and self.config.pairs != "all":
            raise GridError(f"{where}.pairs: expected a list of [source, target] pairs or 'all', got "
                            f"{short_repr(self.config.pairs)}")
        if self.config.pairs == "all" and len(grid.datasets) < 2:
            raise GridError(f"{where}.pairs: 'all' needs at least two datasets under datasets:")
        for i, pair in enumerate(self.config.pairs if self.config.pairs != "all" else []):
            if len(pair) != 2:
                raise GridError(f"{where}.pairs[{i}]: a pair is [source, target], got {short_repr(pair)}")
            check_names(f"{where}.pairs[{i}]", list(pair), list(grid.datasets), "dataset (declare it under "
                        "datasets:)")
        if not self.pairs(grid):
            raise GridError(f"{where}.pairs: list at least one [source, target] pair")
        if not self.config.directions:
            raise GridError(f"{where}.directions: list at least one direction")

    def cells(self, grid) -> list[Cell]:
        return [Cell(target, direction, source) for source, target in self.pairs(grid)
                for direction in self.config.directions]

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[Table]:
        df = self.mine(df)
        df = df.assign(pair=[pair_label(s, t) for s, t in zip(df["source_dataset"], df["dataset"])])
        settings = [pair_label(s, t) for s, t in self.pairs(grid)]
        return qgs_tables(df, "qgs_cross", "Cross-dataset QGS", "pair", settings,
                          list(self.config.directions), order)
