"""The ledger against a tracking store: which of a plan's trials a store lacks and logging them (`sync_store`,
used by `submit` as it starts and ends and by the `sync` command), the submission's parent run (`start_parent`), and
which of a plan's trials are still to run (`select_trials`)."""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from orchestrator.planning.plan import Plan
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import attempt_tag, store_key
from workloads.spec import TrialSpec


def sync_entries(tracker, grid_name: str, entries: list[dict[str, Any]], parent: Callable[[], str],
                 record: Callable[[str, str], None],
                 whole: Callable[[str], dict[str, Any] | None] | None = None, chunk: int = 200) -> tuple[int, int]:
    """Log every ledger entry `tracker`'s store lacks (`current_run`: by trial key, status and attempt) as a child run
    of `parent()` (called only when something is logged), and `record(trial key, run id)` for every entry whose run
    in this store the ledger did not know yet. Every other current run of an entry's trial (an earlier attempt's: a
    re-run of a damaged or failed cell, a driver killed before it marked one) is then tagged superseded
    (`Tracker.supersede`), so the store holds one current run per trial. Returns (runs created, runs superseded).
    `whole(key)` reads an entry back with its per-query lists when `entries` were read without them
    (`TrialLedger.entries(lists=False)`). The missing ones are logged `chunk` at a time (`log_trials`: one
    transaction each on a SQL store), each recorded as its chunk commits."""
    have = tracker.current_trial_runs(grid_name)
    store, created, parent_id = store_key(tracker.uri), 0, None
    missing: list[dict[str, Any]] = []
    current: list[tuple[str, str]] = []   # (trial key, its current run) of the trials whose other runs go
    for e in entries:
        runs = have.get(e["key"], [])
        known = (e.get("mlflow_runs") or {}).get(store)
        rid = current_run(e, runs, known)
        if rid is None:
            missing.append(e)
            continue
        if known != rid:
            record(e["key"], rid)
        if len(runs) > 1:
            current.append((e["key"], rid))
    for i in range(0, len(missing), chunk):
        parent_id = parent_id or parent()
        part = [(whole(e["key"]) if whole else None) or e for e in missing[i:i + chunk]]
        for e, rid in zip(part, tracker.log_trials(parent_id, grid_name, part)):
            created += 1
            record(e["key"], rid)
            if have.get(e["key"]):
                current.append((e["key"], rid))
    superseded = sum(len(tracker.supersede(grid_name, key, rid)) for key, rid in current)
    return created, superseded


def current_run(entry: dict[str, Any], runs: list[tuple[str, str, str]], known: str | None = None) -> str | None:
    """Which of a store's current runs of the entry's trial (`Tracker.current_trial_runs`: (status, run id, attempt),
    newest first) is the entry's: one of its status and its attempt (`recorded_at`; a run logged before runs carried
    it matches any), the one the ledger names (`known`) where it is among them, else the newest; None: none is."""
    attempt = attempt_tag(entry["recorded_at"]) if entry.get("recorded_at") is not None else ""
    mine = [rid for status, rid, tag in runs
            if status == entry["status"] and (not tag or not attempt or tag == attempt)]
    return known if known in mine else (mine[0] if mine else None)


def select_trials(plan: Plan, ledger: TrialLedger, only_failed: bool, rerun: bool, incomplete: bool = False):
    """The trials to run and every trial's ledger status ("ok", "failed", "damaged": its entry was set aside, see
    TrialLedger.get; "missing": never run). Every cell not "ok" runs again, or only the failed ones; `incomplete` also
    reruns cells that finished with queries dropped (videos that could not be decoded then: fixed videos are picked
    up)."""
    entries = {t.key: ledger.get(t.key) for t in plan.trials}
    damaged = ledger.damaged_keys()
    status = {k: e["status"] if e is not None else "damaged" if k in damaged else "missing"
              for k, e in entries.items()}
    if rerun:
        todo = list(plan.trials)
    elif only_failed:
        todo = [t for t in plan.trials if status[t.key] == "failed"]
    else:
        todo = [t for t in plan.trials if status[t.key] != "ok"
                or (incomplete and entries[t.key] and entries[t.key].get("dropped"))]
    return todo, status


