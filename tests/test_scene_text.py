"""Scene text (issue #35): the scene-text domain of the embedded default, the TextVR and M4-ViteVQA loaders on
stand-in files in their published layouts, TCD's windowed OCR captions, OCR entries in the render cache (read once
per clip and cell, shared by every trial), and TCD fine-tuned and run as a trial on the micro model. Tests that read
frames need an OCR engine (workloads/ocr.py) and skip, saying which, without one."""
import json

import numpy as np
import pytest
import torch

from workloads.datasets import create_dataset
from workloads.ocr import DEFAULT_ENGINE, NO_TEXT, clean_words, get_engine, missing_reason, window_caption

OCR_MISSING = missing_reason(DEFAULT_ENGINE)
needs_ocr = pytest.mark.skipif(OCR_MISSING is not None, reason=OCR_MISSING or "")
TINY_TEXT = {"n_train": 24, "n_test": 8, "size": 96, "num_frames": 8}


@pytest.fixture(scope="module")
def text_data(shared_cache):
    ds = create_dataset("synthetic_text", root=str(shared_cache / "datasets"), **TINY_TEXT)
    return ds


def test_scene_text_domain_groups_scenes_that_only_their_sign_tells_apart(text_data):
    attrs = text_data.attributes("test")
    test = text_data.test_split()
    assert len(test) == 8
    for group in (attrs[0:4], attrs[4:8]):   # 4 clips per scene: same background and objects, 4 different words
        scenes = {json.dumps([a["background"]["pattern"], a["background"]["colour"],
                              sorted((o["shape"], o["colour"], o["size"], o["motion"]) for o in a["objects"])])
                  for a in group}
        assert len(scenes) == 1 and len({a["sign"]["word"] for a in group}) == 4
    for pair, a in zip(test.pairs, attrs):   # the caption names the word
        assert pair.caption.endswith(f"with a sign reading {a['sign']['word']}")
    frames = __import__("workloads.video_io", fromlist=["read_frames"]).read_frames(test.pairs[0].video_path, 4)
    assert frames.shape == (4, 96, 96, 3)
    with pytest.raises(ValueError, match="size >= 96"):
        create_dataset("synthetic_text", size=64).config


def test_textvr_and_m4_vitevqa_read_their_published_layouts(tmp_path):
    root = tmp_path / "TextVR"
    items = [{"path": f"Street/clip{i}.mp4", "videos_info": {"split": "test", "Kwai_OCR": f"Street/clip{i}.json"},
              "captions_info": [{"caption": f" The sign reads SHOP {i}.", "caption_info": {"duration": 10.0}},
                                {"caption": "second"}]} for i in range(3)]
    (root / "Videos").mkdir(parents=True)
    (root / "TextVR_test.json").write_text(json.dumps(items))
    (root / "TextVR_train.json").write_text(json.dumps(items[:1]))
    ds = create_dataset("textvr", root=str(root))
    test, train = ds.test_split(), ds.train_split()
    assert [p.caption for p in test.pairs] == [f"The sign reads SHOP {i}." for i in range(3)]
    assert test.pairs[1].video_id == "Street/clip1"
    assert test.pairs[1].video_path == str(root / "Videos/Street/clip1.mp4")
    assert len(train) == 2   # every train caption
    (root / "TextVR_test_rand.json").write_text(json.dumps(items))
    with pytest.raises(ValueError, match="shuffled captions"):
        create_dataset("textvr", root=str(root), test_file="TextVR_test_rand.json").test_split()

    root = tmp_path / "M4"
    qa = [{"question_id": i, "video_id": f"{v:05d}", "question": f"what does sign {i} say?",
           "answers": ["open", "open", "opened"]} for i, v in enumerate([0, 0, 1])]
    (root / "Annotations").mkdir(parents=True)
    (root / "Annotations/ViteVQA_0.0.2_t1s1test.json").write_text(json.dumps({"data": qa}))
    (root / "Annotations/ViteVQA_0.0.2_t1s1train.json").write_text(json.dumps({"data": qa}))
    ds = create_dataset("m4_vitevqa", root=str(root))
    assert [(p.video_id, p.caption) for p in ds.test_split().pairs] == [("00000", "what does sign 0 say? open"),
                                                                       ("00001", "what does sign 2 say? open")]
    assert len(ds.train_split()) == 3 and ds.test_split().pairs[0].video_path == str(root / "video/00000.mp4")
    with pytest.raises(ValueError, match="t1s2"):
        create_dataset("m4_vitevqa", root=str(root), task="t1s2").test_split()


