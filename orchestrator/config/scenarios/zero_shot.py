"""Zero-shot query-gallery shift (QGS): CLIP weights never fine-tuned for video retrieval are adapted directly on a
dataset's clean test split, in both directions ("zstta" in the authors' code). CLIP4Clip = mean pooling of CLIP frame
features; X-Pool = CLIP plus X-Pool's pooling initialised to the identity, as the authors do. Table layout (the
paper's Tables 5 and 31): rows backbone x method, columns dataset x direction x R@1/R@5/R@10."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from orchestrator.config.errors import GridError, check_names
from orchestrator.config.scenarios import register_scenario
from orchestrator.config.scenarios._qgs import qgs_tables
from orchestrator.config.scenarios.base import PRETRAINED, Cell, Scenario
from orchestrator.config.tables import Table, TableOrder


@dataclass
class ZeroShotConfig:
    datasets: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=lambda: ["v2t", "t2v"])


@register_scenario("zero_shot", order=2)
class ZeroShot(Scenario):
    section = "query_gallery_shift.zero_shot"
    Config = ZeroShotConfig
    prefix = "qgs_zero_shot"
    title = "Zero-shot query-gallery-shift tables"

    def check(self, grid) -> None:

        where = "query_gallery_shift.zero_shot"
        check_names(f"{where}.datasets", self.config.datasets, list(grid.datasets),
                    "dataset (declare it under datasets:)")
        check_names(f"{where}.directions", self.config.directions, ["v2t", "t2v"], "direction")
        if not self.config.datasets or not self.config.directions:
            raise GridError(f"{where}: list at least one dataset and one direction")
        if grid.models.pretrained is None and grid.models.zero_shot_pretrain is None:
            raise GridError(f"{where}: zero-shot cells adapt CLIP weights never fine-tuned for retrieval: set "
                            "models.pretrained to a local CLIP weights file (or models.zero_shot_pretrain to "
                            "pretrain the embedded default's tiny CLIP here)")

    def cells(self, grid) -> list[Cell]:
        return [Cell(ds, direction, PRETRAINED) for ds in self.config.datasets for direction in self.config.directions]

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[Table]:
        return qgs_tables(self.mine(df), "qgs_zero_shot", "Zero-shot QGS", "dataset", list(self.config.datasets),
                          list(self.config.directions), order)