def start_parent(tracker, plan: Plan, submission: str, to_run: int, done_before: int) -> str:
    """The submission's parent run, its params the plan's summary and how many trials it runs; the parents of this
    grid's submissions whose driver died are closed first (KILLED)."""
    closed = tracker.close_stale_parents(plan.grid.name)
    return tracker.start_parent(plan.grid, Path(plan.grid.source).read_text(),
                                {"submission": submission, **plan.summary(), "to_run": to_run,
                                 "done_before": done_before, "closed_stale_parents": len(closed)})


def sync_store(tracker, plan: Plan, ledger: TrialLedger, parent, console: Console,
               entries: tuple[list[dict], Callable[[str], dict | None]] | None = None, what: str = "") -> int:
    """Log to this store every trial of the plan the ledger holds and the store lacks (a driver killed between
    the ledger and MLflow, a store that was down, another store); `parent()` gives the parent run. `entries`: the
    entries to compare and how to read one whole (`ledger_as_of`), else the ledger as it is now. `what`: what the
    caller knows these trials are, for the console line ("trials of the clean check": `submit` logs the trials its
    check ran this way); without it the line says they were in the ledger and not in the store."""
    store = store_key(tracker.uri)
    entries, whole = entries or ledger_as_of(plan, ledger, ())
    created, superseded = sync_entries(tracker, plan.grid.name, entries, parent,
                                       lambda key, rid: ledger.record_run(key, store, rid), whole=whole)
    if created and what:
        console.print(f"MLflow: logged the {created} {what} to {tracker.uri}")
    elif created:
        console.print(f"MLflow: logged {created} trials that the ledger holds and {tracker.uri} did not (a "
                      "submission stopped before logging them, or a new store)")
    if superseded:
        console.print(f"MLflow: {superseded} runs of earlier attempts tagged superseded in {tracker.uri} (one current "
                      f"run per trial: filter tags.mlvp.superseded_by IS NULL)")
    return created


def ledger_as_of(plan: Plan, ledger: TrialLedger, todo: list[TrialSpec]
                 ) -> tuple[list[dict], Callable[[str], dict | None]]:
    """The plan's ledger entries as they are now, for `sync_store`, and how to read one whole: entries of `todo`
    whole now, since trials about to run rewrite them (a sync running beside them would otherwise log a new result
    that the trial's own logging logs again)."""
    # read without the per-query lists (a resume of a full grid reads every entry); a run it logs reads its entry whole
    entries = ledger.entries((t.key for t in plan.trials), lists=False)
    rerun = {t.key for t in todo}
    now = {e["key"]: ledger.get(e["key"]) for e in entries if e["key"] in rerun}
    return entries, lambda key: now[key] if key in now else ledger.get(key)


def new_submission_id() -> str:
    """A submission's id: when it started and a random suffix (ledger entries and MLflow runs carry it)."""
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def sync_grid(tracker, plan: Plan, ledger: TrialLedger, console: Console, submission: str | None = None,
              close: bool = True) -> tuple[int, str | None]:
    """The `sync` of a whole grid, no trial running: the parents of dead submissions closed, every trial the store
    lacks logged under a parent run made only when something is logged (with `close`, closed FINISHED with the
    ledger's counts; else left to the caller). Returns (runs created, that parent run or None)."""
    tracker.close_stale_parents(plan.grid.name)
    parent: list[str] = []
    done = sum(1 for t in plan.trials if (e := ledger.get(t.key)) is not None and e["status"] == "ok")

    def parent_on_demand() -> str:
        if not parent:
            parent.append(start_parent(tracker, plan, submission or new_submission_id(), 0, done))
        return parent[0]

    created = sync_store(tracker, plan, ledger, parent_on_demand, console)
    if parent and close:
        tracker.finish_parent(parent[0], {"trials_ok": done, "synced": created}, [], "FINISHED")
    return created, parent[0] if parent else None
