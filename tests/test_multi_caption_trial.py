"""Several captions per video (MSVD `captions: all`, docs/faithfulness.md: Datasets and Metrics): grouped metrics by
hand, the grid option validated at load and kept apart in the trial keys, and trials end to end through
workloads/trial.py on a tiny multi-caption MSVD (real H.264 clips, real render cache, a real micro model)."""
import json

import numpy as np
import pytest
import torch

from orchestrator.config.errors import GridError
from orchestrator.config.grid import parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from workloads.metrics import retrieval_metrics

# video -> captions: uneven groups (3, 1, 2, 3, 1 captions)
CAPTIONS = {
    "vid0": ["a red square moves left", "a red box slides to the left", "something red moving"],
    "vid1": ["a blue circle grows"],
    "vid2": ["a green stripe turns", "green lines rotating"],
    "vid3": ["a yellow dot bounces", "a small yellow ball jumping", "yellow bouncing"],
    "vid4": ["a grey background fades"],
}
GROUPS = [0, 0, 0, 1, 2, 2, 3, 3, 3, 4]     # each caption's video, in split order


# -- grouped metrics by hand ---------------------------------------------------------------------------------------
def test_v2t_scores_a_video_by_its_best_ranked_caption():
    # 3 video queries x 6 captions; captions 0,1 belong to video 0, caption 2 to video 1, captions 3,4,5 to video 2
    groups = [0, 0, 1, 2, 2, 2]
    s = np.array([[0.1, 0.8, 0.9, 0.2, 0.3, 0.0],    # video 0: best caption 1 is 2nd (caption 2 above) -> rank 2
                  [0.5, 0.4, 0.3, 0.6, 0.2, 0.1],    # video 1: its only caption 2 is 4th -> rank 4
                  [0.9, 0.1, 0.2, 0.3, 0.4, 0.8]])   # video 2: best caption 5 is 2nd -> rank 2
    m = retrieval_metrics(s, [0, 1, 2], gallery_groups=groups)
    # ranks 2, 4, 2: R@1 0; R@5 100; sorted 2, 2, 4 -> MdR 2; MnR 8/3
    assert m == pytest.approx({"R1": 0.0, "R5": 100.0, "R10": 100.0, "MdR": 2.0, "MnR": 8 / 3})
    # one caption per video (caption j of video j only) gives a different answer: video 0's caption 0 is 5th
    single = retrieval_metrics(s[:, [0, 2, 3]], [0, 1, 2])
    # columns 0, 2, 3: video 0 -> 0.1 < 0.9, 0.2 -> rank 3; video 1 -> 0.3 < 0.5, 0.6 -> 3; video 2 -> 0.3 < 0.9 -> 2
    assert single["MnR"] == pytest.approx(8 / 3) and single["R1"] == 0.0 and single["MdR"] == 3.0
    # t2v, one query per caption against the 3 videos: the transpose with gt = each caption's video
    t = s.T                                           # [6 captions, 3 videos]
    # caption 0: 0.1 (video 0) < 0.5, 0.9 -> 3; caption 1: 0.8 top -> 1; caption 2: 0.3 (video 1) < 0.9 -> 2;
    # caption 3: 0.3 (video 2) < 0.6 -> 2; caption 4: 0.4 top (0.3, 0.2) -> 1; caption 5: 0.8 top -> 1
    mt = retrieval_metrics(t, groups)
    assert mt == pytest.approx({"R1": 50.0, "R5": 100.0, "R10": 100.0, "MdR": 1.0, "MnR": 10 / 6})


def test_grouped_ties_faithful_and_corrected():
    # video query 0 with captions 0 and 2 (groups [0, 1, 0, 1]); every score tied
    s = np.full((1, 4), 0.5)
    # argsort (index order on <= 16 items): caption 0 comes first -> rank 1
    assert retrieval_metrics(s, [0], ties="argsort", gallery_groups=[0, 1, 0, 1])["R1"] == 100.0
    # caption 1 first instead (groups [1, 0, 1, 0]): rank 2 -> R@1 0
    assert retrieval_metrics(s, [0], ties="argsort", gallery_groups=[1, 0, 1, 0])["R1"] == 0.0
    # expected: t = 2 negatives, p = 2 positives tied -> P(rank 1) = 1 - 2/4 = 1/2, rank 1 + 2/3, either order
    for groups in ([0, 1, 0, 1], [1, 0, 1, 0]):
        m = retrieval_metrics(s, [0], ties="expected", gallery_groups=groups)
        assert m["R1"] == 50.0 and m["MnR"] == pytest.approx(5 / 3)


