"""What the two query-gallery-shift scenarios share: clean queries and gallery of the target dataset, and tables in
the layout of the paper's Tables 4-5 (rows backbone x method, columns setting x direction x R@1/R@5/R@10), with a
hubness table beside each."""
from __future__ import annotations

import pandas as pd

from orchestrator.config.scenarios.base import ResultTable, TableOrder, ordered_rows, successful

RECALLS = {"R1": "R@1", "R5": "R@5", "R10": "R@10"}
HUBNESS = {"hub_skewness": "skewness", "hub_robin_hood": "Robin Hood", "hub_antihub_count": "antihubs"}


def wide_table(df: pd.DataFrame, scenario: str, setting: str, settings: list[str], directions: list[str],
               metrics: dict[str, str], order: TableOrder) -> pd.DataFrame:
    """Rows (backbone, method); one column per (setting, direction, metric) in the given orders, named
    "{setting}/{direction}/{metric label}". Cells that never ran (or failed) are missing, never zero."""
    ok = successful(df, scenario)
    columns = [(s, d, m) for s in settings for d in directions for m in metrics]
    frame = pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=["backbone", "row"]))
    if len(ok):
        long = ok.assign(setting=ok[setting]).set_index(["backbone", "row", "setting", "direction"])[list(metrics)]
        wide = long.unstack(["setting", "direction"])   # columns: (metric, setting, direction)
        frame = pd.DataFrame({f"{s}/{d}/{metrics[m]}": wide[(m, s, d)] if (m, s, d) in wide.columns else None
                              for s, d, m in columns}, index=wide.index)
    else:
        frame = pd.DataFrame(columns=[f"{s}/{d}/{metrics[m]}" for s, d, m in columns], index=frame.index)
    return ordered_rows(frame.astype(float), order)


def qgs_tables(df: pd.DataFrame, scenario: str, stem: str, title: str, setting: str, settings: list[str],
               directions: list[str], order: TableOrder) -> list[ResultTable]:
    return [ResultTable(stem, f"{title}: R@1/R@5/R@10 (%)",
                        wide_table(df, scenario, setting, settings, directions, RECALLS, order), 2),
            ResultTable(f"{stem}_hubness", f"{title}: hubness at k (skewness, Robin Hood index, antihub count)",
                        wide_table(df, scenario, setting, settings, directions, HUBNESS, order), 2)]
