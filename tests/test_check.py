"""`check`: the clean retrieval of every checkpoint a grid uses, beside the paper's clean rows, and the submit gate.

- the embedded default (micro grid): no paper number, printed, results in the ledger, galleries in the cache the
  trials read (a submission after it encodes no other gallery and does not rerun the clean source cells);
- real layouts: the authors' MSRVTT 1k-A annotations (1,000 queries, the paper's protocol) and conftest's MSVD
  stand-in layout, with stand-in videos and a random (never trained) X-Pool checkpoint that cannot reach X-Pool's
  published MSRVTT t2v R@1: `check` exits 1 with the miss, `submit` refuses, `submit --force` runs the grid.
"""
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import write_micro_grid
from orchestrator.cli.main import main
from orchestrator.planning.clean_check import CheckCase, compare, paper_rows
from orchestrator.config.grid import load_grid
from orchestrator.record.ledger import TrialLedger
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.config.scenarios.base import PRETRAINED
from orchestrator.run.options import SubmitOptions
from orchestrator.run.submit import submit
from workloads.spec import CLEAN, TrialSpec

ANNOTATIONS = Path(__file__).parent / "data" / "annotations"


def _case(backbone, source, dataset, r1, n):
    spec = TrialSpec(dataset, "t2v", "query_shift", CLEAN, 0, "source", backbone)
    case = CheckCase(backbone, source, dataset, {"t2v": spec})
    case.results["t2v"] = {"status": "ok", "n_queries": n, "metrics": {"R1": r1, "R5": 50.0, "R10": 60.0}}
    return case


def test_paper_rows_and_comparison_rules():
    # in-domain X-Pool on MSRVTT t2v: X-Pool's README, two checkpoints (9k: 46.9, 7k: 43.9), the nearest compared
    c = compare(_case("xpool", "msrvtt", "msrvtt", 44.5, 1000), "t2v")
    assert sorted(r.r1 for r in c.compared) == [43.9, 46.9] and c.gap == pytest.approx(0.6) and not c.missed(5)
    c = compare(_case("xpool", "msrvtt", "msrvtt", 30.0, 1000), "t2v")
    assert c.gap == pytest.approx(30.0 - 43.9) and c.missed(5) and not c.missed(20)
    # another query count than the paper's protocol: shown, never compared
    c = compare(_case("xpool", "msrvtt", "msrvtt", 1.0, 4), "t2v")
    assert len(c.rows) == 2 and c.compared == [] and c.gap is None and not c.missed(5)
    # cross-dataset Source rows (Table 27, MSRVTT -> MSVD, 670 queries)
    c = compare(_case("clip4clip", "msrvtt", "msvd", 50.0, 670), "t2v")
    assert [r.r1 for r in c.compared] == [54.63] and c.gap == pytest.approx(50.0 - 54.63)
    # zero-shot CLIP rows are mean-pooled CLIP: clip4clip only
    assert [r.r1 for r in paper_rows(_case("clip4clip", PRETRAINED, "msrvtt", 0, 0), "t2v")] == [30.10]
    assert paper_rows(_case("xpool", PRETRAINED, "msrvtt", 0, 0), "t2v") == []
    # in-domain v2t: X-Pool's paper (44.4, compared) and the upper bound HAT-VTR's text implies (never gated)
    v2t = _case("xpool", "msrvtt", "msrvtt", 40.0, 1000)
    v2t.results["v2t"] = v2t.results.pop("t2v")
    c = compare(v2t, "v2t")
    assert [(r.r1, r.bound) for r in c.rows] == [(44.4, False), (44.9, True)] and c.gap == pytest.approx(-4.4)
    # a synthetic dataset has no paper number
    assert paper_rows(_case("xpool", "synthetic", "synthetic", 0, 0), "t2v") == []
    # MSVD in domain: the papers rank every test caption (27,763 queries t2v; 670 videos x 27,763 captions v2t),
    # the TTA protocol one caption per video: shown, never compared
    c = compare(_case("clip4clip", "msvd", "msvd", 40.0, 670), "t2v")
    assert [r.r1 for r in c.rows] == [46.2] and c.compared == [] and c.gap is None
    msvd = _case("xpool", "msvd", "msvd", 60.0, 670)
    msvd.results["v2t"] = {**msvd.results.pop("t2v"), "n_gallery": 670}
    c = compare(msvd, "v2t")
    assert [(r.queries, r.gallery) for r in c.rows] == [(670, 27763)] and c.compared == []
    # a failed clean trial is reported, not compared
    bad = _case("xpool", "msrvtt", "msrvtt", 0, 0)
    bad.results["t2v"] = {"status": "failed", "error": "RuntimeError: no usable queries\ntraceback"}
    c = compare(bad, "t2v")
    assert c.metrics is None and c.error == "RuntimeError: no usable queries" and not c.missed(5)


