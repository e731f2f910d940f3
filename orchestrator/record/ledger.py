"""The trial ledger: one JSON file per trial key, the source of truth for what has run (docs/ledger.md: the schema
of an entry).

Ray Tune's own restore can only finish the exact interrupted job; it cannot add cells to a grid or skip cells another
grid already ran. The ledger can: a re-submitted (or edited) grid runs only keys that have no successful entry. Only
the driver writes it (one writer, atomic renames), so it needs no locking; a crash loses at most the trial in flight.

Every field of an entry has one type and range (`ENTRY_FIELDS`, `spec_problem`: the one schema), checked where an
entry is written (`put`, `_write`: a result that does not pass is recorded as a failed trial that says why) and where
it is read (`get`). An entry that does not pass (torn, edited by hand, written by something else: an R@1 that is a
string, a list or null, a method that is a number) is *damaged*: found when it is read, moved to `damaged/` with why,
listed in `damaged` for the command to name, counted as damaged by `status` and shown as `damaged` in every table
(orchestrator/report/rows.py); its cell runs again on `resume`. Nothing crashes on one.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from workloads.atomic import atomic_write_text
from workloads.spec import TrialSpec

PER_QUERY = ("k_occurrence", "batch_R1")   # per-query lists of an entry (workloads/spec.py TrialResult)
# `query_R1` (each query's share of R@1) is per query too, but the tables' intervals read it: `entries(lists=False)`
# keeps it as float16
STATUSES = ("ok", "failed")
# the spec fields every output reads (tables, report, status lines): an entry without them cannot be shown
SPEC_AXES = ("dataset", "direction", "scenario", "perturbation", "severity", "method", "backbone")
DAMAGED = "damaged"
# a planned trial's state, as every output counts it (`count_text`): its entry's status, damaged (set aside: `get`)
# or missing (never run)
TRIAL_STATES = ("ok", "failed", DAMAGED, "missing")


def count_text(counts: Mapping[str, int]) -> str:
    """"4 done, 1 failed, 2 damaged, 3 never run": the one wording of a grid's trial states (`status`, `report`,
    `submit`'s last line, the tables' and the report's heads); damaged only where there are some."""
    damaged = f"{counts[DAMAGED]} damaged, " if counts.get(DAMAGED) else ""
    return (f"{counts.get('ok', 0)} done, {counts.get('failed', 0)} failed, {damaged}"
            f"{counts.get('missing', 0)} never run")


# -- the one schema of an entry: each field's type and range, checked where an entry is written (`put`, `_write`)
# and where it is read (`get`), so nothing is written that a reader would set aside, and nothing read that a table,
# a Parquet file or MLflow would choke on (docs/ledger.md lists the fields). A check returns what is wrong with a
# value, as the end of a sentence that names it ("is a str ('abc'), not a number"; ".R1 is ..." for a field inside
# it), or None when it is right.
Check = Callable[[Any], "str | None"]


def _shown(value: Any) -> str:
    """A value as a problem names it: its type and at most 40 characters of it."""
    text, kind = repr(value), type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _within(low: float | None, high: float | None) -> str:
    return f"[{'' if low is None else low}, {'' if high is None else high}]"


def _inner(name: str, problem: str) -> str:
    """`problem` of a value inside another, after its `name` (".R1 is ...", "[3] is ...")."""
    return f"{name}{problem}" if problem.startswith((".", "[")) else f"{name} {problem}"


def number(low: float | None = None, high: float | None = None, nan: bool = True, null: bool = True) -> Check:
    """A number (int or float, not a bool) within [low, high]; NaN where `nan`, JSON null where `null`."""
    def check(v: Any) -> str | None:
        if v is None:
            return None if null else "is null, not a number"
        if not _is_number(v):
            return f"is {_shown(v)}, not a number"
        if math.isnan(v):
            return None if nan else "is NaN, not a number"
        if (low is not None and v < low) or (high is not None and v > high):
            return f"is {v!r}, outside {_within(low, high)}"
        return None
    return check


def integer(low: int | None = None, null: bool = True) -> Check:
    def check(v: Any) -> str | None:
        if v is None:
            return None if null else "is null, not an integer"
        if not isinstance(v, int) or isinstance(v, bool):
            return f"is {_shown(v)}, not an integer"
        return f"is {v}, below {low}" if low is not None and v < low else None
    return check


def text(null: bool = True) -> Check:
    def check(v: Any) -> str | None:
        if v is None:
            return None if null else "is null, not a string"
        return None if isinstance(v, str) else f"is {_shown(v)}, not a string"
    return check


def flag(null: bool = True) -> Check:
    def check(v: Any) -> str | None:
        if v is None and null:
            return None
        return None if isinstance(v, bool) else f"is {_shown(v)}, not true or false"
    return check


def one_of(*values: str) -> Check:
    return lambda v: None if v in values else f"is {_shown(v)}, not one of {', '.join(values)}"


def anything(v: Any) -> str | None:
    return None


