"""Trial runs logged in one transaction (orchestrator/record/mlflow_store.py Tracker.log_trials, used by the background
writer) read back from a real sqlite MLflow store exactly as runs logged one by one (`log_trial`): same tags, params,
metrics, status and artifacts; a failed trial's error and traceback too. And the writer: trials handed to
`log_trial_later` are all logged after `flush`, each run id reported once, and `flush` does not wait out the time a
batch gathers."""
from __future__ import annotations

import json
import time

from orchestrator.record.mlflow_store import Tracker
from orchestrator.record.writer import TrialLogWriter
from workloads.spec import TrialSpec


def _entry(i: int, status: str = "ok") -> dict:
    spec = TrialSpec(dataset="msrvtt", direction="v2t", scenario="query_shift", perturbation="fog", severity=1 + i % 5,
                     method="tent", backbone="clip4clip", seed=0, faithful=True, hub_k=10, data_version="d",
                     model_version="m").to_dict()
    entry = {"key": TrialSpec.from_dict(spec).key, "spec": spec, "status": status,
             "metrics": {"R1": 30.0 + i, "R5": 60.0, "hub_skewness": float("nan") if i == 2 else 1.5},
             "timings": {"total_s": 1.0}, "n_queries": 4, "k_occurrence": [i, 1, 2, 3]}
    if status == "failed":
        entry.update(error="RuntimeError: boom", traceback="Traceback ...\nRuntimeError: boom", metrics={})
    return entry


def _view(tracker: Tracker, rid: str) -> dict:
    run = tracker.client.get_run(rid)
    tags = {k: v for k, v in run.data.tags.items() if k not in ("mlflow.parentRunId",)}
    files = sorted(f.path for f in tracker.client.list_artifacts(rid))
    k_occ = json.loads(open(tracker.client.download_artifacts(rid, "k_occurrence.json")).read())
    metrics = {k: "nan" if v != v else v for k, v in run.data.metrics.items()}
    return {"tags": tags, "params": run.data.params, "metrics": metrics,
            "status": run.info.status, "name": run.info.run_name, "files": files, "k_occ": k_occ,
            "parent": run.data.tags["mlflow.parentRunId"]}


