"""A searched grid end to end on the micro model: seeds as an axis, TPE proposals through Ray Tune's OptunaSearch as
normal trials (gated, keyed, in the ledger and MLflow), the label-free signals recorded per trial, the selection and
paired tables with intervals, and a re-submission that finds every proposal again and runs nothing."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import write_micro_grid

pytestmark = pytest.mark.e2e

EXTRA = """
seeds: [0, 1]
search:
  algorithm: tpe
  budget: 2
  objective: snd
  source_pairs: 16
  methods:
    tent: {lr: {loguniform: [1.0e-5, 1.0e-2]}, steps: [1, 2]}
"""


def test_searched_grid_end_to_end(tmp_path, shared_cache, worker_ray):
    from orchestrator.config.grid import load_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.record.ledger import TrialLedger
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import submit

    grid = write_micro_grid(tmp_path / "hp.yaml", name="hp", backbones="[clip4clip]", methods="[source, tent]",
                            perturbations="[gaussian_noise, impulse_noise]", severities="[5]",
                            extra=EXTRA + "\n")
    text = grid.read_text().replace("clean: true", "clean: false").replace(
        "runtime:\n", "runtime:\n  stream_order: shuffled\n")
    grid.write_text(text)
    results = tmp_path / "results"
    opts = SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache), num_cpus=2, dashboard=False)
    report = submit(str(grid), opts)
    # 2 cells x 2 seeds x (Source, Tent's own configuration, 2 TPE proposals)
    assert report.ok == 16 and report.failed == 0

    plan = build_plan(load_grid(grid), Paths.make(results, shared_cache))
    tpe = [t for t in plan.trials if t.config]
    assert len(plan.trials) == 16 and sorted({t.config for t in tpe}) == ["tpe-1", "tpe-2"]
    assert len(list((results / "hp" / "search").glob("tpe-*.json"))) == 4      # one record per stream
    entries = {e["key"]: e for e in TrialLedger(results / "ledger").entries(t.key for t in plan.trials)}
    assert set(entries) == {t.key for t in plan.trials}
    for t in plan.trials:
        e = entries[t.key]
        m = e["metrics"]
        assert {"pred_entropy", "snd", "source_R1", "uniformity_adapted"} <= set(m)
        assert np.mean(e["query_R1"]) * 100 == pytest.approx(m["R1"], abs=0.01)
        assert t.stream_order == "shuffled" and t.source_pairs == 16
    # a proposal is the stream's trial with TPE's options: the seeds' perturbation draws differ, the cell's do not
    by_seed = {s: [e for e in entries.values() if e["spec"]["seed"] == s and e["spec"]["method"] == "source"]
               for s in (0, 1)}
    assert by_seed[0][0]["metrics"]["R1"] != by_seed[1][0]["metrics"]["R1"] or \
        by_seed[0][0]["query_R1"] != by_seed[1][0]["query_R1"]

    # tables: every R@1 cell has an interval over the two seeds; the selection tables exist and mark the oracle
    qs = pd.read_parquet(results / "hp" / "qs_R1.parquet")
    assert {"gaussian_noise:low", "gaussian_noise:seed0", "gaussian_noise:seed1"} <= set(qs.columns)
    assert qs["gaussian_noise:low"].notna().all()
    sel = pd.read_parquet(results / "hp" / "hp_selection_R1.parquet")
    assert "oracle (upper bound)" in sel.columns and sel["oracle (upper bound):low"].notna().all()
    tent = sel[sel["method"] == "tent"].iloc[0]
    assert tent["oracle (upper bound)"] >= max(tent["default"], tent["snd"]) - 1e-9
    paired = pd.read_parquet(results / "hp" / "qs_R1_minus_source.parquet")
    assert list(paired["method"]) == ["tent"]
    page = (results / "hp" / "report" / "index.html").read_text()
    assert "Hyperparameter selection without test labels" in page and "±" in page

    # MLflow: each proposal a child run with its options as params of their own
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    exp = client.get_experiment_by_name("mlvp/hp")
    runs = client.search_runs([exp.experiment_id], "tags.config = 'tpe-2'")
    assert len(runs) == 4 and all("option.lr" in r.data.params for r in runs)
    assert all(r.data.tags.get("mlflow.parentRunId") for r in runs)

    # resume: the proposals are found again by their keys; nothing runs
    again = submit(str(grid), opts)
    assert again.to_run == 0
    record = json.loads(next((results / "hp" / "search").glob("tpe-*.json")).read_text())
    assert [c["name"] for c in record["configs"]] == ["tpe-1", "tpe-2"]
