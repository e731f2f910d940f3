"""Every registered TTA method (the HAT-VTR paper's seven and DeYO, training-free TCR, TITAN), both directions, both
backbones, from one grid through Ray Tune."""
import pyarrow.parquet as pq
import pytest

from conftest import write_micro_grid
from orchestrator.run.options import SubmitOptions
from orchestrator.run.submit import submit
from workloads.methods import NAMES

pytestmark = pytest.mark.e2e


def test_every_method_runs_in_both_directions_with_hubness_and_variants(tmp_path, shared_cache, worker_ray):
    methods = "[" + ", ".join(NAMES) + ", hat_vtr_fixed, hat_vtr_no_hsm]"
    grid_file = write_micro_grid(tmp_path / "methods.yaml", name="methods", methods=methods,
                                 directions="[v2t, t2v]", perturbations="[gaussian_noise]", severities="[5]",
                                 extra="""
variants:
  hat_vtr_fixed: {method: hat_vtr, faithful: false}
  hat_vtr_no_hsm: {method: hat_vtr, options: {hsm_target: false, hsm_rerank: false}}
""")
    report = submit(str(grid_file), SubmitOptions(results_dir=str(tmp_path / "results"), cache_dir=str(shared_cache),
                                                  num_cpus=2, dashboard=False))
    rows_per_direction = {"v2t": 2, "t2v": 1}  # v2t: clean + gaussian; t2v: clean
    n_labels = len(NAMES) + 2
    assert report.failed == 0 and report.ok == n_labels * 2 * sum(rows_per_direction.values())
    t = pq.read_table(tmp_path / "results" / "methods" / "trials.parquet").to_pandas()
    assert set(t["status"]) == {"ok"}
    for direction in ("v2t", "t2v"):
        part = t[t.direction == direction]
        assert set(part["method"]) == set(NAMES)
        assert set(part["row"]) == set(NAMES) | {"hat_vtr_fixed", "hat_vtr_no_hsm"}
        assert part[["R1", "hub_skewness", "hub_robin_hood", "hub_antihub_occurrence"]].notna().all().all()
    fixed = t[t.row == "hat_vtr_fixed"]
    assert set(fixed["method"]) == {"hat_vtr"} and not fixed["faithful"].any()
    assert t[t.row == "hat_vtr"]["faithful"].all()
    # the HSM re-ranks scores: with it off, HAT-VTR's k-occurrence differs from the full method on the same cell
    cell = (t.direction == "v2t") & (t.perturbation == "gaussian_noise") & (t.backbone == "clip4clip")
    full = t[cell & (t.row == "hat_vtr")].iloc[0]
    no_hsm = t[cell & (t.row == "hat_vtr_no_hsm")].iloc[0]
    assert full["key"] != no_hsm["key"]
    assert (full["hub_skewness"], full["R1"]) != (no_hsm["hub_skewness"], no_hsm["R1"])