def test_batch_equals_one_by_one_and_writer_flushes(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    grid = type("G", (), {"name": "g", "source": str(tmp_path / "g.yaml")})()
    (tmp_path / "g.yaml").write_text("name: g\n")
    parent = tracker.start_parent(grid, "name: g\n", {"trials": 4})
    entries = [_entry(i) for i in range(3)] + [_entry(3, "failed")]
    one = [tracker.log_trial(parent, "g", e) for e in entries]
    batch = tracker.log_trials(parent, "g", entries)
    assert len(set(one + batch)) == 8
    for a, b in zip(one, batch):
        va, vb = _view(tracker, a), _view(tracker, b)
        assert va == vb
    assert _view(tracker, batch[3])["status"] == "FAILED" and "traceback.txt" in _view(tracker, batch[3])["files"]
    assert _view(tracker, batch[2])["metrics"]["hub_skewness"] == "nan"

    logged: list[tuple[str, str]] = []
    errors: list[Exception] = []
    for e in [_entry(i) for i in range(10, 40)]:
        tracker.log_trial_later(parent, "g", e, lambda rid, k=e["key"]: logged.append((k, rid)), errors.append)
    tracker.flush()
    assert not errors and len(logged) == 30 and len({rid for _, rid in logged}) == 30
    runs = tracker.trial_runs("g")
    assert all(runs[(k, "ok")] in {rid for _, rid in logged} | set(one) | set(batch) for k, _ in logged)
    assert len(tracker.client.search_runs([tracker.experiment("g")], "tags.`mlvp.kind` = 'trial'",
                                          max_results=1000)) == 38


def test_flush_logs_what_is_gathered_at_once(tmp_path, monkeypatch):
    """The writer gathers runs for `linger_s` after the first into one transaction; a caller waiting in `flush` (the
    end of a submission) gets them logged at once, not after the gathering time, and the writer goes on gathering."""
    monkeypatch.setattr(TrialLogWriter, "linger_s", 60.0)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    grid = type("G", (), {"name": "g", "source": str(tmp_path / "g.yaml")})()
    (tmp_path / "g.yaml").write_text("name: g\n")
    parent = tracker.start_parent(grid, "name: g\n", {"trials": 4})
    logged: list[str] = []
    errors: list[Exception] = []
    for rounds in ([_entry(0)], [_entry(1), _entry(2), _entry(3)]):
        for e in rounds:
            tracker.log_trial_later(parent, "g", e, logged.append, errors.append)
        t0 = time.monotonic()
        tracker.flush()
        assert time.monotonic() - t0 < 30   # not the 60 s a batch would gather for
    assert not errors and len(set(logged)) == 4
    tracker.close()


def test_flush_after_stop_waits_for_the_queued_runs_and_returns(tmp_path):
    """A writer told to stop still logs what was queued before; a `flush` after that waits for it and returns (no
    thread is left to take a flush mark off the queue, so waiting on the queue would hang)."""
    import threading

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    grid = type("G", (), {"name": "g", "source": str(tmp_path / "g.yaml")})()
    (tmp_path / "g.yaml").write_text("name: g\n")
    parent = tracker.start_parent(grid, "name: g\n", {"trials": 3})
    logged: list[str] = []
    writer = TrialLogWriter(tracker)
    for i in range(3):
        writer.put((parent, "g", _entry(i), logged.append, lambda err: None))
    writer.stop()
    flushing = threading.Thread(target=writer.flush, daemon=True)
    flushing.start()
    flushing.join(timeout=60)
    assert not flushing.is_alive() and not writer.thread.is_alive()
    assert len(set(logged)) == 3


def test_tracker_process_logs_as_the_tracker_does_and_survives_ctrl_c(tmp_path):
    """`submit`'s driver logs through TrackerProcess (MLflow in a process of its own): the same runs as the
    in-process Tracker, read back here in-process; the driver's pid on the parent run; an MLflow error comes back
    with its own type name; a SIGINT to the tracking process (Ctrl-C reaches the whole process group) leaves it
    answering, so the driver can still close its parent run; a second TrackerProcess, on another store, is served
    by the same process."""
    import os
    import signal

    import ray  # noqa: F401  (psutil ships inside Ray's package)
    import psutil

    from orchestrator.record.tracker_process import TrackerProcess
    from orchestrator.record.mlflow_store import TrackingError, error_name

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = TrackerProcess(uri, tmp_path)
    try:
        assert proc.pid != os.getpid()
        grid = type("G", (), {"name": "g", "source": str(tmp_path / "g.yaml")})()
        parent = proc.start_parent(grid, "name: g\n", {"trials": 3})
        logged: list[tuple[str, str]] = []
        errors: list[Exception] = []
        entries = [_entry(i) for i in range(2)] + [_entry(2, "failed")]
        for e in entries:
            proc.log_trial_later(parent, "g", e, lambda rid, k=e["key"]: logged.append((k, rid)), errors.append)
        proc.flush()
        assert not errors and [k for k, _ in logged] == [e["key"] for e in entries]
        assert proc.trial_runs("g") == {(e["key"], e["status"]): rid for e, (_, rid) in zip(entries, logged)}

        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.finish_parent("0" * 32, {}, [], "FINISHED")   # no such run
            raise AssertionError("an unknown run must fail")
        except TrackingError as err:
            assert error_name(err) == "MlflowException" and "0" * 32 in str(err)
        proc.finish_parent(parent, {"trials_ok": 2}, [], "KILLED")

        mine = Tracker(uri, tmp_path)   # what the process wrote, read back in this one
        for e, (_, rid) in zip(entries, logged):
            view = _view(mine, rid)
            assert view["parent"] == parent and view["status"] == ("FINISHED" if e["status"] == "ok" else "FAILED")
            assert view["k_occ"]["counts"] == e["k_occurrence"]
        run = mine.client.get_run(parent)
        assert run.info.status == "KILLED" and run.data.metrics["trials_ok"] == 2
        assert run.data.tags["mlvp.pid"] == str(os.getpid())   # the driver's, for close_stale_parents
        other = TrackerProcess(f"sqlite:///{tmp_path / 'other.db'}", tmp_path / "other")
        assert other.pid == proc.pid and psutil.pid_exists(proc.pid)   # one tracking process, MLflow imported once
        other.start_parent(grid, "name: g\n", {})
        assert len(mine.client.search_runs([mine.experiment("g")], "tags.`mlvp.kind` = 'submission'")) == 1
        other.close()
    finally:
        proc.close()


def test_a_job_runs_in_its_turn_and_the_caller_does_not_wait(tmp_path):
    """`later` (submit's parent run and first sync, orchestrator/run/submit.py `open_store`): the job runs on the
    writer's thread while the caller goes on; trials queued after it are logged after it, under the parent run it
    started (a callable parent, read on that thread). A job that fails is reported once through its `on_error`, and what
    follows is dropped (the ledger has it)."""
    import threading

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    grid = type("G", (), {"name": "g", "source": str(tmp_path / "g.yaml")})()
    release, started, order, errors = threading.Event(), {}, [], []

    def open_run():
        assert release.wait(30)   # the store is slow to start: the caller must not be waiting here
        started["parent"] = tracker.start_parent(grid, "name: g\n", {})
        order.append("parent")

    tracker.later(open_run, errors.append)
    entries = [_entry(i) for i in range(5)]
    for e in entries:
        tracker.log_trial_later(lambda: started["parent"], "g", e, lambda rid, k=e["key"]: order.append((k, rid)),
                                errors.append)
    assert order == [] and "parent" not in started   # everything queued, nothing logged yet
    release.set()
    tracker.flush()
    assert not errors and order[0] == "parent" and [k for k, _ in order[1:]] == [e["key"] for e in entries]
    assert {_view(tracker, rid)["parent"] for _, rid in order[1:]} == {started["parent"]}

    broken = Tracker(f"sqlite:///{tmp_path / 'other.db'}", tmp_path / "other")
    logged: list = []

    def store_down():
        raise RuntimeError("store down")

    broken.later(store_down, errors.append)
    for e in entries:
        broken.log_trial_later(lambda: "never", "g", e, logged.append, errors.append)
    broken.flush()
    assert [str(e) for e in errors] == ["store down"] and logged == []
    tracker.close()
    broken.close()


def test_a_sync_beside_the_trials_compares_the_ledger_as_it_was(tmp_path):
    """`submit` syncs the store on the tracker's thread while its trials already run. A trial that re-runs a failed
    cell rewrites the cell's entry meanwhile: the sync logs the failed attempt it compared (read before the trials
    started, `ledger_as_of`), not the new result, which the trial's own logging logs once."""
    import io
    import types

    from rich.console import Console

    from orchestrator.record.ledger import TrialLedger
    from orchestrator.record.sync import ledger_as_of, sync_store
    from orchestrator.record.mlflow_store import store_key

    ledger = TrialLedger(tmp_path / "ledger")
    failed, other = _entry(0, "failed"), _entry(1)
    ledger.put(failed)
    ledger.put(other)
    rerun, kept = TrialSpec.from_dict(failed["spec"]), TrialSpec.from_dict(other["spec"])
    plan = types.SimpleNamespace(grid=types.SimpleNamespace(name="g"), trials=[rerun, kept])
    as_of = ledger_as_of(plan, ledger, [rerun])   # before the trials start
    new = ledger.put(_entry(0))                   # the re-run's result, in the ledger before the sync reads it

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    grid = type("G", (), {"name": "g", "source": str(tmp_path / "g.yaml")})()
    parent = tracker.start_parent(grid, "name: g\n", {})
    assert sync_store(tracker, plan, ledger, lambda: parent, Console(file=io.StringIO()), as_of) == 2
    ledger.record_run(rerun.key, store_key(tracker.uri), tracker.log_trial(parent, "g", new), new)   # its own run

    runs = tracker.client.search_runs([tracker.experiment("g")], "tags.`mlvp.kind` = 'trial'")
    assert sorted((r.data.tags["mlvp.trial_key"], r.data.tags["mlvp.status"]) for r in runs) == sorted(
        [(rerun.key, "failed"), (rerun.key, "ok"), (kept.key, "ok")])
