"""MLflow is a view of the ledger: `sync` logs exactly what a store lacks (no duplicates, any number of stores),
parent runs of dead drivers are closed, and an unreachable store or results folder fails in one line before anything
starts. Real MLflow sqlite stores; no Ray."""
import json
import socket
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from conftest import plan_unrun
from orchestrator.record.ledger import TrialLedger
from orchestrator.run.options import SubmitReport
from orchestrator.planning.paths import check_writable
from orchestrator.run.finish import finish
from orchestrator.run.console import make_console
from orchestrator.record.mlflow_store import Tracker, TrackingUnavailable, check_store, default_tracking_uri, store_key


@pytest.fixture
def planned(tmp_path, shared_cache):
    plan = plan_unrun(tmp_path, shared_cache, "trk")
    ledger = TrialLedger(plan.paths.ledger)
    for i, t in enumerate(plan.trials):  # the ledger as trials leave it
        ledger.put({"key": t.key, "spec": t.to_dict(), "status": "failed" if i == 0 else "ok",
                    "metrics": {} if i == 0 else {"R1": float(i), "hub_skewness": 0.1},
                    "error": "NonFiniteError: non-finite scores at batch 0" if i == 0 else None,
                    "k_occurrence": [i, 7, 0]}, submission="s1")
    return plan, ledger


def _sync(plan, ledger, uri):
    report = SubmitReport(plan, 0, 0)
    report.tracking_uri = uri
    finish(plan, plan.grid, ledger, report, make_console(), 0.0, None, {"ok": 0, "failed": 0}, "FINISHED", "sub")
    return report


def _trial_runs(uri):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("mlvp/trk")
    return client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'", max_results=1000)


def test_sync_logs_what_a_store_lacks_once_per_store(planned, tmp_path):
    plan, ledger = planned
    first = default_tracking_uri(plan.paths.results)
    report = _sync(plan, ledger, first)
    runs = _trial_runs(first)
    assert len(runs) == len(plan.trials) == 6 and report.parent_run_id
    assert {r.data.tags["mlvp.status"] for r in runs} == {"ok", "failed"}
    # the ledger knows each trial's run in this store
    by_key = {r.data.tags["mlvp.trial_key"]: r.info.run_id for r in runs}
    assert all(ledger.get(t.key)["mlflow_runs"][store_key(first)] == by_key[t.key] for t in plan.trials)
    # the sync reads the ledger without per-query lists, and each run it logs reads its entry back whole
    client = MlflowClient(first)
    for t in plan.trials[:2]:
        k_occ = json.loads(open(client.download_artifacts(by_key[t.key], "k_occurrence.json")).read())
        assert k_occ["counts"] == ledger.get(t.key)["k_occurrence"]

    # again: nothing missing, no new run, no new parent
    again = _sync(plan, ledger, first)
    assert len(_trial_runs(first)) == 6 and again.parent_run_id is None

    # a run lost from the store (deleted by hand, or a store restored from an old backup) is logged again, once
    client = MlflowClient(first)
    client.delete_run(runs[0].info.run_id)
    _sync(plan, ledger, first)
    assert len(_trial_runs(first)) == 6

    # a second store gets its own copy; the ledger lists both
    second = f"sqlite:///{tmp_path / 'other.db'}"
    _sync(plan, ledger, second)
    assert len(_trial_runs(second)) == 6
    assert all(set(ledger.get(t.key)["mlflow_runs"]) == {store_key(first), store_key(second)} for t in plan.trials)

    # a ledger written before stores were recorded (no mlflow_runs): the store's own runs are found, not duplicated
    for t in plan.trials:
        entry = ledger.get(t.key)
        entry.pop("mlflow_runs")
        ledger._write(t.key, entry)
    _sync(plan, ledger, first)
    assert len(_trial_runs(first)) == 6


def test_a_trial_rerun_after_failing_gets_its_own_run(planned):
    plan, ledger = planned
    uri = default_tracking_uri(plan.paths.results)
    _sync(plan, ledger, uri)
    t = plan.trials[0]
    ledger.put({"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": 9.0, "hub_skewness": 0.2}},
               submission="s2")
    _sync(plan, ledger, uri)
    runs = [r for r in _trial_runs(uri) if r.data.tags["mlvp.trial_key"] == t.key]
    assert sorted(r.data.tags["mlvp.status"] for r in runs) == ["failed", "ok"]
    assert ledger.get(t.key)["previous_mlflow_runs"]  # the failed attempt's run stays listed


def test_parent_runs_of_dead_drivers_are_closed_as_killed(planned):
    plan, ledger = planned
    uri = default_tracking_uri(plan.paths.results)
    tracker = Tracker(uri, plan.paths.results)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tracker.start_parent(plan.grid, "name: trk\n", {"submission": "killed"})
    MlflowClient(uri).set_tag(stale, "mlvp.pid", str(dead.pid))
    alive = tracker.start_parent(plan.grid, "name: trk\n", {"submission": "running"})   # this process: alive
    assert tracker.close_stale_parents("trk") == [stale]
    client = MlflowClient(uri)
    assert client.get_run(stale).info.status == "KILLED" and client.get_run(alive).info.status == "RUNNING"


def test_unreachable_tracking_server_fails_fast_in_one_line():
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    with pytest.raises(TrackingUnavailable) as info:
        check_store(f"http://127.0.0.1:{port}", timeout=2)
    assert time.time() - t0 < 5
    msg = str(info.value)
    assert "\n" not in msg and f"127.0.0.1:{port} is not reachable" in msg and "mlflow server" in msg


def test_unwritable_results_folder_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(OSError, match=r"directory .*a-file/results is not writable"):
        check_writable(blocker / "results")
    with pytest.raises(TrackingUnavailable, match="is not writable"):
        check_store(f"sqlite:///{blocker}/sub/mlflow.db")


def test_cli_errors_are_one_line_without_starting_anything(tmp_path):
    from conftest import write_micro_grid

    grid = write_micro_grid(tmp_path / "g.yaml")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = subprocess.run([sys.executable, "-m", "orchestrator", "submit", str(grid), "--results-dir",
                          str(blocker / "r")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "is not writable" in out.stderr
