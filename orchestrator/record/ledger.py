"""The trial ledger: one JSON file per trial key, the source of truth for what has run.

Ray Tune's own restore can only finish the exact interrupted job; it cannot add cells to a grid or skip cells another
grid already ran. The ledger can: a re-submitted (or edited) grid runs only keys that have no successful entry. Only
the driver writes it (one writer, atomic renames), so it needs no locking; a crash loses at most the trial in flight.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from workloads.atomic import atomic_write_text

PER_QUERY = ("k_occurrence", "batch_R1")   # per-query lists of an entry (workloads/spec.py TrialResult)


class TrialLedger:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(key).read_text())
        except FileNotFoundError:
            return None
        except json.JSONDecodeError:
            return None  # a torn file cannot happen with atomic writes, but never let one block a grid

    def put(self, result: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Record a trial result (a TrialResult dict). Earlier attempts are kept in `attempts`."""
        key = result["key"]
        old = self.get(key) or {}
        attempts = old.get("attempts", [])
        attempts.append({"time": time.time(), "status": result["status"], "error": result.get("error"),
                         "submission": extra.get("submission")})
        entry = {**result, **extra, "attempts": attempts[-20:], "recorded_at": time.time()}
        if old.get("mlflow_runs"):  # runs of the earlier attempt stay listed (they are that attempt's record)
            entry["previous_mlflow_runs"] = old["mlflow_runs"]
        self._write(key, entry)
        return entry

    def record_run(self, key: str, store: str, run_id: str, entry: dict[str, Any] | None = None) -> None:
        """Note that trial `key` has MLflow run `run_id` in tracking store `store`. `entry`: the entry as `put` wrote it
        and returned it (the driver's live path), which saves reading it back; without it, it is read."""
        entry = entry if entry is not None else self.get(key)
        if entry is None:
            raise KeyError(f"no ledger entry for trial {key}")
        self._write(key, {**entry, "mlflow_runs": {**(entry.get("mlflow_runs") or {}), store: run_id}})

    def update(self, key: str, **fields: Any) -> None:
        entry = self.get(key)
        if entry is None:
            raise KeyError(f"no ledger entry for trial {key}")
        entry.update(fields)
        self._write(key, entry)

    def _write(self, key: str, entry: dict[str, Any]) -> None:
        atomic_write_text(self.path(key), json.dumps(entry, default=str))

    def status(self, key: str) -> str:
        """"ok", "failed" or "missing"."""
        entry = self.get(key)
        return "missing" if entry is None else entry["status"]

    def counts(self, keys: Iterable[str]) -> Counter:
        return Counter(self.status(k) for k in keys)

    def entries(self, keys: Iterable[str], lists: bool = True) -> list[dict[str, Any]]:
        """The entries of `keys` that exist. `lists=False` leaves out each trial's per-query lists (PER_QUERY: most of
        an entry's memory, ~8 KB at a 1,000-item gallery): the tables need none of them, and the report re-reads
        them for the one cell it plots (orchestrator/report/page.py `write_report`)."""
        out = []
        for k in keys:
            if (e := self.get(k)) is not None:
                if not lists:
                    for field in PER_QUERY:
                        e.pop(field, None)
                out.append(e)
        return out