def test_window_captions_follow_tcd_template():
    assert window_caption(["OPEN", "24h"]) == "There are scene texts: OPEN 24h in this frame."
    assert window_caption([]) == NO_TEXT == "There is no scene text in this frame."
    assert clean_words("OPEN |\n OPEN, 24h x ~~") == ["OPEN", "24h"]   # repeats merged, noise dropped


@pytest.mark.parametrize("base", ["clip4clip", "xpool"])
def test_tcd_scores_a_clip_by_its_own_ocr_windows_and_without_ocr_ignores_them(base):
    """TCD's score is the mean of its three cosines on the cosine scale; a clip's OCR words enter that clip's
    column of the score matrix only (each video's fusion reads its own windows); with `ocr: false` every window is
    the no-text caption, so the words change nothing."""
    from workloads.backbones import create_backbone

    torch.manual_seed(0)
    model = create_backbone("tcd", "mlvp-micro", base=base).eval()
    head = model.pooling
    for p in (*head.video_to_ocr.v.parameters(), *head.ocr_to_video.v.parameters()):   # co-attention on
        torch.nn.init.normal_(p, std=0.05)
    g = torch.Generator().manual_seed(0)
    clips = model.preprocess_frames(torch.randint(0, 256, (4, 6, 32, 32, 3), dtype=torch.uint8, generator=g))
    windows = [[[w] if f % 2 else [] for f in range(6)] for w in ("OPEN", "EXIT", "BANK", "TAXI")]
    text = model.text_features(model.tokenize([f"a sign reading {w}" for w in ("OPEN", "EXIT", "BANK", "TAXI")]))
    with torch.no_grad():
        before = model.score(text, model.video_features(clips, {"ocr": windows}))
        changed = [list(w) for w in windows]
        changed[1] = [["HOTEL", "CAFE"]] * 6
        after = model.score(text, model.video_features(clips, {"ocr": changed}))
        s_tv, s_to, s_th = head.terms(text, model.video_features(clips, {"ocr": windows}))
    assert before.shape == (4, 4) and before.abs().max() <= 1 + 1e-5
    assert torch.allclose(before, (s_tv + s_to + s_th) / 3, atol=1e-6)
    assert not torch.allclose(after[:, 1], before[:, 1])
    assert torch.allclose(after[:, [0, 2, 3]], before[:, [0, 2, 3]], atol=1e-6)
    blind = create_backbone("tcd", "mlvp-micro", base=base, ocr=False).eval()
    blind.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(blind.score(text, blind.video_features(clips, {"ocr": windows})),
                           blind.score(text, blind.video_features(clips, {"ocr": changed})))

@needs_ocr
def test_ocr_entries_read_native_frames_once_and_every_trial_shares_them(text_data, tmp_path):
    """render_video(ocr=...) reads each clip at its source resolution before the resize into a sibling entry of
    the clip; ensure_ocr reads only what is missing (a second pass reads nothing), and a clip's entry is what the
    engine reads on the frames the perturbation renders."""
    from workloads.ocr import ensure_ocr
    from workloads.render_cache import RenderCache, RenderKey, render_video
    from workloads.video_io import read_frames

    engine = get_engine()
    cache = RenderCache(tmp_path / "render")
    pairs = text_data.test_split().pairs[:2]
    words = {a["video_id"]: a["sign"]["word"] for a in text_data.attributes("test")}
    keys = [RenderKey("synthetic_text", text_data.version(), p.video_id, "clean", 0, 0, 4, 32) for p in pairs]
    status = render_video(pairs[0].video_path, [keys[0]], cache, ocr=engine)
    assert status[0]["status"] == "ok" and cache.is_valid(keys[0])
    windows = cache.read_ocr(keys[0], engine.version())
    assert windows == engine.read_windows(read_frames(pairs[0].video_path, 4))   # native 96 px frames
    assert any(words[pairs[0].video_id] in w for w in windows), windows
    assert cache.ocr_path(keys[0], engine.version()).name.startswith(cache.path(keys[0]).name[:-4])
    # the second clip: its clip is rendered without OCR; ensure_ocr reads it once, then never again
    render_video(pairs[1].video_path, [keys[1]], cache)
    items = [(k, p.video_path) for k, p in zip(keys, pairs)]
    assert ensure_ocr(cache, items, engine) == 1 and ensure_ocr(cache, items, engine) == 0
    noisy = RenderKey("synthetic_text", text_data.version(), pairs[0].video_id, "gaussian_noise", 5, 0, 4, 32)
    assert ensure_ocr(cache, [(noisy, pairs[0].video_path)], engine) == 1
    assert not cache.path(noisy).exists()   # an OCR-only pass writes no clip


