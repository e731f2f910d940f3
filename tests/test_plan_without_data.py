"""`plan` and `submit --dry-run` size grids/full_mlvp.yaml before the data is on disk (issue #14 item 4):
trials by scenario, render sets, checkpoints and gallery encodings, clip counts unknown and the missing paths listed
with the variable or key to set; with annotations, the clip counts and a GPU-hours estimate from
orchestrator/planning/cost_model.py. Nothing starts: no Ray, no ledger, no MLflow store. The expected counts come from
the registries and conftest's stand-in annotations, not from literals."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import FOLDERS, N_TEST, stand_in_data, stand_in_weights
from orchestrator.planning.cost_model import CostModel, PlanCosts, estimate, uniform_render_lines
from orchestrator.planning.work import all_work
from orchestrator.config.errors import GridError
from orchestrator.config.grid import load_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import plan_for_sizing
from orchestrator.planning.describe import sizing_lines
from workloads.methods import METHODS
from workloads.perturbations.text import TEXT_PERTURBATIONS
from workloads.perturbations.video import VIDEO_PERTURBATIONS

REPO = Path(__file__).resolve().parents[1]
FULL = REPO / "grids" / "full_mlvp.yaml"
DATASETS = list(FOLDERS)                 # the five real datasets (conftest's stand-in layouts)
BACKBONES = ["clip4clip", "xpool"]


def expected_counts(grid) -> dict[str, int]:
    """Trials per scenario of full_mlvp from the registries: every video type x severity, the text types that can
    run without models (character and word level: sentence level needs assets not given), the clean rows, the QGS
    pairs and zero-shot datasets; x every method x both backbones."""
    # the hubness-suppression baselines have their own grid (Table 14: hubness_baselines.yaml), not the main matrix
    video = list(VIDEO_PERTURBATIONS.names())
    methods = [m for m in METHODS.names() if m not in ("dsl", "qb_norm", "hsm_qb_norm")]
    text = [n for n in TEXT_PERTURBATIONS.names() if TEXT_PERTURBATIONS.info(n)["level"] != "sentence"]
    qs = grid.query_shift
    # the grid asks for the whole registries, but those baselines (else these counts would not be the paper's matrix)
    assert list(qs.perturbations) == video and set(grid.methods) == set(methods)
    assert set(qs.text_perturbations) == set(TEXT_PERTURBATIONS.names()) and set(qs.datasets) == set(DATASETS)
    per_cell = len(methods) * len(BACKBONES)
    n_sev = len(qs.severities)
    n_qgs_dirs = len(grid.scenarios["cross_dataset"].config.directions)
    return {"query_shift": (len(DATASETS) * (len(video) * n_sev + len(text) + 2)) * per_cell,   # +2: clean rows
            "cross_dataset": len(grid.scenarios["cross_dataset"].config.pairs) * n_qgs_dirs * per_cell,
            "zero_shot": len(grid.scenarios["zero_shot"].config.datasets) * n_qgs_dirs * per_cell,
            "video_render_sets": len(DATASETS) * len(video) * n_sev}


def _cli(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter that also says whether Ray was imported."""
    code = ("import sys; from orchestrator.__main__ import main; rc = main(sys.argv[1:]); "
            "print('RAY_IMPORTED', 'ray' in sys.modules); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


@pytest.fixture
def no_data_env(monkeypatch):
    monkeypatch.delenv("MLVP_DATA", raising=False)
    monkeypatch.delenv("MLVP_WEIGHTS", raising=False)
    return {k: v for k, v in os.environ.items() if k not in ("MLVP_DATA", "MLVP_WEIGHTS")}


def test_full_grid_sized_without_data(no_data_env, tmp_path):
    plan = plan_for_sizing(FULL, Paths.make(tmp_path / "results"))
    want = expected_counts(plan.grid)
    by_scenario = {s: sum(t.scenario == s for t in plan.trials) for s in ("query_shift", "cross_dataset",
                                                                         "zero_shot")}
    assert by_scenario == {k: want[k] for k in by_scenario}
    perturbed = sum(1 for cells in plan.renders.values() for p, _ in cells if p != "clean")
    assert perturbed == want["video_render_sets"] == 300
    assert {d: len(c) for d, c in plan.renders.items()} == {d: want["video_render_sets"] // len(DATASETS) + 1
                                                            for d in DATASETS}
    # clip counts unknown, nothing counted as known
    assert plan.clip_counts() == {d: None for d in DATASETS} and plan.render_count() == 0
    # every missing path once, with the variable to set: five dataset roots and the CLIP weights
    assert sorted(m.key for m in plan.missing) == sorted([f"datasets.{d}.root" for d in DATASETS]
                                                         + ["models.pretrained"])
    for m in plan.missing:
        var = "MLVP_WEIGHTS" if m.key == "models.pretrained" else "MLVP_DATA"
        assert m.path.startswith("${" + var + "}") and f"export {var}=" in m.fix
    # checkpoints: one fine-tune per (backbone, dataset), the given CLIP weights shared by the zero-shot cells
    trained = {m.version for m in plan.models.values() if m.finetune is not None}
    assert len(trained) == len(DATASETS) * len(BACKBONES)
    assert len({m.version for m in plan.models.values() if m.finetune is None}) == 1
    # gallery encodings: one per (backbone, checkpoint, dataset, direction): QS, each cross pair, zero-shot
    dirs = 2
    assert len(plan.gallery_encodings()) == dirs * len(BACKBONES) * (
        len(DATASETS) + len(plan.grid.scenarios["cross_dataset"].config.pairs)
        + len(plan.grid.scenarios["zero_shot"].config.datasets))
    lines = sizing_lines(plan)
    assert any(line.startswith("GPU-hours: unknown") for line in lines)
    assert sum(line.startswith("  missing ") for line in lines) == len(plan.missing)
    # the X-Pool recipe's epochs need the train splits' pairs: without annotations every fine-tune is listed as not
    # counted, nothing is guessed
    est = estimate(PlanCosts(plan), all_work(plan))
    assert plan.grid.models.finetune.recipe == "xpool" and est.gpu_h == 0
    assert len([u for u in est.unknown if u.startswith("fine-tuning ")]) == len(trained)


def test_cli_plan_and_dry_run_without_data_start_nothing(no_data_env, tmp_path):
    results = tmp_path / "results"
    grid = plan_for_sizing(FULL, Paths.make(results)).grid
    want = expected_counts(grid)
    for args in (["plan", str(FULL)], ["submit", str(FULL), "--dry-run"]):
        out = _cli([*args, "--results-dir", str(results)], no_data_env, REPO)
        assert out.returncode == 0, out.stderr
        assert "RAY_IMPORTED False" in out.stdout
        for scenario in ("query_shift", "cross_dataset", "zero_shot"):
            assert f"  {scenario}: {want[scenario]} trials" in out.stdout
        assert f"render sets: {want['video_render_sets'] + len(DATASETS)} ({want['video_render_sets']} perturbed" \
            in out.stdout
        assert f"clips to render: unknown for {', '.join(DATASETS)}" in out.stdout
        missing = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("missing ")]
        assert len(missing) == len(DATASETS) + 1
        assert all("MLVP_DATA is not set" in line for line in missing if ".root:" in line)
        assert "GPU-hours: unknown" in out.stdout
    assert "nothing started" in out.stdout
    # nothing written: no ledger, no MLflow store
    assert not (results / "ledger").exists() and not (results / "mlflow.db").exists()
    # a real submit still stops in one line on the unset variable (before anything starts)
    out = _cli(["submit", str(FULL), "--results-dir", str(results)], no_data_env, REPO)
    assert out.returncode == 2 and "RAY_IMPORTED False" in out.stdout
    assert "datasets.msrvtt.root: environment variable MLVP_DATA is not set" in out.stderr
    with pytest.raises(GridError, match="MLVP_DATA is not set"):
        load_grid(FULL)


