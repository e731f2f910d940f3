"""The trial ledger: one JSON file per trial key, the source of truth for what has run (docs/ledger.md: the schema
of an entry).

Ray Tune's own restore can only finish the exact interrupted job; it cannot add cells to a grid or skip cells another
grid already ran. The ledger can: a re-submitted (or edited) grid runs only keys that have no successful entry. Only
the driver writes it (one writer, atomic renames), so it needs no locking; a crash loses at most the trial in flight.

An entry that cannot be read as one (torn, edited by hand, written by something else) is *damaged*: found when it is
read, moved to `damaged/` with why, listed in `damaged` for the command to name, and counted as damaged by `status`;
its cell runs again on `resume`. Nothing crashes on one.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from workloads.atomic import atomic_write_text

PER_QUERY = ("k_occurrence", "batch_R1")   # per-query lists of an entry (workloads/spec.py TrialResult)
# `query_R1` (each query's share of R@1) is per query too, but the tables' intervals read it: `entries(lists=False)`
# keeps it as float16
STATUSES = ("ok", "failed")
# the spec fields every output reads (tables, report, status lines): an entry without them cannot be shown
SPEC_AXES = ("dataset", "direction", "scenario", "perturbation", "severity", "method", "backbone")
DAMAGED = "damaged"


def entry_problem(entry: Any, key: str) -> str | None:
    """Why `entry` is not a ledger entry of trial `key` (None: it is one)."""
    if not isinstance(entry, dict):
        return f"not a JSON object but {type(entry).__name__}"
    missing = [f for f in ("key", "spec", "status") if f not in entry]
    if missing:
        return f"no {', '.join(missing)}"
    if entry["key"] != key:
        return f"its key {str(entry['key'])[:16]!r} is not the file's"
    if entry["status"] not in STATUSES:
        return f"status {entry['status']!r} is not one of {', '.join(STATUSES)}"
    spec = entry["spec"]
    if not isinstance(spec, dict) or any(a not in spec for a in SPEC_AXES):
        return "its spec lacks " + (", ".join(a for a in SPEC_AXES if a not in spec) if isinstance(spec, dict)
                                    else "everything (not an object)")
    if not isinstance(entry.get("metrics", {}), dict):
        return "metrics is not an object"
    return None


class TrialLedger:
    def __init__(self, root: str | os.PathLike, read_only: bool = False):
        self.root = Path(root)
        self.read_only = read_only   # `plan`: damaged entries are named, not moved
        # entries set aside while this ledger was read: (where the file was, where it is now, why)
        self.damaged: list[tuple[Path, Path, str]] = []

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry of trial `key`, or None when there is none or it was damaged (then set aside: `damaged`)."""
        path = self.path(key)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            entry = json.loads(text)
            problem = entry_problem(entry, key)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            entry, problem = None, f"not JSON ({err})"
        if problem is None:
            return entry
        self._set_aside(path, key, problem)
        return None

    def _set_aside(self, path: Path, key: str, problem: str) -> None:
        """Move a damaged entry to `damaged/` (kept for a look, never read as a result) with a note of why."""
        dest = self.root / DAMAGED / f"{key}.json"
        if self.read_only:
            self.damaged.append((path, path, problem))
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():   # damaged before: keep both
            dest = dest.with_name(f"{key}.{int(time.time() * 1000)}.json")
        os.replace(path, dest)
        dest.with_suffix(".why.txt").write_text(problem + "\n")
        self.damaged.append((path, dest, problem))

    def damaged_keys(self) -> set[str]:
        """Trial keys with an entry in `damaged/` (set aside now or earlier), or found damaged by a read-only read."""
        folder = self.root / DAMAGED
        keys = {p.name.split(".")[0] for p in folder.glob("*.json")} if folder.is_dir() else set()
        return keys | {src.stem for src, dest, _ in self.damaged if src == dest}

    def damaged_lines(self) -> list[str]:
        """One line per entry set aside by this ledger object, naming the file."""
        return [f"damaged ledger entry {src}: {why}; " + ("left where it is (this command writes nothing)"
                if src == dest else f"moved to {dest} (its cell counts as damaged: resume runs it again)")
                for src, dest, why in self.damaged]

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
        """"ok", "failed", "damaged" (set aside, see `get`) or "missing"."""
        entry = self.get(key)
        if entry is not None:
            return entry["status"]
        return DAMAGED if (self.root / DAMAGED / f"{key}.json").exists() else "missing"

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
                    if e.get("query_R1"):   # kept for the tables' intervals, in 2 bytes a query, not a list
                        e["query_R1"] = np.asarray(e["query_R1"], dtype=np.float16)
                out.append(e)
        return out
