"""Trials end to end (workloads/trial.py, no Ray) on the micro synthetic dataset: TCR's uniformity and modality gap
of the clean, shifted and adapted queries on every result (docs/faithfulness.md: Diagnostics), their caches, and
what a trial of a method derived from its paper (TITAN) or learning from the source split records."""
import pytest

from orchestrator.config.grid import parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from workloads.metrics import DIAGNOSTIC_METRICS

GRID = {
    "name": "diagnostics",
    "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip"],
    "methods": ["source", "tent", "tcr_untrained", "titan", "titan_cf"],
    "variants": {"titan_cf": {"method": "titan", "options": {"beta": 2, "source_pairs": 24, "source_steps": 5}}},
    "query_shift": {"datasets": ["synthetic"], "directions": ["v2t", "t2v"], "perturbations": ["gaussian_noise"],
                    "severities": [5]},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory, shared_cache):
    from orchestrator.planning.render_sets import render_keys
    from workloads.render_cache import RenderCache, render_video
    from workloads.trial import TrialContext, run

    tmp = tmp_path_factory.mktemp("diagnostics")
    plan = build_plan(parse_grid(GRID, "diagnostics.yaml"), Paths.make(tmp / "results", shared_cache))
    cache = RenderCache(tmp / "render")
    ds = plan.datasets["synthetic"]
    for pair in ds.test.pairs:
        assert all(s["status"] == "ok" for s in render_video(pair.video_path, render_keys(plan, "synthetic",
                                                                                          pair.video_id), cache))
    ctx = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root, dataset_options=ds.options,
                       gallery_cache=str(tmp / "gallery"))
    out = {(t.direction, t.method_label, t.cell): run(t, ctx) for t in plan.trials}
    assert all(r.status == "ok" for r in out.values()), {k: r.error for k, r in out.items() if r.status != "ok"}
    return out, tmp / "gallery", plan, ctx


def test_every_trial_reports_the_six_diagnostics(results):
    out, _, _, _ = results
    for (direction, row, cell), r in out.items():
        assert set(DIAGNOSTIC_METRICS) <= set(r.metrics), (direction, row, cell)
        assert all(0 <= r.metrics[f"uniformity_{s}"] <= 1 and 0 <= r.metrics[f"modality_gap_{s}"] <= 2
                   for s in ("clean", "shifted", "adapted"))
        assert r.timings["diagnostics_s"] > 0
        if cell == "clean":   # the trial's queries are the clean ones
            assert r.metrics["uniformity_shifted"] == r.metrics["uniformity_clean"]
        else:
            assert r.metrics["uniformity_shifted"] != r.metrics["uniformity_clean"]
    for direction, cell in (("v2t", "clean"), ("v2t", "gaussian_noise-5"), ("t2v", "clean")):
        # the unadapted stages do not depend on the method; Source scores them as they are
        rows = [out[(direction, row, cell)] for row in ("source", "tent", "tcr_untrained", "titan")]
        assert len({(r.metrics["uniformity_clean"], r.metrics["uniformity_shifted"],
                     r.metrics["modality_gap_shifted"]) for r in rows}) == 1
        src = out[(direction, "source", cell)].metrics
        assert src["uniformity_adapted"] == pytest.approx(src["uniformity_shifted"], abs=1e-6)
        assert src["modality_gap_adapted"] == pytest.approx(src["modality_gap_shifted"], abs=1e-6)
        # training-free TCR scales the queries about their centre by 2 (Eq. 12): more uniform
        tcr = out[(direction, "tcr_untrained", cell)].metrics
        assert tcr["uniformity_adapted"] > tcr["uniformity_shifted"]
    # the clean gap is between the same two sets (clean videos, clean captions) in both directions
    assert out[("v2t", "source", "clean")].metrics["modality_gap_clean"] == pytest.approx(
        out[("t2v", "source", "clean")].metrics["modality_gap_clean"], abs=1e-5)


def test_diagnostic_features_are_cached_beside_the_galleries(results):
    out, gallery, _, _ = results
    kinds = sorted(p.name.split("-")[2:-1] for p in gallery.iterdir())
    # the galleries of both directions (each the other's clean queries), the shifted queries of the one perturbed
    # cell (v2t gaussian noise; a clean cell's queries are the clean ones), and the source pairs of the two TITAN
    # rows (all 96 train videos, and 24)
    assert kinds == [["source"], ["source"], ["t2v"], ["v2t"], ["v2t", "queries"]]


def test_titan_trials_say_what_is_paper_derived_and_which_stand_ins_ran(results):
    out, _, _, _ = results
    for direction in ("v2t", "t2v"):
        r = out[(direction, "titan", "clean")]
        assert r.method_faithful is False and any("no authors' code" in n for n in r.notes)
        assert "titan: confounders = k-means of source video features (stand-in for detectors)" in r.fallbacks
        assert not any("head off" in f for f in r.fallbacks)            # the micro dataset has a train split
        assert r.timings["source_s"] > 0
        assert {"titan_pseudo_label_acc", "titan_argmax_label_acc"} <= set(r.metrics)
    assert any("symmetric variant" in f for f in out[("v2t", "titan", "clean")].fallbacks)
    # t2v: captions reach the method; at beta 2 the hubs' queries get counterfactual versions
    assert out[("t2v", "titan_cf", "clean")].metrics["titan_counterfactual_queries"] > 0
    assert out[("t2v", "titan", "clean")].metrics["titan_counterfactual_queries"] == 0   # beta 30 > 40 queries' hubs
    for key in (("v2t", "source", "clean"), ("t2v", "tent", "clean")):
        assert out[key].method_faithful is True and out[key].notes == []


def test_titan_without_a_source_split_runs_with_its_head_off(results):
    import dataclasses

    from workloads.trial import run

    _, _, plan, ctx = results
    spec = next(t for t in plan.trials if t.method == "titan" and t.direction == "t2v" and t.cell == "clean")
    zero_shot = dataclasses.replace(spec, source_dataset="pretrained")
    r = run(zero_shot, ctx)
    assert r.status == "ok"
    assert "titan: bias-correction head off (a zero-shot checkpoint has no source train split)" in r.fallbacks


def test_source_pairs_are_distinct_videos_evenly_spaced():
    from workloads.datasets.base import Split, VideoTextPair
    from workloads.trial import source_split_rows

    # 6 videos with 2 captions each (the synthetic train layout): rows 0, 2, ..., 10 are each video's first
    split = Split("d", "train", tuple(VideoTextPair(f"v{i // 2}", f"c{i}", "") for i in range(12)))
    assert source_split_rows(split, 100) == [0, 2, 4, 6, 8, 10]
    assert source_split_rows(split, 3) == [0, 4, 10]        # videos 0, 2 (2.5 rounded half to even) and 5
    assert source_split_rows(split, 1) == [0]
