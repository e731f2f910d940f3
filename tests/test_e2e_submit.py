"""End to end through the real stack: Ray Data render, Ray Tune trials, MLflow (sqlite), Parquet tables."""
import os

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.record.ledger import TrialLedger
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.planning.render_sets import plan_render_rows
from orchestrator.report import outputs
from orchestrator.run.options import SubmitOptions
from orchestrator.run.submit import Submission, submit
from workloads.render_cache import RenderCache

pytestmark = pytest.mark.e2e


def test_submit_runs_every_cell_logs_mlflow_writes_tables_and_resubmit_reuses(
        tmp_path, shared_cache, worker_ray, monkeypatch):
    # written as a large grid's are: by a child process, started at the first trial result (report/outputs.py)
    monkeypatch.setattr(outputs, "APART_FROM_TRIALS", 10)
    grid_file = write_micro_grid(tmp_path / "micro.yaml")
    results = tmp_path / "results"
    opts = SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache), num_cpus=2, dashboard=False)
    plan = build_plan(load_grid(grid_file), Paths.make(results, shared_cache))
    # the session cache is shared: tests that ran earlier may already hold some of these clips
    _, cached_before = plan_render_rows(plan, RenderCache(plan.paths.render))

    report = submit(str(grid_file), opts)
    # (clean + 2 perturbations x 2 severities) x 2 backbones x 2 methods
    assert len(plan.trials) == 20 and report.to_run == 20 and report.ok == 20 and report.failed == 0
    # 40 videos x 5 cells: each clip rendered exactly once across the session, the rest reused
    assert report.render.rendered == 40 * 5 - cached_before and report.render.reused == cached_before
    assert report.render.failed == 0

    # ledger: every cell ok, with metrics and an MLflow run id
    ledger = TrialLedger(results / "ledger")
    entries = [ledger.get(t.key) for t in plan.trials]
    assert all(e["status"] == "ok" and list(e["mlflow_runs"]) == [report.tracking_uri] for e in entries)
    assert all(e["n_queries"] == 40 and e["n_gallery"] == 40 for e in entries)
    # the tables' child process was up before the last trial was recorded: its start did not wait for the trials
    assert report.outputs.writer_pid not in (None, os.getpid())
    assert report.outputs.writer_started < max(e["recorded_at"] for e in entries)

    # Parquet: one row per trial with the axes and metrics
    table = pq.read_table(results / "micro" / "trials.parquet").to_pandas()
    assert len(table) == 20 and set(table["status"]) == {"ok"}
    for col in ("dataset", "direction", "perturbation", "severity", "method", "backbone", "R1", "R5", "R10", "MdR",
                "MnR", "hub_skewness"):
        assert col in table.columns
    assert set(table["perturbation"]) == {"clean", "gaussian_noise", "impulse_noise"}
    assert ((table["R1"] >= 0) & (table["R1"] <= 100)).all()
    # QS table in Table 1's layout: rows backbone x method, columns perturbation + Avg + Clean
    qs = pq.read_table(results / "micro" / "qs_R1.parquet").to_pandas()
    cols = ["gaussian_noise", "impulse_noise", "Avg", "Clean"]
    # each cell with its 95% interval: one seed, so a bootstrap over the queries' R@1 (orchestrator/config/tables.py)
    assert list(qs.columns) == ["dataset", "direction", "severity", "backbone", "method", *cols,
                                *(f"{c}:state" for c in cols), *(f"{c}:{e}" for c in cols for e in ("low", "high"))]
    assert ((qs["Avg:low"] <= qs["Avg"]) & (qs["Avg"] <= qs["Avg:high"])).all()
    assert (qs[[f"{c}:state" for c in cols]] == "ok").all().all()
    assert len(qs) == 2 * 2 * 2  # 2 severities x 2 backbones x 2 methods
    row = qs[(qs.severity == 5) & (qs.backbone == "xpool") & (qs.method == "tent")].iloc[0]
    assert row["Avg"] == pytest.approx((row["gaussian_noise"] + row["impulse_noise"]) / 2)

    # MLflow: a parent run for the submission with 20 child runs carrying the params and metrics
    client = MlflowClient(tracking_uri=report.tracking_uri)
    exp = client.get_experiment_by_name("mlvp/micro")
    # MLflow 3's UI opens untagged experiments in its GenAI (traces) view; ours must open on the runs table
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    parent = client.get_run(report.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials_ok"] == 20
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{report.parent_run_id}'",
                                  max_results=100)
    assert len(children) == 20
    for run in children:
        p, m = run.data.params, run.data.metrics
        assert {"dataset", "direction", "scenario", "perturbation", "severity", "method", "backbone",
                "seed"} <= set(p)
        assert {"R1", "R5", "R10", "MdR", "MnR", "hub_skewness"} <= set(m)
        assert run.info.status == "FINISHED"
    by_key = {r.data.tags["mlvp.trial_key"]: r for r in children}
    e = entries[0]
    assert by_key[e["key"]].data.metrics["R1"] == pytest.approx(e["metrics"]["R1"])
    assert e["mlflow_runs"][report.tracking_uri] == by_key[e["key"]].info.run_id
    artifacts = [a.path for a in client.list_artifacts(report.parent_run_id, "tables")]
    assert "tables/trials.parquet" in artifacts

    # second submission: nothing trains, renders or runs again; Ray is neither started nor joined, no empty parent
    # run is added (the store already holds every trial), and the tables are rebuilt from the ledger
    (results / "micro" / "trials.parquet").unlink()
    with Submission(str(grid_file), opts) as sub:
        again = sub.run()
        assert sub.ray_info == {} and sub.tracker is None   # start_ray never called, no tracker process started
    assert again.to_run == 0 and again.render is None and again.parent_run_id is None
    assert len(pq.read_table(results / "micro" / "trials.parquet")) == 20
    assert len(client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'submission'")) == 1


def test_a_finetune_every_trial_waits_for_trains_on_the_whole_node_after_the_render_sets(
        tmp_path, shared_cache, worker_ray):
    """On one node with CPU trials, the render sets come first, then the clip4clip fine-tune every trial waits for
    takes both CPUs (two torch threads, in its record), and the X-Pool fine-tune that starts from it gets the usual
    share beside the first trials (orchestrator/planning/resources.py `first_finetune_cpus`)."""
    import json

    from conftest import private_cache
    from workloads.backbones import load_checkpoint

    grid_file = write_micro_grid(tmp_path / "node.yaml", name="node", methods="[source]",
                                 perturbations="[gaussian_noise]", severities="[5]")
    cache = private_cache(tmp_path / "cache", shared_cache, share=("datasets",))   # models made here, not reused
    results = tmp_path / "results"
    report = submit(str(grid_file), SubmitOptions(results_dir=str(results), cache_dir=str(cache), num_cpus=2,
                                                  dashboard=False))
    assert report.ok == 4 and report.failed == 0
    plan = build_plan(load_grid(grid_file), Paths.make(results, cache))
    threads = {key.backbone: json.loads(load_checkpoint(str(plan.model_path(key)))["record"])["threads"]
               for key in plan.models}
    assert threads == {"clip4clip": 2, "xpool": 1}
    # every render set was ready before the clip4clip checkpoint existed
    made = plan.model_path(CheckpointKey("clip4clip", "synthetic")).stat().st_mtime
    sets = {k: t for k, t in report.timeline.items() if k.startswith("render:")}
    assert len(sets) == 2 and all(t < made for t in sets.values()), (sets, made)


def test_dry_run_counts_without_starting_ray(tmp_path, shared_cache):
    import ray

    grid_file = write_micro_grid(tmp_path / "g.yaml", name="dry", methods="[source]", backbones="[clip4clip]")
    report = submit(str(grid_file), SubmitOptions(results_dir=str(tmp_path / "r"), cache_dir=str(shared_cache),
                                                  dry_run=True))
    assert len(report.plan.trials) == 5 and report.plan.render_count() == 40 * 5
    assert not ray.is_initialized()
    assert not (tmp_path / "r" / "ledger").exists()
