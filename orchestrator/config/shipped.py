"""Where a grid comes from: a YAML file, a grid shipped with the package (`quickstart`, `full_mlvp`, ...: the files of
the checkout's top-level grids/, installed as the package data of `orchestrator.grids`, so an installed wheel has them
too), or the name of a grid that has results under a results folder (the copy of its file kept beside them). And what
a grid may be named: its name is a folder of the results, so it must stay inside them and clear of the folders the
results keep for themselves."""
from __future__ import annotations

import importlib.resources
import re
from pathlib import Path

from orchestrator.config.errors import GridError

# folders and files of a results folder that are not a grid's (orchestrator/planning/paths.py)
RESERVED = ("ledger", "cache", "mlartifacts", "mlruns", "mlflow.db", "logs")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
MAX_NAME = 100   # a folder name (file systems allow 255 bytes) and MLflow's experiment mlvp/<name>


def shipped_folder() -> Path:
    """The folder of the shipped grids: grids/ beside this package in a checkout (pyproject.toml's package-dir maps it
    to `orchestrator.grids` when installed), else the installed package `orchestrator.grids`. The checkout comes
    first, so that code run from a checkout reads that checkout's grids, not those of another installed copy."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "grids").is_dir():
        return root / "grids"
    return Path(str(importlib.resources.files("orchestrator.grids")))


def grid_name_problem(name: str) -> str | None:
    """Why `name` cannot name a grid (None: it can): it is a folder under the results folder, so letters, digits,
    '_', '-' and '.', not only dots, at most MAX_NAME of them, and none of the results folder's own names."""
    if not name or not _NAME.fullmatch(name):
        return "use letters, digits, '_', '-' and '.' only (it names a folder under the results folder)"
    if len(name) > MAX_NAME:
        return f"at most {MAX_NAME} characters (it names a folder under the results folder), got {len(name):,}"
    if set(name) == {"."}:
        return "a name of dots only would point outside the results folder"
    if name.lower() in RESERVED:
        return f"{name!r} is a folder the results folder keeps for itself ({', '.join(RESERVED)})"
    return None


def shipped_grids() -> dict[str, Path]:
    """name -> file of every grid shipped with the package."""
    return {p.stem: p for p in sorted(shipped_folder().glob("*.yaml"))}


def describe(path: Path) -> str:
    """A shipped grid's first comment line (what it is), for `mlvp grids`."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""


def resolve_grid(arg: str, results_dir: str | Path | None = None) -> str:
    """The grid file `arg` names: a YAML file, else a shipped grid's name, else (with `results_dir`) the name of a
    grid with results there (its original file when it is still there, else the copy kept beside its results).
    A GridError in one line otherwise, listing the shipped names."""
    path = Path(arg).expanduser()
    if path.is_dir():
        raise GridError(f"{arg}: is a folder, not a grid file; give a grid's YAML file or the name of a shipped grid "
                        f"({', '.join(shipped_grids())})")
    if path.is_file():
        return str(path)
    shipped = shipped_grids()
    if arg in shipped:
        return str(shipped[arg])
    if results_dir is not None and grid_name_problem(arg) is None:
        grid_dir = Path(results_dir) / arg
        source = grid_dir / "grid_source.txt"
        if source.is_file():
            original = Path(source.read_text().strip())
            if original.is_file():
                return str(original)
        if (grid_dir / "grid.yaml").is_file():
            return str(grid_dir / "grid.yaml")
    looks_like_file = arg.endswith((".yaml", ".yml")) or "/" in arg
    if looks_like_file and path.stem in shipped and path.suffix in (".yaml", ".yml"):
        raise GridError(f"{arg}: grid file not found; {path.stem!r} is a grid shipped with mlvp: give its name "
                        f"(`mlvp submit {path.stem}`) or its file, {_shown(shipped[path.stem])}")
    what = "grid file not found" if looks_like_file else "no such grid"
    where = f", nor a grid with results under {results_dir}" if results_dir is not None and not looks_like_file else ""
    raise GridError(f"{arg}: {what}{where}; shipped grids: {', '.join(shipped)} (`mlvp grids` lists them)")


def _shown(path: Path) -> str:
    """`path` as the user can type it from here: relative to the working folder when under it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
