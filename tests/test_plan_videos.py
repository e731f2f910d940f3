"""Missing video files are found when a grid is planned, all at once per dataset and split (count + the first ten),
not clip by clip during rendering; a split with none of its videos stops `plan` / `submit` / `check` in one line."""
import os
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.config.grid import load_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import PlanError, build_plan, missing_videos
from workloads.datasets import create_dataset

FULL = "grids/full_mlvp.yaml"


def test_plan_lists_missing_videos_per_dataset_and_fails_on_a_dataset_without_any(mlvp_env, capsys):
    data = mlvp_env / "data"
    plan = build_plan(load_grid(FULL), Paths.make(mlvp_env / "results"))
    assert missing_videos(plan) == []                     # conftest's stand-ins: every video there

    msrvtt = create_dataset("msrvtt", root=data / "MSRVTT").test_split()
    for pair in msrvtt.pairs[:2]:
        os.unlink(pair.video_path)
    gone = ", ".join(f"{p.video_id} ({p.video_path})" for p in msrvtt.pairs[:2])
    note = f"dataset 'msrvtt': 2 of 4 test videos missing: {gone} (these fail their own renders; the rest run)"
    assert missing_videos(plan) == [note]
    assert main(["plan", FULL, "--results-dir", str(mlvp_env / "results")]) == 0
    assert f"note: {note}" in capsys.readouterr().out

    # fine-tuned here: the train split's videos are checked too (the stand-in MSVD train split has one video)
    train = Path(create_dataset("msvd", root=data / "MSVD").train_split().pairs[0].video_path)
    os.unlink(train)
    with pytest.raises(PlanError, match=r"^dataset 'msvd': 1 of 1 train videos missing: vid4 "):
        missing_videos(plan)
    train.hardlink_to(data / "stand_in.mp4")

    # a dataset with none of its test videos: one line, exit status 2, before anything runs
    for pair in create_dataset("activitynet", root=data / "ActivityNet").test_split().pairs:
        os.unlink(pair.video_path)
    with pytest.raises(PlanError, match=r"^dataset 'activitynet': 3 of 3 test videos missing: v_0 \(.*\): none of "
                                        r"its test videos exist; put them there or set "
                                        r"datasets.activitynet.options.videos_dir \(or root\)$"):
        missing_videos(plan)
    capsys.readouterr()
    # `plan` sizes the grid anyway and lists the folder (tests/test_plan_without_data.py); `submit` stops
    assert main(["plan", FULL, "--results-dir", str(mlvp_env / "results")]) == 0
    assert "missing datasets.activitynet.options.videos_dir: " in capsys.readouterr().out
    assert main(["submit", FULL, "--results-dir", str(mlvp_env / "results")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: dataset 'activitynet': 3 of 3 test videos missing") and err.count("\n") == 1
    assert not Path(mlvp_env / "results" / "ledger").exists()
