"""Stream protocols' outputs (docs/protocols.md: Outputs): a trial's running R@1 and per-segment R@1 as MLflow step
metrics of its child run, and the protocols' tables (orchestrator/config/tables.py). Hand-written ledger entries of a
real plan (nothing run), a real MLflow sqlite store, the real table writer."""
from __future__ import annotations

import pytest

GRID = {
    "name": "protos",
    "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip"],
    "methods": ["source", "tent"],
    "query_shift": {"datasets": ["synthetic"], "directions": ["v2t"],
                    "perturbations": ["impulse_noise", "gaussian_noise"], "severities": [5],
                    "protocols": ["reset_each_shift", "episodic", "continual"]},
}


def _plan(tmp_path, shared_cache, grid=GRID):
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    grid_file = tmp_path / f"{grid['name']}.yaml"
    grid_file.write_text(f"name: {grid['name']}\n")
    return build_plan(parse_grid(grid, str(grid_file)), Paths.make(tmp_path / "results", shared_cache))


def test_running_and_segment_r1_are_step_metrics_of_the_trial_run(tmp_path, shared_cache):
    from mlflow.tracking import MlflowClient

    from orchestrator.record.mlflow_store import Tracker

    plan = _plan(tmp_path, shared_cache)
    trial = next(t for t in plan.trials if t.segments)     # the continual stream: two segments
    assert [c for c, _ in trial.segment_cells] == ["gaussian_noise", "impulse_noise"]
    running = [[16.0, 12.5], [32.0, 15.625], [48.0, 20.8333], [80.0, 22.5]]
    segments = [{"cell": "gaussian_noise-5", "perturbation": "gaussian_noise", "severity": 5, "R1": 20.0},
                {"cell": "impulse_noise-5", "perturbation": "impulse_noise", "severity": 5, "R1": 25.0}]
    entry = {"key": trial.key, "spec": trial.to_dict(), "status": "ok", "metrics": {"R1": 22.5},
             "batch_R1": [12.5, 18.75, 31.25, 25.0, 25.0], "running_R1": running, "segments": segments,
             "n_queries": 80, "k_occurrence": [1, 2]}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path)
    parent = tracker.start_parent(plan.grid, "name: protos\n", {})
    rid = tracker.log_trial(parent, "protos", entry)

    client = MlflowClient(tracking_uri=uri)
    history = sorted(client.get_metric_history(rid, "running_R1"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(int(q), pytest.approx(r)) for q, r in running]
    for s, seg in enumerate(segments):
        got = client.get_metric_history(rid, f"R1.seg.{seg['cell']}")
        assert [(m.step, m.value) for m in got] == [(s, pytest.approx(seg["R1"]))]
    # the per-batch steps are still there, step = the batch's index
    batches = sorted(client.get_metric_history(rid, "batch_R1"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in batches] == [(i, pytest.approx(v)) for i, v in enumerate(entry["batch_R1"])]

    # a single-segment trial logs its running R@1 and no segment metric
    single = next(t for t in plan.trials if t.protocol == "episodic")
    rid2 = tracker.log_trial(parent, "protos", {**entry, "key": single.key, "spec": single.to_dict(),
                                                "segments": None, "running_R1": running[:2]})
    assert sorted(m.step for m in client.get_metric_history(rid2, "running_R1")) == [16, 32]
    assert not [k for k in client.get_run(rid2).data.metrics if k.startswith("R1.seg.")]