def test_sized_with_annotations_only_and_estimate(tmp_path, monkeypatch):
    """Annotations on disk, videos not (the terabyte): clip counts known, the videos folders listed, a GPU-hours
    figure from the cost model; one dataset's folder absent: that one unknown and listed."""
    data = tmp_path / "data"
    stand_in_data(data)
    weights = tmp_path / "w.bin"
    stand_in_weights(weights)
    monkeypatch.setenv("MLVP_DATA", str(data))
    monkeypatch.setenv("MLVP_WEIGHTS", str(weights))
    from orchestrator.planning.plan import missing_videos

    plan = plan_for_sizing(FULL, Paths.make(tmp_path / "results"))
    missing_videos(plan)
    assert plan.clip_counts() == {d: N_TEST[d] for d in DATASETS}
    cells = len(next(iter(plan.renders.values())))
    assert plan.render_count() == sum(N_TEST.values()) * cells
    assert sorted(m.key for m in plan.missing) == sorted(f"datasets.{d}.options.videos_dir" for d in DATASETS)
    assert all(" test / " in m.fix for m in plan.missing)    # test and train videos: one line per dataset

    # render cost per clip without a size term, the same for every type, fine-tuning per step in fp32 and bf16
    # alike: sums checked by hand
    cost = CostModel(trial_s_per_batch=2.0, gallery_s_per_clip=0.5, finetune_s_per_step_bf16=0.25,
                     render_lines=uniform_render_lines(3.0))
    est = estimate(PlanCosts(plan, cost), all_work(plan))
    rt, ft = plan.grid.runtime, plan.grid.models.finetune
    assert rt.gpus_per_trial == 1 and {t.precision for t in plan.trials} == {"fp32"}   # one fp32 trial per GPU
    trial_h = sum(math.ceil(N_TEST[t.dataset] / rt.batch_size) * 2.0 for t in plan.trials) / 3600
    assert est.trial_gpu_h == pytest.approx(trial_h) and est.trial_gpu_h > 0
    # packed trials share the GPU's throughput (docs/notes/2026-11-results-history.md §6): four per GPU cost more GPU
    # time, not a quarter
    packed = estimate(PlanCosts(plan, CostModel(trial_s_per_batch=2.0, trials_per_gpu=4, packed_throughput=0.8)),
                      all_work(plan))
    assert packed.trial_gpu_h == pytest.approx(trial_h / 0.8)
    bf16_plan = replace(plan, trials=[replace(t, precision="bf16") for t in plan.trials])
    bf16 = estimate(PlanCosts(bf16_plan, CostModel(trial_s_per_batch=2.0, trial_s_per_batch_bf16=0.5)),
                    all_work(bf16_plan))
    assert bf16.trial_gpu_h == pytest.approx(trial_h / 4)
    assert est.render_cpu_h == pytest.approx(plan.render_count() * 3.0 / 3600)
    assert est.gallery_gpu_h == pytest.approx(sum(N_TEST[g[2]] * 0.5 for g in plan.gallery_encodings()) / 3600)
    # fine-tuning: the X-Pool recipe, 5 epochs over each train split's pairs in batches of 32 x 12 frames, a step
    # linear in its images (from the measured 64 clips x 4 frames)
    costs = PlanCosts(plan, cost)
    made = {m.version: m for m in plan.models.values() if m.finetune is not None}.values()
    assert ft.recipe == "xpool" and all(costs.train_pairs(m.train_dataset) for m in made)
    assert est.finetune_gpu_h == pytest.approx(sum(
        5 * math.ceil(costs.train_pairs(m.train_dataset) / 32) * 0.25 * 32 * 12 / (64 * 4) for m in made) / 3600)
    assert est.gpu_h == pytest.approx(est.trial_gpu_h + est.gallery_gpu_h + est.finetune_gpu_h)
    lines = sizing_lines(plan, cost)
    assert not est.unknown and any(line.startswith("estimated ") and "GPU-hours" in line for line in lines)
    # no videos on disk: every dataset's render cost from its typical clip size, said so
    assert all(f"  {d} " in "\n".join(lines) for d in DATASETS)
    assert sum("(typical: " in line for line in lines) == len(DATASETS)

    # one dataset's annotations not there: its clips unknown, its root listed, the others estimated
    import shutil

    shutil.rmtree(data / FOLDERS["lsmdc"])
    plan = plan_for_sizing(FULL, Paths.make(tmp_path / "results"))
    assert plan.clip_counts()["lsmdc"] is None and plan.clip_counts()["msrvtt"] == N_TEST["msrvtt"]
    assert [m.key for m in plan.missing] == ["datasets.lsmdc.root"]
    line = next(line for line in sizing_lines(plan) if line.startswith("estimated "))
    assert "not counting lsmdc" in line


def test_cli_plan_with_data_prints_estimate(mlvp_env):
    env = {**os.environ}
    out = _cli(["plan", str(FULL), "--results-dir", str(mlvp_env / "results")], env, REPO)
    assert out.returncode == 0, out.stderr
    assert "RAY_IMPORTED False" in out.stdout
    assert "not on disk" not in out.stdout                      # conftest's stand-in videos are there
    line = next(li for li in out.stdout.splitlines() if "GPU-hours" in li)
    gpu_h = float(line.split("estimated ")[1].split(" GPU-hours")[0].replace(",", ""))
    assert gpu_h > 0
    cells = expected_counts(load_grid(FULL))["video_render_sets"] // len(DATASETS) + 1   # + the clean clips
    assert f"clips to render: {sum(N_TEST.values()) * cells:,}" in out.stdout
    assert all(f"{d} {n}" in out.stdout for d, n in N_TEST.items())
    # conftest's stand-in videos are on disk: the render cost reads their size (16x16, 4 frames), not a typical one
    assert all(f"  {d} 16x16, " in out.stdout for d in N_TEST) and "typical" not in out.stdout
    assert all(f"measured on {n} of your videos" in out.stdout for n in set(N_TEST.values()))