def test_every_in_domain_case_is_compared_with_what_is_published():
    """The 20 in-domain (backbone, dataset, direction) cases of the full matrix: each gets every published CLIP4Clip /
    X-Pool row of workloads/paper.py IN_DOMAIN (none guessed), and a measured result on the published protocol is
    compared with it."""
    from workloads import paper

    with_rows = 0
    for backbone, dataset, direction in paper.IN_DOMAIN_CASES:
        case = _case(backbone, dataset, dataset, 0.0, 0)
        published = [r for r in paper.IN_DOMAIN if (r.backbone, r.dataset, r.direction) == (backbone, dataset,
                                                                                          direction)]
        rows = [r for r in paper_rows(case, direction) if not r.bound]
        assert sorted(r.r1 for r in rows) == sorted(r.r1 for r in published), (backbone, dataset, direction)
        for r in published:   # on the row's own protocol it is compared, and a result far below it is a miss
            queries, gallery = paper.protocol(r)
            case.results[direction] = {"status": "ok", "n_queries": queries, "n_gallery": gallery,
                                       "metrics": {"R1": r.r1 - 10, "R5": 0.0, "R10": 0.0}}
            c = compare(case, direction)
            assert r.r1 in [x.r1 for x in c.compared] and c.missed(5), (backbone, dataset, direction, r.r1)
        with_rows += bool(published)
    assert with_rows == 12 and len(paper.IN_DOMAIN_CASES) == 20


@pytest.mark.e2e
def test_check_on_the_embedded_default_feeds_the_ledger_and_the_trials_gallery_cache(
        tmp_path, shared_cache, worker_ray, capsys):
    # ~60 s here: Ray twice (the first check, submit), micro checkpoints and clips from the session cache when
    # built already
    grid_file = write_micro_grid(tmp_path / "chk.yaml", name="chk", perturbations="[gaussian_noise]",
                                 severities="[1]")
    results = tmp_path / "results"
    common = ["--results-dir", str(results), "--cache-dir", str(shared_cache)]
    assert main(["check", str(grid_file), *common, "--num-cpus", "2"]) == 0
    out = capsys.readouterr().out
    plan = build_plan(load_grid(grid_file), Paths.make(results, shared_cache))
    ledger = TrialLedger(results / "ledger")
    for backbone in ("clip4clip", "xpool"):
        block = out[out.index(f"{backbone} fine-tuned on synthetic"):]
        for d in ("v2t", "t2v"):
            line = re.search(rf"{d}  R@1 +([\d.]+)  R@5 +([\d.]+)  R@10 +([\d.]+)  40 queries  paper: no clean "
                             r"number for this setting", block)
            assert line, block
            spec = next(t for t in plan.trials if t.backbone == backbone and t.perturbation == CLEAN
                        and t.method == "source")
            entry = ledger.get(replace(spec, direction=d).key)
            assert entry["status"] == "ok" and entry["n_queries"] == 40
            assert [float(x) for x in line.groups()] == [round(entry["metrics"][k], 1) for k in ("R1", "R5", "R10")]
    def gallery_files():   # the galleries; the shifted queries' embeddings each trial caches for its diagnostics
        return {p.name for p in (shared_cache / "gallery").glob("synthetic-*.pt") if "-queries-" not in p.name}

    galleries = gallery_files()
    assert {tuple(n.split("-")[1:3]) for n in galleries} >= {(b, d) for b in ("clip4clip", "xpool")
                                                             for d in ("v2t", "t2v")}
    # a second check reads the ledger: nothing is encoded, and Ray is not started
    from orchestrator.run import ray_env

    def no_ray(*args, **kwargs):
        raise AssertionError("check started Ray with every checkpoint made and every clean result in the ledger")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray_env, "start_ray", no_ray)
        assert main(["check", str(grid_file), *common, "--num-cpus", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("queries (ledger)") == 4
    # the grid's trials: the clean source cells are done (by check), the rest read the same cached galleries
    clean_source = {t.key for t in plan.trials if t.perturbation == CLEAN and t.method == "source"}
    assert len(clean_source) == 2 and all(ledger.status(k) == "ok" for k in clean_source)
    report = submit(str(grid_file), SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache),
                                                  num_cpus=2, dashboard=False))
    assert report.to_run == 6 and report.ok == 6 and report.failed == 0   # 8 cells, 2 done by check
    assert gallery_files() == galleries
    assert all(r.case.reused[r.direction] for r in report.check.comparisons)