def numbers(low: float | None = None, high: float | None = None) -> Check:
    """A list (or null) of plain numbers within [low, high], checked by the list's set of item types and its min and
    max (C loops), not item by item: the per-query lists hold a value per query (~1,000 a trial), and every command
    reads every entry."""
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if not isinstance(v, list):
            return f"is {_shown(v)}, not a list"
        if not v:
            return None
        if not set(map(type, v)) <= _NUMBER_TYPES:
            i, bad = next((i, x) for i, x in enumerate(v) if type(x) not in _NUMBER_TYPES)
            return f"[{i}] is {_shown(bad)}, not a number"
        if (low is not None and min(v) < low) or (high is not None and max(v) > high):
            return f"holds values outside {_within(low, high)}"
        return None
    return check


_NUMBER_TYPES = {int, float}   # what json reads a number as (a bool is neither)


def list_of(item: Check) -> Check:
    """A list (or null) whose items pass `item`."""
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if not isinstance(v, list):
            return f"is {_shown(v)}, not a list"
        for i, x in enumerate(v):
            if (problem := item(x)) is not None:
                return _inner(f"[{i}]", problem)
        return None
    return check


def mapping_of(value: Check, special: Mapping[str, Check] | None = None) -> Check:
    """An object (or null) whose values pass `value` (or `special[key]`)."""
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if not isinstance(v, dict):
            return f"is {_shown(v)}, not an object"
        for k, x in v.items():
            if (problem := (special or {}).get(k, value)(x)) is not None:
                return _inner(f".{k}", problem)
        return None
    return check


PERCENT = number(0, 100, nan=False, null=False)
# metrics with a range of their own: recall in percent (where present, a number: the clean check and every table
# compute with it), ranks from 1; the others are any number or null (NaN: a statistic without a value, e.g. the
# skewness of a constant k-occurrence)
METRIC_CHECKS = {"R1": PERCENT, "R5": PERCENT, "R10": PERCENT, "MdR": number(1), "MnR": number(1)}
# each field of TrialSpec (workloads/spec.py) by its annotation (str, int or bool), and the ranges of its integers
_SPEC_TYPES = {"str": text(null=False), "int": integer(0, null=False), "bool": flag(null=False)}
SPEC_CHECKS = {f.name: _SPEC_TYPES[str(f.type)] for f in dataclasses.fields(TrialSpec)}


def spec_problem(spec: Any, key: str) -> str | None:
    """What is wrong with an entry's spec for trial `key`: not an object, an axis every output reads missing, a
    field of the wrong type, a spec TrialSpec refuses, or one whose key is not `key` (edited after it was written)."""
    if not isinstance(spec, dict):
        return "its spec lacks everything (not an object)"
    if lacking := [a for a in SPEC_AXES if a not in spec]:
        return "its spec lacks " + ", ".join(lacking)
    for name, value in spec.items():
        check = SPEC_CHECKS.get(name)
        if check is None:
            return f"spec.{str(name)[:40]} is not a field of a trial spec"
        if (problem := check(value)) is not None:
            return f"spec.{name} {problem}"
    try:
        own = TrialSpec.from_dict(spec).key
    except Exception as err:   # whatever a spec's own checks raise (its options' JSON, its mix): damaged
        return f"its spec is refused ({str(err)[:120]})"
    return None if own == key else f"its spec is another trial's (key {own[:12]}...), not the file's"


ENTRY_FIELDS: dict[str, Check] = {
    # from the trial (workloads/spec.py TrialResult)
    "key": text(null=False), "spec": anything,   # the spec: `spec_problem`, which needs the key
    "status": one_of(*STATUSES),
    "metrics": mapping_of(number(), METRIC_CHECKS),
    "k_occurrence": numbers(0), "batch_R1": numbers(0, 100), "query_R1": numbers(0, 1),
    "n_queries": integer(0), "n_gallery": integer(0),
    "dropped": list_of(mapping_of(anything)),
    "faithful_renders": number(0, 1),
    "fallbacks": list_of(text(null=False)), "notes": list_of(text(null=False)),
    "timings": mapping_of(number()),
    "error": text(), "traceback": text(), "failed_batch": integer(0),
    "environment": mapping_of(anything),
    "scores_path": text(), "method_faithful": flag(),
    # the stream protocol a trial ran (docs/protocols.md): name, options, batch counts, k; a multi-segment trial's
    # per-segment metrics; [queries seen, R@1 so far] every `every` queries
    "protocol": mapping_of(anything), "segments": list_of(mapping_of(anything)), "running_R1": list_of(numbers(0)),
    # added by the driver (orchestrator/run/tune.py, `put`, `record_run`)
    "ray_node": text(), "pid": integer(0), "submission": text(),
    "attempts": list_of(mapping_of(anything)), "recorded_at": number(0, nan=False),
    "mlflow_runs": mapping_of(text(null=False)), "previous_mlflow_runs": mapping_of(text(null=False)),
}


