"""Where a grid comes from: a YAML file, a grid shipped with the package (`quickstart`, `full_mlvp`, ...), or the
name of a grid that has results (its copy kept beside them)."""
from __future__ import annotations

from pathlib import Path


def resolve_grid(arg: str, results_dir: str | Path) -> str:
    """A grid file, or the name of a grid whose results exist under results_dir: its original file when it is
    still there, else the copy kept beside its results."""
    if Path(arg).is_file():
        return arg
    grid_dir = Path(results_dir) / arg
    source = grid_dir / "grid_source.txt"
    if source.is_file():
        original = Path(source.read_text().strip())
        if original.is_file():
            return str(original)
    if (grid_dir / "grid.yaml").is_file():
        return str(grid_dir / "grid.yaml")
    raise ValueError(f"report: {arg!r} is neither a grid file nor a grid with results under {results_dir} "
                     f"(no {grid_dir / 'grid.yaml'}); give the grid's YAML file, e.g. grids/quickstart.yaml")


