"""The embedded synthetic dataset: real .mp4 files read back through decord, OpenCV and the MSRVTT loader,
determinism, compositional test captions, caching, motion trails and the two domains. Small instances only (32 px)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from workloads.datasets import DatasetError, create_dataset
from workloads.datasets import synthetic as S
from workloads.video_io import read_frames, read_video

# version 1 (`synthetic`, the embedded default) below; version 2 (`synthetic_v2`, issue #12's candidate) at the end
V1 = "synthetic"
SMALL = dict(seed=0, n_train=60, n_test=24, size=32, num_frames=16, fps=8)
ANNOTATIONS = (S.TEST_CSV, S.TRAIN_CSV, S.DATA_JSON, S.ATTRIBUTES, S.MANIFEST)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    ds = create_dataset(V1, root=str(root), **SMALL)
    ds.prepare()
    return ds


def _words(caption: str) -> list[str]:
    return caption.replace(",", " ").split()


def test_layout_and_videos_decode(small):
    d = small.data_dir
    assert d.parent.name and d.name == f"{V1}-{S.config_digest(small.config)}"
    for name in ANNOTATIONS + ("README.txt",):
        assert (d / name).is_file(), name
    test, train = small.test_split(), small.train_split()
    assert len(test) == 24 and len(train) == 120  # 2 captions per train video
    assert len(set(train.video_ids)) == 60
    assert small.missing_videos("test") == [] and small.missing_videos("train") == []
    import cv2
    import decord  # decord itself, not only workloads.video_io (which can fall back to PyAV)

    for pair in test.pairs[:4]:
        assert pair.video_path == str(d / "videos" / f"{pair.video_id}.mp4")
        vr = decord.VideoReader(pair.video_path, ctx=decord.cpu(0), num_threads=1)
        assert vr.get_batch(list(range(len(vr)))).asnumpy().shape == (16, 32, 32, 3)
        ours = read_video(pair.video_path)
        assert ours.shape == (16, 32, 32, 3)
        cap = cv2.VideoCapture(pair.video_path)  # the authors' reader: the same frames, pixel for pixel
        theirs = []
        while (got := cap.read())[0]:
            theirs.append(got[1][..., ::-1])
        cap.release()
        assert np.array_equal(np.stack(theirs), ours)
        frames = read_frames(pair.video_path, 12)
        assert frames.shape == (12, 32, 32, 3) and frames.dtype == np.uint8
        assert frames.std() > 5  # not blank


def test_msrvtt_loader_reads_the_files(small):
    d = small.data_dir
    header = (d / S.TEST_CSV).read_text().splitlines()[0]
    assert header == "key,vid_key,video_id,sentence"
    assert (d / S.TRAIN_CSV).read_text().splitlines()[0] == "video_id"
    data = json.loads((d / S.DATA_JSON).read_text())
    assert {"caption", "video_id"} <= set(data["sentences"][0])
    msrvtt = create_dataset("msrvtt", root=str(d))
    for split in ("test", "train"):
        a, b = msrvtt.split(split), small.split(split)
        assert [(p.video_id, p.caption, p.video_path) for p in a.pairs] == \
               [(p.video_id, p.caption, p.video_path) for p in b.pairs]
    # test pairs come in generation order, one per video
    assert small.test_split().video_ids == [f"syna_test_{i:05d}" for i in range(24)]


def test_test_captions_distinct_unseen_and_covered(small):
    test, train = small.test_split(), small.train_split()
    assert len(set(test.captions)) == len(test)
    assert not set(test.captions) & set(train.captions)
    # no train video shows a test combination, in any phrasing
    attrs = small.attributes()
    assert len(attrs) == 84 and [a["video_id"] for a in attrs[:24]] == test.video_ids
    test_keys = {S._combo_key(a) for a in attrs if a["split"] == "test"}
    assert not test_keys & {S._combo_key(a) for a in attrs if a["split"] == "train"}
    # ... yet every word of every test caption occurs in training
    train_words = {w for c in train.captions for w in _words(c)}
    assert {w for c in test.captions for w in _words(c)} <= train_words
    # captions name the attributes recorded for the video
    for a, cap in zip(attrs[:24], test.captions):
        for o in a["objects"]:
            assert f"a {o['size']} {o['colour']} {o['shape']}" in cap
        assert f"{a['background']['colour']} {a['background']['pattern']} background" in cap


def test_same_seed_identical_other_seed_differs(tmp_path, small):
    cfg = S.SyntheticConfig(**SMALL)
    S.generate(tmp_path / "one", cfg, workers=1)
    S.generate(tmp_path / "two", cfg, workers=2)  # worker count must not change the output
    for out in ("one", "two"):
        for name in ANNOTATIONS:
            assert (tmp_path / out / name).read_bytes() == (small.data_dir / name).read_bytes(), (out, name)
    for vid in small.test_split().video_ids + small.train_split().video_ids[::10]:
        ref = read_video(small.data_dir / "videos" / f"{vid}.mp4")
        for out in ("one", "two"):
            path = tmp_path / out / "videos" / f"{vid}.mp4"
            assert path.read_bytes() == (small.data_dir / "videos" / f"{vid}.mp4").read_bytes()
            np.testing.assert_array_equal(read_video(path), ref)

    other = S.sample_clips(replace(cfg, seed=1))
    assert [c["captions"] for c in other] != [c["captions"] for c in S.sample_clips(cfg)]


def test_cache_is_reused(small):
    d = small.data_dir
    before = {p: p.stat().st_mtime_ns for p in [d / S.MANIFEST, d / S.TEST_CSV, *sorted((d / "videos").iterdir())[:3]]}
    again = create_dataset(V1, root=str(d.parent), **SMALL)
    assert again.data_dir == d
    assert again.test_split().fingerprint == small.test_split().fingerprint
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_partial_or_corrupted_directory_is_regenerated(tmp_path):
    ds = create_dataset(V1, root=str(tmp_path), **SMALL)
    d = ds.prepare()
    reference = (d / S.TEST_CSV).read_bytes()
    video = sorted((d / "videos").iterdir())[5]
    video_bytes = video.read_bytes()

    # a crash before the manifest was written (or its loss)
    (d / S.MANIFEST).unlink()
    (d / S.TEST_CSV).unlink()
    assert not S.is_complete(d, ds.config)
    d2 = create_dataset(V1, root=str(tmp_path), **SMALL).prepare()
    assert d2 == d and S.is_complete(d, ds.config)
    assert (d / S.TEST_CSV).read_bytes() == reference

    # a truncated video
    video.write_bytes(video_bytes[:100])
    assert not S.is_complete(d, ds.config)
    create_dataset(V1, root=str(tmp_path), **SMALL).prepare()
    assert video.read_bytes() == video_bytes

    # leftovers of an interrupted generation are cleared on the next one
    stale = tmp_path / f".{d.name}.tmp-99999"
    (stale / "videos").mkdir(parents=True)
    (d / S.MANIFEST).write_text("{not json")
    create_dataset(V1, root=str(tmp_path), **SMALL).prepare()
    assert not stale.exists() and S.is_complete(d, ds.config)


def _single_object_clip(motion: str, start_x: float, speed: float) -> dict:
    dx = {"left": -1, "right": 1, "still": 0}[motion]
    return {
        "background": {"pattern": "striped", "colour": "gray", "rgb": [100, 100, 100], "period": 8.0,
                       "phase": [0.0, 0.0]},
        "objects": [{"shape": "square", "colour": "white", "size": "small", "motion": motion, "radius": 5.0,
                     "speed": speed, "start": [start_x, 32.0], "velocity": [dx * speed, 0.0], "rotation": 0.0,
                     "rgb": [250, 250, 250]}],
        "noise_seed": 1,
    }


def test_motion_trail_tells_left_from_right():
    cfg = S.SyntheticConfig(size=64, num_frames=16)
    v, T = 1.5, 16
    right = S.render_clip(_single_object_clip("right", 12.0, v), cfg)
    left = S.render_clip(_single_object_clip("left", 12.0 + v * (T - 1), v), cfg)  # same positions, reversed
    still = S.render_clip(_single_object_clip("still", 32.0, 0.0), cfg)
    background = S.render_clip({**_single_object_clip("still", 32.0, 0.0), "objects": []}, cfg)

    # the object visits the same positions in both clips, so without a per-frame cue mean pooling could not tell
    # them apart; with the trail their frame means differ clearly
    diff = np.abs(right.astype(float).mean(0) - left.astype(float).mean(0))
    assert diff.max() > 10

    # frame t of the right-moving clip: changes behind the object (the trail), none ahead of it
    t = 8
    changed = np.abs(right[t].astype(int) - background[t]).max(-1) > 12
    cx = 12.0 + v * t
    cols = np.nonzero(changed.any(0))[0] + 0.5
    assert cols.min() < cx - 0.85 * 5.0 - 2  # trail pixels left of the square's edge
    assert cols.max() < cx + 0.85 * 5.0 + 1.5
    # a still object has no trail beyond its own extent
    still_cols = np.nonzero((np.abs(still[t].astype(int) - background[t]).max(-1) > 12).any(0))[0] + 0.5
    assert still_cols.min() > 32.0 - 0.85 * 5.0 - 1.5


def test_domains_differ_visually_and_in_phrasing(tmp_path):
    b = create_dataset("synthetic_b", root=str(tmp_path), **SMALL)
    assert b.data_dir.name.startswith("synthetic_b-")
    assert b.test_split().video_ids[0].startswith("synb_test_")
    assert all("backdrop" in c for c in b.test_split().captions)

    # the same clip description rendered in both styles
    cfg_a = S.SyntheticConfig(size=64)
    cfg_b = replace(cfg_a, domain="b")
    clip = _single_object_clip("right", 20.0, 1.5)
    clip["objects"][0].update(radius=9.0)
    fa, fb = S.render_clip(clip, cfg_a), S.render_clip(clip, cfg_b)
    assert np.abs(fa.astype(float) - fb).mean() > 8
    # A fills its shapes, B outlines them: the object's centre is object-coloured only in A
    cx = int(20.0 + 1.5 * 8)
    assert fa[8, 32, cx].min() > 230
    assert fb[8, 32, cx].min() < 200

    # and whole decoded videos of the two datasets differ in their statistics (B: low contrast + vignette)
    a = create_dataset(V1, root=str(tmp_path), **SMALL)
    va = np.stack([read_frames(p.video_path, 4) for p in a.test_split().pairs[:8]]).astype(float)
    vb = np.stack([read_frames(p.video_path, 4) for p in b.test_split().pairs[:8]]).astype(float)
    corner = lambda v: v[..., :4, :4, :].mean()  # noqa: E731
    centre = lambda v: v[..., 12:20, 12:20, :].mean()  # noqa: E731
    assert corner(vb) / centre(vb) < corner(va) / centre(va)


def test_split_fingerprint_covers_the_rendering(tmp_path):
    a = create_dataset(V1, root=str(tmp_path), **SMALL)
    b = create_dataset(V1, root=str(tmp_path), **{**SMALL, "size": 16})
    assert a.test_split().captions == b.test_split().captions  # geometry does not change captions...
    assert a.test_split().fingerprint != b.test_split().fingerprint  # ...but the videos differ
    assert a.data_dir != b.data_dir


def test_options_and_default_root(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match="unknown option"):
        create_dataset("synthetic", root=str(tmp_path), n_trian=10)
    with pytest.raises(DatasetError, match="even"):
        create_dataset("synthetic", root=str(tmp_path), size=33)
    with pytest.raises(DatasetError, match="integer"):
        create_dataset("synthetic", root=str(tmp_path), n_test=2.5)
    monkeypatch.setenv("MLVP_CACHE_DIR", str(tmp_path / "cache"))
    ds = create_dataset(V1, **SMALL)
    assert ds.location.parent == tmp_path / "cache" / "datasets"
    info = ds.describe()
    json.dumps(info)
    assert info["config"]["n_train"] == 60 and info["generator_version"] == 1
    assert ds.version() == f"{V1}-{info['digest']}"
    assert not Path(info["data_dir"]).exists()  # describing does not generate


# ---------------------------------------------------------------------------------------------- version 2 (#12)

V2_SMALL = dict(seed=0, n_train=80, n_test=24, size=64, num_frames=24, fps=12, train_size=32, train_fps=4)


def test_the_default_keeps_its_digest_and_version_2_is_a_dataset_of_its_own(tmp_path):
    # the digest `synthetic` had before generator version 2 existed: unchanged, so caches, checkpoints and ledger keys
    # of the default stay valid
    assert S.config_digest(S.SyntheticConfig()) == "655f4f7cf551"
    v1 = create_dataset("synthetic", root=str(tmp_path))
    v2 = create_dataset("synthetic_v2", root=str(tmp_path))
    assert v1.version() == "synthetic-655f4f7cf551"
    assert v1.config.version == 1 and v2.config.version == 2
    assert (v2.config.size, v2.config.fps, v2.config.num_frames) == (128, 24, 72)
    assert v2.version() != v1.version() and v2.version().startswith("synthetic_v2-")
    assert v2.describe()["generator_version"] == 2
    # the same options under version 2 give another digest (the version is part of it)
    assert S.config_digest(replace(v1.config, version=2)) != S.config_digest(v1.config)
    # render keys (and so the trial keys built from the data version) differ between the two
    from workloads.render_cache import RenderKey

    k1 = RenderKey("synthetic", v1.version(), "v0", "fog", 3, 0, 12, 64, "")
    k2 = RenderKey("synthetic", v2.version(), "v0", "fog", 3, 0, 12, 64, "")
    assert k1.digest != k2.digest
    with pytest.raises(DatasetError, match="unknown option"):
        create_dataset("synthetic_v2", root=str(tmp_path), version=1)  # one dataset name per version
    with pytest.raises(DatasetError, match="unknown option"):
        create_dataset("synthetic", root=str(tmp_path), train_size=32)  # a version-2 option
    with pytest.raises(DatasetError, match="version 2"):
        S.SyntheticConfig(version=1, train_size=32)


def test_version_2_ordered_captions_both_orders_and_vocabulary():
    cfg = S.SyntheticConfig(version=2, seed=0, n_train=400, n_test=120, size=64, num_frames=24, fps=12)
    clips = S.sample_clips(cfg)
    test = [c for c in clips if c["split"] == "test"]
    by = {st: [c for c in test if c["structure"] == st] for st in ("one", "turn", "pair", "appear")}
    assert all(len(v) >= 10 for v in by.values()), {k: len(v) for k, v in by.items()}
    for c in by["turn"]:
        m1, m2 = c["objects"][0]["motion"]
        assert m1 != m2 and c["captions"][0].startswith("first a ") and f", then it moves {m2.split()[-1]}" in \
            c["captions"][0]
    for c in by["appear"]:
        assert c["captions"][0].startswith("first a ") and " appears and " in c["captions"][0]
        assert c["objects"][1]["appear"] == pytest.approx(1.0)  # halfway through 2 s
    # both orders of the same two directions occur among turn clips (order carries information)
    turns = {tuple(c["objects"][0]["motion"]) for c in clips if c["structure"] == "turn"}
    assert any((b, a) in turns for a, b in turns)
    assert any("striped" in c["captions"][0] for c in test) and any("striped" not in c["captions"][0] for c in test)
    # all test combinations are distinct and none is in training
    keys = [S.v2._combo_key(c) for c in test]
    assert len(set(keys)) == len(keys)
    assert not set(keys) & {S.v2._combo_key(c) for c in clips if c["split"] == "train"}


def test_version_2_test_clips_native_train_clips_cheaper(tmp_path):
    ds = create_dataset("synthetic_v2", root=str(tmp_path), **V2_SMALL)
    t, tr = ds.test_split(), ds.train_split()
    assert read_video(t.pairs[0].video_path).shape == (24, 64, 64, 3)
    assert read_video(tr.pairs[0].video_path).shape == (8, 32, 32, 3)  # 2 s at 4 fps, 32 px
    assert any(c.startswith("first ") for c in t.captions)
    # a test clip drawn natively and resized to the train size matches the same scene drawn at the train size
    from workloads.video_io import resize_center_crop

    clip = next(c for c in S.sample_clips(ds.config) if c["split"] == "test" and c["structure"] == "turn")
    big = S.render_clip(clip, ds.config)
    small = S.render_clip({**clip, "split": "train"}, ds.config)
    down = resize_center_crop(big[1::3], 32).astype(float)  # frames at the same instants (centres of 3-frame bins)
    assert down.shape == small.shape
    assert np.abs(down - small).mean() < 3.0


def test_version_2_turn_changes_direction():
    cfg = S.SyntheticConfig(version=2, size=64, num_frames=24, fps=12, n_train=80, n_test=24)
    clip = next(c for c in S.sample_clips(cfg) if c["split"] == "test" and c["structure"] == "turn")
    m1, m2 = clip["objects"][0]["motion"]
    D = clip["duration"]
    x, y = S.v2._path(clip["objects"][0], np.array([0.0, D / 2, D]), D / 2)
    step = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
    d1, d2 = np.array([x[1] - x[0], y[1] - y[0]]), np.array([x[2] - x[1], y[2] - y[1]])
    assert d1 @ np.array(step[m1]) > 0.1 and d2 @ np.array(step[m2]) > 0.1
    # and the drawn clip changes between its halves (the object is elsewhere)
    frames = S.render_clip(clip, cfg).astype(float)
    early, late = frames[:12].mean(0), frames[12:].mean(0)
    assert np.abs(early - late).max() > 20
