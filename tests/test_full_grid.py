"""grids/full_mlvp.yaml, the paper's whole matrix (video query shift and query-gallery shift), planned over
annotation files in the five real datasets' layouts (tiny stand-ins from conftest.mlvp_env: no videos, no weights are
read to plan)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import N_TEST
from orchestrator.config.errors import GridError
from orchestrator.config.grid import load_grid
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan

REPO = Path(__file__).resolve().parents[1]
FULL = REPO / "grids" / "full_mlvp.yaml"


def test_full_grid_is_the_papers_matrix(mlvp_env):
    grid = load_grid(FULL)
    assert grid.datasets["msrvtt"].root == str(mlvp_env / "data" / "MSRVTT")  # ${MLVP_DATA} expanded
    plan = build_plan(grid, Paths.make(mlvp_env / "results"))
    qs = [t for t in plan.trials if t.scenario == "query_shift"]
    perturbed = [t for t in qs if t.perturbation != "clean" and t.direction == "v2t"]
    clean = [t for t in qs if t.perturbation == "clean"]
    # 12 perturbations x 5 severities x 5 datasets x 10 methods x 2 backbones, plus the clean rows of both directions
    assert len(perturbed) == 12 * 5 * 5 * 10 * 2 == 6000
    assert len(clean) == 5 * 10 * 2 * 2
    # text query shift: the 10 character- and word-level types (the sentence-level ones need models not given
    # here: listed in the plan's notes) at the authors' severities, x 5 datasets x 10 x 2
    text = [t for t in qs if t.perturbation != "clean" and t.direction == "t2v"]
    assert len(text) == 10 * 5 * 10 * 2 == 1000
    assert {(t.perturbation, t.severity) for t in text if t.perturbation in ("ocr", "word_swap")} == {
        ("ocr", 7), ("word_swap", 2)}
    unavailable = [n for n in plan.notes if "unavailable" in n]
    assert len(unavailable) == 5 * 5
    # TITAN's causal-correction head trains on a source train split, which a zero-shot checkpoint lacks: one note per
    # zero-shot dataset, the rest of TITAN runs there
    others = [n for n in plan.notes if n not in unavailable]
    assert len(others) == 4 and all("titan" in n and "correction head is off" in n for n in others), others
    assert len({t.key for t in plan.trials}) == len(plan.trials)
    # query-gallery shift: 12 ordered pairs and 4 zero-shot datasets, both directions, clean
    cross = [t for t in plan.trials if t.scenario == "cross_dataset"]
    zero = [t for t in plan.trials if t.scenario == "zero_shot"]
    assert len(cross) == 12 * 2 * 10 * 2 == 480 and len(zero) == 4 * 2 * 10 * 2 == 160
    assert len(plan.trials) == 6000 + 200 + 1000 + 480 + 160
    assert {(t.source_dataset, t.dataset) for t in cross} == {(a, b) for a in ("msrvtt", "activitynet", "lsmdc",
                                                                               "msvd") for b in ("msrvtt",
                                                                               "activitynet", "lsmdc", "msvd")
                                                              if a != b}
    assert {t.source_dataset for t in zero} == {"pretrained"} and {t.perturbation for t in cross + zero} == {"clean"}
    # a cross-dataset cell uses its source's query-shift checkpoint
    t = next(t for t in cross if t.source_dataset == "lsmdc" and t.backbone == "xpool")
    assert t.model_version == next(q.model_version for q in qs if q.dataset == "lsmdc" and q.backbone == "xpool")
    assert {t.dataset for t in plan.trials} == set(N_TEST)
    assert {t.method for t in plan.trials} == {"source", "tent", "read", "sar", "eata", "deyo", "tcr",
                                               "tcr_untrained", "hat_vtr", "titan"}
    assert {t.resolution for t in plan.trials} == {224}
    assert {t.clip_model for t in plan.trials} == {"ViT-B-32-quickgelu"}
    # each dataset's query clips are rendered once per (perturbation, severity) and shared by its 20 trials; the
    # QGS cells need only the clean clips, which query shift renders already
    assert plan.render_count() == sum(N_TEST.values()) * (12 * 5 + 1)
    fine_tuned = [m for key, m in plan.models.items() if key.source != "pretrained"]
    assert len(fine_tuned) == 10 and all(m.finetune is not None for m in fine_tuned)
    assert plan.models[CheckpointKey("xpool", "pretrained")].given_path == grid.models.pretrained


def test_full_grid_cli_plan_and_a_clear_error_without_the_environment(mlvp_env):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "plan", str(FULL), "--results-dir",
                          str(mlvp_env / "results")], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "7840 trials" in out.stdout and "7840 to run" in out.stdout
    for line in ("query_shift: 7200 trials", "cross_dataset: 480 trials", "zero_shot: 160 trials"):
        assert line in out.stdout

    env.pop("MLVP_DATA")   # `plan` sizes the grid without it (tests/test_plan_without_data.py); `submit` stops
    out = subprocess.run([sys.executable, "-m", "orchestrator", "submit", str(FULL), "--results-dir",
                          str(mlvp_env / "results")], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 2
    assert "datasets.msrvtt.root: environment variable MLVP_DATA is not set" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_unset_variable_with_default_and_missing_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("MLVP_NOWHERE", raising=False)
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\ndatasets:\n  msrvtt: {root: '${MLVP_NOWHERE:-%s}'}\nbackbones: [clip4clip]\n"
                    "methods: [source]\nquery_shift: {datasets: [msrvtt]}\n" % (tmp_path / "absent"))
    with pytest.raises(GridError, match=r"datasets\.msrvtt\.root: directory not found: .*absent"):
        load_grid(grid)
