"""grids/full_mlvp.yaml, the paper's whole video query-shift matrix, planned over annotation files in the five real
datasets' layouts (tiny stand-ins written here: no videos, no weights are read to plan)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.grid import GridError, load_grid
from orchestrator.plan import Paths, build_plan

REPO = Path(__file__).resolve().parents[1]
FULL = REPO / "grids" / "full_mlvp.yaml"
N_TEST = {"msrvtt": 4, "activitynet": 3, "lsmdc": 2, "msvd": 2, "didemo": 3}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def stand_in_data(root: Path) -> None:
    """The annotation files each loader reads, in the authors' layouts, with N_TEST test pairs."""
    n = N_TEST
    write(root / "MSRVTT/MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id,sentence\n" + "".join(
        f"ret{i},msr{i},video{i},caption {i}\n" for i in range(n["msrvtt"])))
    write(root / "MSRVTT/MSRVTT_train.9k.csv", "video_id\nvideo100\n")
    write(root / "MSRVTT/MSRVTT_data.json", json.dumps({"sentences": [{"caption": "train", "video_id": "video100"}]}))
    anno = "".join(json.dumps({"clip_id": f"v_{i}", "text": f"paragraph {i}."}) + "\n"
                   for i in range(n["activitynet"]))
    write(root / "ActivityNet/val1_anno.jsonl", anno)
    write(root / "ActivityNet/train_anno.jsonl", json.dumps({"clip_id": "v_t", "text": "train."}) + "\n")
    rows = "".join(f"0001_Movie_00.00.0{i}.000-00.00.0{i}.900\t0\t1\t0\t1\tSomeone acts {i}.\n"
                   for i in range(n["lsmdc"]))
    write(root / "LSMDC/LSMDC16_challenge_1000_publictect.csv", rows)
    write(root / "LSMDC/LSMDC16_annos_training.csv", rows.splitlines()[0] + "\n")
    write(root / "MSVD/captions_msvd.json", json.dumps({f"vid{i}": [f"first {i}", f"second {i}"] for i in range(5)}))
    write(root / "MSVD/test_list.txt", "".join(f"vid{i}\n" for i in range(n["msvd"])))
    write(root / "MSVD/train_list.txt", "vid4\n")
    write(root / "DiDeMo/test_anno.jsonl", "".join(json.dumps({"clip_id": f"d{i}@N00", "text": f"moment {i}."}) + "\n"
                                                     for i in range(n["didemo"])))
    write(root / "DiDeMo/train_anno.jsonl", json.dumps({"clip_id": "t@N00", "text": "train."}) + "\n")


@pytest.fixture
def mlvp_env(tmp_path, monkeypatch):
    stand_in_data(tmp_path / "data")
    weights = tmp_path / "clip_vit_b32.bin"
    weights.write_bytes(b"stand-in: planning digests the file, it never loads it")
    monkeypatch.setenv("MLVP_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("MLVP_WEIGHTS", str(weights))
    return tmp_path


def test_full_grid_is_the_papers_matrix(mlvp_env):
    grid = load_grid(FULL)
    assert grid.datasets["msrvtt"].root == str(mlvp_env / "data" / "MSRVTT")  # ${MLVP_DATA} expanded
    plan = build_plan(grid, Paths.make(mlvp_env / "results"))
    perturbed = [t for t in plan.trials if t.perturbation != "clean"]
    clean = [t for t in plan.trials if t.perturbation == "clean"]
    # 12 perturbations x 5 severities x 5 datasets x 7 methods x 2 backbones, plus the clean rows
    assert len(perturbed) == 12 * 5 * 5 * 7 * 2 == 4200
    assert len(clean) == 5 * 7 * 2
    assert len({t.key for t in plan.trials}) == len(plan.trials)
    assert {t.dataset for t in plan.trials} == set(N_TEST)
    assert {t.method for t in plan.trials} == {"source", "tent", "read", "sar", "eata", "tcr", "hat_vtr"}
    assert {t.resolution for t in plan.trials} == {224} and {t.clip_model for t in plan.trials} == {"ViT-B-32"}
    # each dataset's query clips are rendered once per (perturbation, severity) and shared by its 14 trials
    assert plan.render_count() == sum(N_TEST.values()) * (12 * 5 + 1)
    assert len(plan.models) == 10 and all(m.finetune is not None for m in plan.models.values())


def test_full_grid_cli_plan_and_a_clear_error_without_the_environment(mlvp_env):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "plan", str(FULL), "--results-dir",
                          str(mlvp_env / "results")], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "4270 trials" in out.stdout and "4270 to run" in out.stdout

    env.pop("MLVP_DATA")
    out = subprocess.run([sys.executable, "-m", "orchestrator", "plan", str(FULL)], capture_output=True, text=True,
                         env=env, cwd=REPO)
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