@needs_ocr
def test_a_trial_reads_the_render_stages_ocr_of_an_asset_cell_and_names_a_missing_entry(text_data, tmp_path):
    """Occlusion renders with assets (its builtin boxes), which a trial does not re-render: the render stage's OCR
    entries are read as they are, and a missing one fails the trial naming the clip."""
    from workloads.backbones import create_backbone
    from workloads.render_cache import RenderCache, render_video
    from workloads.spec import TrialSpec
    from workloads.trial import ensure_side_inputs, render_key

    engine, cache, test = get_engine(), RenderCache(tmp_path / "render"), text_data.test_split()
    spec = TrialSpec("synthetic_text", "v2t", "query_shift", "main_object_occlusion", 5, "source", "tcd",
                     clip_model="mlvp-micro", num_frames=4, resolution=32, data_version=text_data.version(),
                     render_assets="builtin")
    rows = [0, 1]
    for i in rows:   # what the render stage does: the clip and its OCR entry in one decode
        key = render_key(spec, test.pairs[i].video_id)
        assert key.assets == "builtin"
        status = render_video(test.pairs[i].video_path, [key], cache, {"video_id": key.video_id}, ocr=engine)
        assert status[0]["status"] == "ok", status
    model = create_backbone("tcd", "mlvp-micro")
    cells = [("main_object_occlusion", 5)] * len(test)
    ensure_side_inputs(spec, model, cache, test, rows, cells)   # every entry there: nothing to read, no error
    cache.ocr_path(render_key(spec, test.pairs[1].video_id), engine.version()).unlink()
    with pytest.raises(RuntimeError, match=f"OCR of {test.pairs[1].video_id} at main_object_occlusion-5"):
        ensure_side_inputs(spec, model, cache, test, rows, cells)


@needs_ocr
@pytest.mark.slow
def test_tcd_fine_tunes_with_its_loss_and_runs_as_a_trial(text_data, shared_cache, tmp_path):
    """TCD through the shared fine-tuning path (its loss, OCR windows of the train clips cached) and through a t2v
    and a v2t trial: the gallery's OCR parts are cached in fp16, the OCR entries shared by the two methods."""
    from workloads.backbones import create_backbone
    from workloads.backbones.finetune import FinetuneConfig, ensure_finetuned
    from workloads.ocr import ensure_ocr
    from workloads.render_cache import RenderCache, render_video
    from workloads.spec import CLEAN, TrialSpec
    from workloads.trial import TrialContext, render_key, run

    config = FinetuneConfig(backbone="tcd", clip_model="mlvp-micro", steps=3, batch_size=8, train_frames=4,
                            frames_per_clip=2, eval_frames=4, precision="fp32")
    path, record = ensure_finetuned(config, text_data.train_split(), text_data.test_split(), shared_cache / "models",
                                    text_data.version(), log=lambda m: None)
    assert record["metrics"]["t2v_R1"] >= 0 and create_backbone("tcd", "mlvp-micro", pretrained=str(path)).video_inputs
    cache = RenderCache(tmp_path / "render")
    test = text_data.test_split()
    results = {}
    for direction in ("t2v", "v2t"):
        for method in ("source", "tent"):
            spec = TrialSpec("synthetic_text", direction, "query_shift", CLEAN, 0, method, "tcd",
                             clip_model="mlvp-micro", num_frames=4, resolution=32, hub_k=4,
                             data_version=text_data.version(),
                             model_version="ft:test")
            for pair in test.pairs:
                render_video(pair.video_path, [render_key(spec, pair.video_id)], cache)
            ctx = TrialContext(render_cache=str(cache.root), checkpoint=str(path), dataset_root=text_data.root,
                               dataset_options=TINY_TEXT, gallery_cache=str(tmp_path / "gallery"))
            results[(direction, method)] = run(spec, ctx)
            assert results[(direction, method)].status == "ok", results[(direction, method)].error
            items = [(render_key(spec, p.video_id), p.video_path) for p in test.pairs]
            assert ensure_ocr(cache, items, get_engine()) == 0   # read once, by the first trial that needed them
    gallery = [p for p in (tmp_path / "gallery").iterdir() if "-t2v-" in p.name and "queries" not in p.name]
    assert gallery and torch.load(gallery[0], weights_only=True)["parts"]["ocr"].dtype == torch.float16
    assert np.isfinite([r.metrics["R1"] for r in results.values()]).all()