# -- the grid option -----------------------------------------------------------------------------------------------
@pytest.fixture
def msvd_root(tmp_path):
    from workloads.video_io import write_mp4

    root = tmp_path / "MSVD"
    (root / "videos").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, vid in enumerate(CAPTIONS):
        base = rng.integers(0, 256, size=(1, 32, 32, 3))
        frames = np.clip(base + 8 * np.arange(12)[:, None, None, None] * (i + 1) % 64, 0, 255).astype(np.uint8)
        write_mp4(root / "videos" / f"{vid}.mp4", frames)
    (root / "captions_msvd.json").write_text(json.dumps(CAPTIONS))
    (root / "test_list.txt").write_text("".join(f"{v}\n" for v in CAPTIONS))
    (root / "train_list.txt").write_text("".join(f"{v}\n" for v in CAPTIONS))
    return root


def _grid(root, captions=None, directions=("v2t", "t2v"), methods=("source",)):
    options = {"video_ext": ".mp4", **({"captions": captions} if captions else {})}
    return parse_grid({
        "name": "msvd_captions",
        "datasets": {"msvd": {"root": str(root), "options": options}},
        "models": {"clip_model": "mlvp-micro"},
        "backbones": ["clip4clip"],
        "methods": list(methods),
        "query_shift": {"datasets": ["msvd"], "directions": list(directions), "perturbations": [], "clean": True},
        "runtime": {"hub_k": 3},                  # at most the smallest gallery (5 clips)
    }, "msvd_captions.yaml")


def test_the_caption_protocol_is_validated_at_load_and_keys_never_mix(msvd_root, tmp_path):
    with pytest.raises(GridError, match=r"datasets\.msvd\.options: dataset 'msvd': option 'captions' must be one of "
                                        r"first, all, got 'every'"):
        _grid(msvd_root, captions="every")
    first = build_plan(_grid(msvd_root), Paths.make(tmp_path / "a", tmp_path / "cache"))
    same = build_plan(_grid(msvd_root, captions="first"), Paths.make(tmp_path / "b", tmp_path / "cache"))
    every = build_plan(_grid(msvd_root, captions="all"), Paths.make(tmp_path / "c", tmp_path / "cache"))
    # the default is the authors' first caption: the same trials as saying so
    assert [t.key for t in first.trials] == [t.key for t in same.trials]
    assert len(first.datasets["msvd"].test) == 5 and len(every.datasets["msvd"].test) == 10
    # the protocol enters the data version, hence every trial key (and render key): results never mix
    assert first.datasets["msvd"].version != every.datasets["msvd"].version
    assert not {t.key for t in first.trials} & {t.key for t in every.trials}
    assert len(first.trials) == len(every.trials) == 2


# -- trials end to end ---------------------------------------------------------------------------------------------
def _run_trials(plan, tmp_path, monkeypatch, skip=()):
    """Render the clean clips (once per video), run each trial of the plan; returns {direction: (result, what the
    trial handed to summarise: float32 scores, gt, gallery groups)}."""
    from orchestrator.planning.render_sets import plan_render_rows, render_keys
    from workloads import trial
    from workloads.render_cache import RenderCache, render_video

    cache = RenderCache(tmp_path / "render")
    rows, _ = plan_render_rows(plan, cache)
    assert [r["video_id"] for r in rows] == list(CAPTIONS)          # each video once, whatever the protocol
    for r in rows:
        if r["video_id"] not in skip:
            assert all(x["status"] == "ok" for x in render_video(r["video_path"], render_keys(
                plan, "msvd", r["video_id"]), cache))
    seen = {}
    real = trial.summarise

    def observe(scores, gt, **kw):                 # records the inputs, computes with the real function
        seen["args"] = (scores.numpy().copy(), np.asarray(gt).copy(), kw.get("gallery_groups"), kw["ties"])
        return real(scores, gt, **kw)

    monkeypatch.setattr(trial, "summarise", observe)
    ds = plan.datasets["msvd"]
    ctx = trial.TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                             dataset_options=ds.options)
    out = {}
    for spec in plan.trials:
        seen.clear()
        result = trial.run(spec, ctx)
        assert result.status == "ok", result.error
        out[spec.direction] = (result, *seen["args"])
    return out


def _best_caption_ranks(s, groups, n_videos):
    """Independent v2t rule on a tie-free matrix: 1 + the number of captions scored above a video's best caption."""
    groups = np.asarray(groups)
    best = np.array([s[v, groups == v].max() for v in range(n_videos)])
    return 1 + (s > best[:, None]).sum(axis=1)


