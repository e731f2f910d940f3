"""A submission logged to a real `mlflow server` over HTTP (what `mlflow ui` / a team server shows)."""

import pytest
from mlflow.tracking import MlflowClient

from conftest import free_port, start_mlflow_server, stop_mlflow_server, write_micro_grid
from orchestrator.run.options import SubmitOptions
from orchestrator.run.submit import submit

pytestmark = pytest.mark.e2e


@pytest.fixture
def mlflow_server(tmp_path):
    store = tmp_path / "server"
    store.mkdir()
    port = free_port()
    proc = start_mlflow_server(f"sqlite:///{store / 'mlflow.db'}", store / "server.log", port,
                               artifact_root=store / "artifacts", timeout=90)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_mlflow_server(proc)


def test_submit_logs_parent_and_children_to_a_tracking_server(tmp_path, shared_cache, mlflow_server):
    grid_file = write_micro_grid(tmp_path / "srv.yaml", name="srv", backbones="[clip4clip]", methods="[source, tent]",
                                 perturbations="[gaussian_noise]", severities="[3]")
    report = submit(str(grid_file), SubmitOptions(results_dir=str(tmp_path / "results"), cache_dir=str(shared_cache),
                                                  tracking_uri=mlflow_server, num_cpus=2, dashboard=False))
    assert report.ok == 4 and report.failed == 0
    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.get_experiment_by_name("mlvp/srv")
    runs = client.search_runs([exp.experiment_id], max_results=50)
    parents = [r for r in runs if r.data.tags.get("mlvp.kind") == "submission"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == report.parent_run_id]
    assert [p.info.run_id for p in parents] == [report.parent_run_id]
    assert len(children) == 4
    assert {c.data.params["method"] for c in children} == {"source", "tent"}
    assert {c.data.params["perturbation"] for c in children} == {"clean", "gaussian_noise"}
    assert all("R1" in c.data.metrics and "MnR" in c.data.metrics for c in children)
    # artifacts went through the server: the k-occurrence histogram of a trial and the parent's tables
    assert "k_occurrence.json" in [a.path for a in client.list_artifacts(children[0].info.run_id)]
    assert "tables/trials.parquet" in [a.path for a in client.list_artifacts(report.parent_run_id, "tables")]

    # the same ledger, a second store: `sync` logs every trial there once; the server gets nothing twice
    from orchestrator.cli.main import main
    from orchestrator.record.mlflow_store import default_tracking_uri

    common = ["--results-dir", str(tmp_path / "results"), "--cache-dir", str(shared_cache)]
    assert main(["sync", str(grid_file), *common]) == 0
    local = MlflowClient(default_tracking_uri(tmp_path / "results"))
    local_runs = local.search_runs([local.get_experiment_by_name("mlvp/srv").experiment_id],
                                   "tags.`mlvp.kind` = 'trial'")
    assert len(local_runs) == 4
    assert main(["sync", str(grid_file), *common, "--tracking-uri", mlflow_server]) == 0
    assert len(client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'")) == 4
