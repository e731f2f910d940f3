"""What a scenario is: the cells it evaluates, the models and data they need, and the tables it produces.

A scenario reads its own section of the grid (a dataclass `Config`, validated like every other key) and answers:
- `cells(grid)`: the settings it evaluates before the backbone x method product — target dataset, direction, the
  dataset whose fine-tuned checkpoint the model is (or `PRETRAINED` for the zero-shot CLIP), query perturbation and
  severity. The plan turns cells into trials, checkpoints and renders without knowing the scenario;
- `check(grid)`: cross-section rules (a dataset declared, a checkpoint obtainable), as one-line GridErrors;
- `tables(grid, df, order)`: its result tables (orchestrator/config/tables.py) from the planned trials (one row per
  trial the grid asks for, with its status: ok / failed / missing), so a cell that did not run says so.
docs/architecture.md shows how a cell becomes trials, renders and gallery encodings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from orchestrator.config.tables import Table, TableOrder
from workloads.spec import CLEAN

PRETRAINED = "pretrained"   # the source of zero-shot cells: CLIP weights never fine-tuned for video retrieval


@dataclass(frozen=True)
class Cell:
    dataset: str                 # target: queries and gallery both come from its test split
    direction: str               # "v2t" | "t2v"
    source: str                  # dataset the checkpoint was fine-tuned on, or PRETRAINED
    perturbation: str = CLEAN    # a perturbation of the query modality (video for v2t, text for t2v)
    severity: int = 0
    mix: str = ""                # a mixed shift: each query draws its own cell (workloads/mixing.py)


class Scenario:
    name: ClassVar[str] = ""
    section: ClassVar[str] = ""          # its grid key; "parent.child" for sections grouped under one key
    Config: ClassVar[type]
    prefix: ClassVar[str] = ""           # file stem of its Markdown tables ({prefix}_tables.md)
    title: ClassVar[str] = ""            # heading of that file

    def __init__(self, config):
        self.config = config

    def check(self, grid) -> None:
        """Raise GridError (one line, naming the key) when the section asks for something the grid lacks."""

    def cells(self, grid) -> list[Cell]:
        raise NotImplementedError

    def notes(self, grid) -> list[str]:
        """One line per thing the section asks for that will not run here, with why (the plan prints them)."""
        return []

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[Table]:
        """Its tables, built from `df` (the planned trials of the grid, every scenario's: keep your own); `metric`
        (a trials-table column) asks for that metric where the layout has a choice."""
        return []

    def mine(self, df: pd.DataFrame) -> pd.DataFrame:
        """The planned trials of this scenario."""
        return df[df["scenario"] == self.name] if len(df) else df