def _stand_in_videos(tmp_path: Path, video_paths) -> None:
    from workloads.video_io import write_mp4

    rng = np.random.default_rng(0)
    source = tmp_path / "stand_in.mp4"
    write_mp4(source, rng.integers(0, 255, (6, 32, 32, 3), dtype=np.uint8))
    for p in video_paths:
        Path(p).parent.mkdir(parents=True, exist_ok=True)
        if not Path(p).exists():
            Path(p).hardlink_to(source)


REAL_GRID = """
name: real
datasets:
  msrvtt: {{root: {msrvtt}, options: {{videos_dir: {videos}/msrvtt}}}}
  msvd: {{root: "${{MLVP_DATA}}/MSVD", options: {{videos_dir: {videos}/msvd}}}}
models:
  clip_model: mlvp-micro
  checkpoints:
    xpool: {{msrvtt: {ckpt}, msvd: {ckpt}}}
backbones: [xpool]
methods: [source, tent]
query_shift:
  datasets: [msrvtt, msvd]
  directions: [t2v]
  perturbations: []
  clean: true
runtime: {{cpus_per_trial: 1, batch_size: 64, hub_k: 1}}   # hub_k <= the 2-video MSVD gallery
"""


@pytest.mark.e2e
def test_check_and_the_submit_gate_on_real_layouts(mlvp_env, capsys):
    # ~90 s here: 1,000 + 2 stand-in clips rendered once, Ray three times (check, refused submit, forced submit: the
    # clean source cells come from the check's ledger entries, Tent's run; the second check reads the ledger)
    from workloads.backbones import create_backbone, save_backbone
    from workloads.datasets import create_dataset

    ckpt = mlvp_env / "xpool-random.pt"
    save_backbone(create_backbone("xpool", "mlvp-micro"), ckpt)   # never trained: R@1 ~ chance (0.1%)
    videos = mlvp_env / "videos"
    grid_file = mlvp_env / "real.yaml"
    grid_file.write_text(REAL_GRID.format(msrvtt=ANNOTATIONS / "MSRVTT", videos=videos, ckpt=ckpt))
    msrvtt = create_dataset("msrvtt", root=ANNOTATIONS / "MSRVTT", videos_dir=str(videos / "msrvtt")).test_split()
    msvd = create_dataset("msvd", root=mlvp_env / "data" / "MSVD", videos_dir=str(videos / "msvd")).test_split()
    _stand_in_videos(mlvp_env, [p.video_path for p in msrvtt.pairs + msvd.pairs])
    results = mlvp_env / "results"
    common = ["--results-dir", str(results), "--num-cpus", "2"]

    assert main(["check", str(grid_file), *common]) == 1
    out = capsys.readouterr().out
    block = out[out.index("xpool fine-tuned on msrvtt"):out.index("xpool fine-tuned on msvd")]
    r1 = float(re.search(r"t2v  R@1 +([\d.]+) .* 1000 queries", block).group(1))
    assert r1 < 5
    assert "(checkpoint trained on MSRVTT-9k))" in block and "MISS" in block
    assert re.search(rf"warning: xpool fine-tuned on msrvtt t2v: clean R@1 {r1:.1f} is [\d.]+ points below the "
                     r"paper's 43.9 \(X-Pool README", out)
    # v2t: X-Pool's paper number (44.4) is compared too, HAT-VTR's implied bound is shown beside it
    assert re.search(r"paper: R@1  44.4 .*Table 1.*MISS", block) and "paper: R@1 below 44.9" in block
    # the stand-in MSVD layout (2 queries): X-Pool's MSVD number is shown, not compared (27,763-caption protocol)
    msvd_block = out[out.index("xpool fine-tuned on msvd"):]
    assert "2 queries" in msvd_block and "not compared: 27763 queries x 670 in that protocol, 2 x 2 here" in msvd_block
    # a wide enough tolerance passes (compared again from the ledger)
    assert main(["check", str(grid_file), *common, "--tolerance", "50"]) == 0
    capsys.readouterr()

    # submit refuses (orchestrator/stages/check.py CheckFailed): one line, exit status 2, before any table or trial
    assert main(["submit", str(grid_file), *common, "--no-dashboard"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and re.match(r"error: xpool fine-tuned on msrvtt (t2v|v2t): clean R@1 .* pass --force",
                                         errors[0]), errors
    assert not (results / "real" / "trials.parquet").exists()
    ledger = TrialLedger(results / "ledger")
    plan = build_plan(load_grid(grid_file), Paths.make(results))
    assert [ledger.status(t.key) for t in plan.trials if t.method == "tent"] == ["missing", "missing"]

    report = submit(str(grid_file), SubmitOptions(results_dir=str(results), num_cpus=2, dashboard=False, force=True))
    assert report.check.misses() and report.failed == 0
    assert len(plan.trials) == 4 and all(ledger.status(t.key) == "ok" for t in plan.trials)
    assert (results / "real" / "trials.parquet").is_file()


def test_the_report_shows_clean_cells_beside_the_papers():
    """orchestrator/report/clean.py: each clean Source cell with a published counterpart, ours and the nearest
    published R@1 on the same protocol and the difference; a number published on another protocol is not compared
    (missing), a failed cell is failed, a dataset without published numbers is not listed."""
    import pandas as pd

    from orchestrator.report.clean import clean_table

    base = {"perturbation": CLEAN, "row": "source", "R5": 60.0, "R10": 70.0, "error": None, "n_gallery": None,
            "source_dataset": ""}
    df = pd.DataFrame([
        {**base, "backbone": "xpool", "dataset": "msrvtt", "direction": "t2v", "status": "ok", "R1": 46.0,
         "n_queries": 1000},
        {**base, "backbone": "clip4clip", "dataset": "msvd", "direction": "t2v", "status": "ok", "R1": 40.0,
         "n_queries": 670},
        {**base, "backbone": "clip4clip", "dataset": "msrvtt", "direction": "v2t", "status": "failed", "R1": None,
         "n_queries": None, "error": float("nan")},   # NaN where the ledger has no error text (a table row)
        {**base, "backbone": "xpool", "dataset": "synthetic", "direction": "t2v", "status": "ok", "R1": 80.0,
         "n_queries": 256},
        {**base, "backbone": "xpool", "dataset": "msrvtt", "direction": "t2v", "status": "ok", "R1": 10.0,
         "n_queries": 1000, "row": "tent"},
    ])
    df["backbone_label"] = df["backbone"]   # planned_rows' column: a backbone variant's name, else the backbone
    t = clean_table(df)
    assert [r[1] for r in t.rows] == ["in_domain: msrvtt t2v", "in_domain: msvd t2v", "in_domain: msrvtt v2t"]
    ours, paper, diff = t.columns
    xpool = ("xpool", "in_domain: msrvtt t2v")
    assert (t.cell(xpool, ours).value, t.cell(xpool, paper).value) == (46.0, 46.9)   # the nearest of 46.9 / 43.9
    assert t.cell(xpool, diff).value == pytest.approx(-0.9)
    msvd = ("clip4clip", "in_domain: msvd t2v")   # published on 27,763 caption queries: not compared
    assert t.cell(msvd, ours).value == 40.0 and t.cell(msvd, paper).state == "missing"
    assert t.cell(("clip4clip", "in_domain: msrvtt v2t"), ours).state == "failed"
    assert clean_table(df[df["dataset"] == "synthetic"]) is None
