"""What a scenario is: the cells it evaluates, the models and data they need, and the tables it produces.

A scenario reads its own section of the grid (a dataclass `Config`, validated like every other key) and answers:
- `cells(grid)`: the settings it evaluates before the backbone x method product — target dataset, direction, the
  dataset whose fine-tuned checkpoint the model is (or `PRETRAINED` for the zero-shot CLIP), query perturbation and
  severity. The plan turns cells into trials, checkpoints and renders without knowing the scenario;
- `check(grid)`: cross-section rules (a dataset declared, a checkpoint obtainable), as one-line GridErrors;
- `tables(grid, df, order)`: its result tables from the trials table (one row per trial).
docs/architecture.md shows how a cell becomes trials, renders and gallery encodings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

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


@dataclass
class TableOrder:
    """Row and column orders every table follows: the grid's backbones and method rows, the registries' types."""
    backbones: list[str]
    methods: list[str]
    perturbations: dict[str, list[str]] = field(default_factory=dict)   # direction -> query perturbation order
    levels: dict[str, dict[str, str]] = field(default_factory=dict)     # direction -> perturbation -> level


@dataclass
class ResultTable:
    """One table of results: `frame` has a (backbone, method) row index; `name` is its file stem."""
    name: str
    title: str
    frame: pd.DataFrame
    digits: int = 1
    keys: dict[str, Any] = field(default_factory=dict)   # what it is a table of (dataset, direction, severity, ...)


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

    def tables(self, grid, df: pd.DataFrame, order: TableOrder, metric: str | None = None) -> list[ResultTable]:
        """Its tables; `metric` (a trials-table column) asks for that metric where the layout has a choice."""
        return []


def ordered_rows(frame: pd.DataFrame, order: TableOrder) -> pd.DataFrame:
    """Rows in the grid's (backbone, method) order; the index named as the paper's tables name it."""
    rows = [(b, m) for b in order.backbones for m in order.methods if (b, m) in frame.index]
    frame = frame.reindex(rows)
    frame.index.names = ["backbone", "method"]
    return frame


def successful(df: pd.DataFrame, scenario: str) -> pd.DataFrame:
    return df[(df["status"] == "ok") & (df["scenario"] == scenario)]
