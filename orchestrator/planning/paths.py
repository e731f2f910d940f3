"""Where a submission reads and writes: the results folder (ledger, tables, report, MLflow store, logs) and the cache
(datasets, checkpoints, rendered clips, encoded galleries), possibly on shared storage."""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Paths:
    """Where a submission reads and writes. Everything generated lives under `results`."""

    results: Path
    cache: Path

    @classmethod
    def make(cls, results_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> "Paths":
        results = Path(results_dir).expanduser().resolve()
        cache = Path(cache_dir).expanduser().resolve() if cache_dir else results / "cache"
        return cls(results, cache)

    @property
    def ledger(self) -> Path:
        return self.results / "ledger"

    @property
    def datasets(self) -> Path:
        return self.cache / "datasets"

    @property
    def models(self) -> Path:
        return self.cache / "models"

    @property
    def render(self) -> Path:
        return self.cache / "render"

    @property
    def gallery(self) -> Path:
        return self.cache / "gallery"

    @property
    def store_templates(self) -> Path:
        """Empty MLflow stores, one per MLflow version, that new local stores start from
        (orchestrator/record/mlflow_store.py `Tracker`)."""
        return self.cache / "mlflow"

    def grid_dir(self, name: str) -> Path:
        return self.results / name

    def scores(self, name: str) -> Path:
        return self.results / name / "scores"


def check_writable(folder: Path) -> None:
    """A folder we write (results: ledger, tables, MLflow store; cache) must take files: one line, up front."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{uuid.uuid4().hex[:8]}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise OSError(f"directory {folder} is not writable ({err.strerror or err}); choose another with "
                      "--results-dir / --cache-dir") from None
