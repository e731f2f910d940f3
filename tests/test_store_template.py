"""A new local MLflow store starts from an empty store that this MLflow version already created and migrated, kept in
the cache (orchestrator/record/mlflow_store.py `Tracker`, `empty_store_template`): MLflow's migrations run once per
cache, not once per results folder. Real stores, through MLflow's public client."""
from orchestrator.record.mlflow_store import Tracker, empty_store_template


def default_location(tracker: Tracker) -> str:
    return next(e.artifact_location for e in tracker.client.search_experiments() if e.name == "Default")


def test_the_first_new_store_becomes_the_template_and_later_ones_start_from_it(tmp_path, monkeypatch):
    templates = tmp_path / "cache" / "mlflow"
    for where in ("first", "second"):
        (tmp_path / where).mkdir()
    monkeypatch.chdir(tmp_path / "first")
    first = Tracker(f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}", tmp_path / "a", templates)
    template = empty_store_template(templates)
    assert template.is_file()
    first.client.create_experiment("mlvp/written-after")   # written after the template was taken: not in it

    # a store made elsewhere is the template's copy: MLflow names its Default experiment's artifacts after the folder
    # it was created from, and this one names the first store's
    monkeypatch.chdir(tmp_path / "second")
    second = Tracker(f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}", tmp_path / "b", templates)
    assert default_location(second) == default_location(first) and "first" in default_location(second)
    assert [e.name for e in second.client.search_experiments()] == ["Default"]   # empty: nothing of the first's

    # and it is a working store
    eid = second.client.create_experiment("mlvp/grid")
    run = second.client.create_run(eid)
    second.client.log_metric(run.info.run_id, "R1", 42.0)
    assert second.client.get_run(run.info.run_id).data.metrics == {"R1": 42.0}

    # an existing store is opened as it is, never replaced by the template
    again = Tracker(f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}", tmp_path / "b", templates)
    assert {e.name for e in again.client.search_experiments()} == {"Default", "mlvp/grid"}


def test_without_a_cache_folder_a_store_is_made_by_mlflow_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tracker = Tracker(f"sqlite:///{tmp_path / 'r' / 'mlflow.db'}", tmp_path / "r")
    assert default_location(tracker).startswith(str(tmp_path))
    assert not list(tmp_path.rglob("empty-store-*"))