def test_all_captions_trial_end_to_end(msvd_root, tmp_path, monkeypatch):
    every = build_plan(_grid(msvd_root, captions="all"), Paths.make(tmp_path / "r", tmp_path / "cache"))
    first = build_plan(_grid(msvd_root, captions="first"), Paths.make(tmp_path / "r1", tmp_path / "cache"))
    runs = _run_trials(every, tmp_path, monkeypatch)
    runs_first = _run_trials(first, tmp_path / "first", monkeypatch)

    # v2t: one query per video (5), gallery = the 10 captions, positives = the video's captions
    result, s, gt, groups, ties = runs["v2t"]
    assert (result.n_queries, result.n_gallery) == (5, 10) and s.shape == (5, 10)
    assert gt.tolist() == [0, 1, 2, 3, 4] and list(groups) == GROUPS and ties == "argsort"   # grid faithful: true
    assert all(len(np.unique(row)) == len(row) for row in s)        # no ties: the rules agree, ranks are exact
    r = _best_caption_ranks(s, GROUPS, 5)
    assert result.metrics["R1"] == pytest.approx(100 * np.mean(r <= 1))
    assert result.metrics["R5"] == pytest.approx(100 * np.mean(r <= 5))
    assert result.metrics["MnR"] == pytest.approx(r.mean())
    # per-batch R@1 uses the same positives (best-ranked caption): the batches average back to the trial's R@1
    sizes = np.diff(np.r_[0:5:result.spec["batch_size"], 5])
    assert np.dot(result.batch_R1, sizes) / 5 == pytest.approx(result.metrics["R1"])
    # the same video queries as the first-caption protocol (Source: no adaptation): its 5 columns are the first
    # caption of each video
    r1, s1, gt1, groups1, _ = runs_first["v2t"]
    assert (r1.n_queries, r1.n_gallery) == (5, 5) and groups1 is None and gt1.tolist() == [0, 1, 2, 3, 4]
    firsts = [GROUPS.index(v) for v in range(5)]
    np.testing.assert_allclose(s[:, firsts], s1, atol=1e-5)

    # t2v: one query per caption (10) against one clip per video (5), gt = the caption's video
    result, s, gt, groups, _ = runs["t2v"]
    assert (result.n_queries, result.n_gallery) == (10, 5) and s.shape == (10, 5)
    assert gt.tolist() == GROUPS and groups is None
    rank = 1 + (s > s[np.arange(10), gt][:, None]).sum(axis=1)
    assert result.metrics["R1"] == pytest.approx(100 * np.mean(rank <= 1))
    assert result.metrics["MnR"] == pytest.approx(rank.mean())
    r1, s1, gt1, _, _ = runs_first["t2v"]
    assert (r1.n_queries, r1.n_gallery) == (5, 5)
    np.testing.assert_allclose(s[firsts], s1, atol=1e-5)
    # Source scores a pair the same way in both directions (mean pooling, cosine)
    np.testing.assert_allclose(runs["v2t"][1], s.T, atol=1e-5)


def test_a_missing_video_drops_its_query_and_its_captions(msvd_root, tmp_path, monkeypatch):
    plan = build_plan(_grid(msvd_root, captions="all"), Paths.make(tmp_path / "r", tmp_path / "cache"))
    runs = _run_trials(plan, tmp_path, monkeypatch, skip={"vid2"})
    # v2t: vid2 is not a query; its captions stay in the gallery (as negatives for the other videos)
    result, s, gt, groups, _ = runs["v2t"]
    assert (result.n_queries, result.n_gallery) == (4, 10) and gt.tolist() == [0, 1, 3, 4]
    assert [d["video_id"] for d in result.dropped] == ["vid2"]      # listed once, not once per caption
    # t2v: vid2 is not in the gallery; its 2 captions have no match and are dropped; gt indexes the 4 clips
    result, s, gt, groups, _ = runs["t2v"]
    assert (result.n_queries, result.n_gallery) == (8, 4)
    assert gt.tolist() == [0, 0, 0, 1, 2, 2, 2, 3]
    assert [d["video_id"] for d in result.dropped] == ["vid2"]


def test_tent_adapts_on_every_caption_query(msvd_root, tmp_path, monkeypatch):
    """An adapting method on the t2v stream of all captions: 10 queries in one batch of 16, scores finite and moved
    away from Source's."""
    plan = build_plan(_grid(msvd_root, captions="all", directions=("t2v",), methods=("source", "tent")),
                      Paths.make(tmp_path / "r", tmp_path / "cache"))
    from orchestrator.planning.render_sets import render_keys
    from workloads import trial
    from workloads.render_cache import RenderCache, render_video

    cache = RenderCache(tmp_path / "render")
    for vid in CAPTIONS:
        render_video(str(msvd_root / "videos" / f"{vid}.mp4"), render_keys(plan, "msvd", vid), cache)
    ds = plan.datasets["msvd"]
    ctx = trial.TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                             dataset_options=ds.options, scores_dir=str(tmp_path / "scores"))
    results = {t.method: trial.run(t, ctx) for t in plan.trials}
    assert all(r.status == "ok" and r.n_queries == 10 and r.n_gallery == 5 for r in results.values())
    a, b = (torch.from_numpy(np.load(results[m].scores_path).astype(np.float32)) for m in ("source", "tent"))
    assert torch.isfinite(b).all() and not torch.allclose(a, b)
