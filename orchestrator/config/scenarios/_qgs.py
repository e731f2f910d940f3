"""What the two query-gallery-shift scenarios share: clean queries and gallery of the target dataset, and tables in
the layout of the paper's Tables 4-5 (rows backbone x method, columns setting x direction x R@1/R@5/R@10), with a
hubness table beside each. A cell is its trial's value, or missing / failed (orchestrator/config/tables.py)."""
from __future__ import annotations

import pandas as pd

from orchestrator.config.tables import Table, TableOrder, combine, groups

RECALLS = {"R1": "R@1", "R5": "R@5", "R10": "R@10"}
HUBNESS = {"hub_skewness": "skewness", "hub_robin_hood": "Robin Hood", "hub_antihub_count": "antihubs"}


def wide_table(df: pd.DataFrame, name: str, title: str, setting: str, settings: list[str], directions: list[str],
               metrics: dict[str, str], order: TableOrder, higher_better: bool) -> Table:
    """Rows (backbone, method); one column per (setting, direction, metric) in the given orders, named
    "{setting}/{direction}/{metric label}" and grouped by "{setting}/{direction}"."""
    idx = groups(df, ["backbone_label", "row", setting, "direction"])
    cols = [(f"{s}/{d}", f"{s}/{d}/{label}") for s in settings for d in directions for label in metrics.values()]
    by_label = {label: m for m, label in metrics.items()}
    rows = order.rows(df)
    cells = {}
    for r in rows:
        for group, col in cols:
            s, d, label = col.split("/")
            cells[(r, (group, col))] = combine(idx.get((*r, s, d), []), by_label[label])
    return Table(name, title, rows, cols, cells, {}, 2, higher_better)


def qgs_tables(df: pd.DataFrame, stem: str, title: str, setting: str, settings: list[str], directions: list[str],
               order: TableOrder) -> list[Table]:
    return [wide_table(df, stem, f"{title}: R@1/R@5/R@10 (%)", setting, settings, directions, RECALLS, order, True),
            wide_table(df, f"{stem}_hubness", f"{title}: hubness at k (skewness, Robin Hood index, antihub count)",
                       setting, settings, directions, HUBNESS, order, False)]