def entry_problem(entry: Any, key: str) -> str | None:
    """Why `entry` is not a ledger entry of trial `key` (None: it is one): the first field that is missing or fails
    its check in `ENTRY_FIELDS` / `spec_problem`, named with its value (one line). A finished entry has an R@1."""
    if not isinstance(entry, dict):
        return f"not a JSON object but {type(entry).__name__}"
    missing = [f for f in ("key", "spec", "status") if f not in entry]
    if missing:
        return f"no {', '.join(missing)}"
    if entry["key"] != key:
        return f"its key {str(entry['key'])[:16]!r} is not the file's"
    if entry["status"] not in STATUSES:
        return f"status {str(entry['status'])[:40]!r} is not one of {', '.join(STATUSES)}"
    if (problem := spec_problem(entry["spec"], key)) is not None:
        return problem
    for name, value in entry.items():
        check = ENTRY_FIELDS.get(name)   # a field this version does not know is kept, not read
        if check is not None and (problem := check(value)) is not None:
            return _inner(name, problem)
    if entry["status"] == "ok":
        if "R1" not in (entry.get("metrics") or {}):   # its value is checked above
            return "metrics.R1 is missing in a finished (ok) entry"
    return None


def _plain(value: Any) -> Any:
    """What json cannot write, as the reader will check it: numpy numbers and arrays as Python ones (not their
    text, which would read back as a string), the rest (paths, versions) as text."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return str(value)


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
        except (ValueError, RecursionError) as err:   # not JSON, not UTF-8, nested past the parser's depth
            entry, problem = None, f"not JSON ({str(err)[:120]})"
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
        return set(self.damaged_files())

    def damaged_files(self) -> dict[str, str]:
        """Trial key -> "<file>: <why>" of each damaged entry (`damaged_keys`), the newest where a key was set aside
        more than once: what the tables' and trials.parquet's `why` column says of a damaged cell
        (orchestrator/report/rows.py)."""
        folder = self.root / DAMAGED
        out: dict[str, tuple[float, str]] = {}
        for path in folder.glob("*.json") if folder.is_dir() else ():
            try:
                why = path.with_suffix(".why.txt").read_text().strip()
                when = path.stat().st_mtime
            except OSError:
                why, when = "", 0.0
            key = path.name.split(".")[0]
            if key not in out or when >= out[key][0]:
                out[key] = (when, f"{path}: {why}" if why else str(path))
        files = {k: text for k, (_, text) in out.items()}
        files.update({src.stem: f"{src}: {why}" for src, dest, why in self.damaged if src == dest})
        return files

    def was_damaged(self, key: str) -> bool:
        """Whether an entry of trial `key` was ever set aside as damaged (one look at `damaged/`)."""
        return (self.root / DAMAGED / f"{key}.json").exists()

    def damaged_lines(self) -> list[str]:
        """One line per entry set aside by this ledger object, naming the file."""
        return [f"damaged ledger entry {src}: {why}; " + ("left where it is (this command writes nothing)"
                if src == dest else f"moved to {dest} (its cell counts as damaged: resume runs it again)")
                for src, dest, why in self.damaged]

    def put(self, result: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Record a trial result (a TrialResult dict). Earlier attempts are kept in `attempts`. A result with a
        value its field does not allow (`entry_problem`: a metric that is not a number, ...) is recorded as a failed
        trial whose error names the value: it runs again on `resume`, and nothing is written that a reader would
        find damaged."""
        key = result["key"]
        old = self.get(key) or {}
        attempts = old.get("attempts", [])
        entry = {**result, **extra, "attempts": attempts, "recorded_at": time.time()}
        if old.get("mlflow_runs"):  # runs of the earlier attempt stay listed (they are that attempt's record)
            entry["previous_mlflow_runs"] = old["mlflow_runs"]
        text = json.dumps(entry, default=_plain)
        if (problem := entry_problem(json.loads(text), key)) is not None:
            entry = {k: entry[k] for k in ("key", "spec", "submission", "environment", "attempts", "recorded_at",
                                           "previous_mlflow_runs") if k in entry}
            entry.update(status="failed", metrics={}, error=f"result not recordable: {problem}")
        attempts.append({"time": entry["recorded_at"], "status": entry["status"], "error": entry.get("error"),
                         "submission": extra.get("submission")})
        entry["attempts"] = attempts[-20:]
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
        """Write an entry that passes `entry_problem` as it will be read back; one that does not is refused
        (ValueError) and nothing is written."""
        text = json.dumps(entry, default=_plain)
        if (problem := entry_problem(json.loads(text), key)) is not None:
            raise ValueError(f"ledger entry {key} not written: {problem}")
        atomic_write_text(self.path(key), text)

    def status(self, key: str) -> str:
        """"ok", "failed", "damaged" (set aside, see `get`) or "missing"."""
        entry = self.get(key)
        if entry is not None:
            return entry["status"]
        return DAMAGED if self.was_damaged(key) else "missing"

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
