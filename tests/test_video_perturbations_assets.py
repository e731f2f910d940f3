"""main_object_occlusion, style_transfer and event_insertion: with and without their assets (docs/faithfulness.md:
Main-object occlusion to Event insertion).

Every model here is created by the test itself (random-init or hand-built AdaIN weights saved in the authors'
state-dict format); videos are small synthetic clips.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from workloads.perturbations.video import ClipContext, apply, render, render_many  # noqa: E402
from workloads.perturbations.video import adain  # noqa: E402
from workloads.perturbations.video import event_insertion as ei  # noqa: E402
from workloads.perturbations.video import main_object_occlusion as mo  # noqa: E402
from workloads.perturbations.video import style_transfer as st  # noqa: E402
from workloads.video_io import read_frames, uniform_indices, write_mp4  # noqa: E402

H, W, N = 48, 64, 30


def make_clip(n=N, h=H, w=W, seed=0) -> np.ndarray:
    """A blue-green gradient (no pure black pixels) with a yellow disc moving right."""
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.empty((n, h, w, 3), np.uint8)
    for t in range(n):
        f = np.empty((h, w, 3), np.uint8)
        f[..., 0] = 30 + (xx * 60 // w)
        f[..., 1] = 60 + (yy * 120 // h)
        f[..., 2] = 160
        cx = 10 + (w - 20) * t // max(1, n - 1)
        f[(yy - h // 2) ** 2 + (xx - cx) ** 2 < (h // 5) ** 2] = (250, 230, 40)
        out[t] = f
    return out


@pytest.fixture(scope="module")
def clip():
    return make_clip()


# ================================================================================ main_object_occlusion

def boxes_json(n=N, t=12, key="original", empty=()):
    """A boxes dict in the authors' schema: frame i's main object is [6+2i, 6, 40+2i, 40] (34 x 34 px)."""
    idx = uniform_indices(n, t)
    rop = {}
    for i, fi in enumerate(idx):
        k = str(int(fi)) if key == "original" else str(i)
        box = [6.0 + 2 * i, 6.0, 40.0 + 2 * i, 40.0]
        objs = [] if i in empty else [
            {"frame_index": int(fi), "label": "ball", "box": box, "rank_score": 0.9},
            {"frame_index": int(fi), "label": "wall", "box": [0.0, 0.0, 10.0, 10.0], "rank_score": 0.2},
        ]
        rop[k] = objs
    return {"vid7": {"video_path": "/x/vid7.mp4", "ranked_objects_per_frame": rop, "video_caption": "a ball"}}


def black_mask(frames):
    return np.all(frames == 0, axis=-1)


def test_occlusion_with_boxes_json_is_faithful_and_inside_box(clip, tmp_path):
    path = tmp_path / "MSRVTT_main_objects.json"
    path.write_text(json.dumps(boxes_json()))
    sampled = clip[uniform_indices(N, 12)]
    assert not black_mask(sampled).any()
    positions = set()
    for sev in (1, 3, 5):
        r = render("main_object_occlusion", clip, sev, seed=4, main_objects=str(path), video_id="vid7")
        assert r.frames.dtype == np.uint8 and r.frames.shape == (12, H, W, 3)
        assert r.meta["faithful"] is True and r.meta["frame_keys"] == "original_index"
        json.dumps(r.meta)  # meta is JSON-able
        ratio = mo.AREA_RATIOS[sev - 1]
        for i in range(12):
            x1, y1, x2, y2 = 6 + 2 * i, 6, 40 + 2 * i, 40
            mask = black_mask(r.frames[i])
            ys, xs = np.nonzero(mask)
            assert len(ys) > 0
            assert xs.min() >= x1 and xs.max() < x2 and ys.min() >= y1 and ys.max() < y2  # inside the box
            assert mask.sum() == pytest.approx(ratio * (x2 - x1) * (y2 - y1), rel=0.12)
            assert np.array_equal(r.frames[i][~mask], sampled[i][~mask])  # nothing else touched
            if sev == 3:
                positions.add((xs.min() - 2 * i, ys.min()))
    assert len(positions) > 2  # the patch is re-drawn inside the box every frame
    # determinism: same seed -> same bytes; another seed -> another placement
    a = apply("main_object_occlusion", clip, 3, seed=4, main_objects=str(path), video_id="vid7")
    b = apply("main_object_occlusion", clip, 3, seed=4, main_objects=json.loads(path.read_text()), video_id="vid7")
    c = apply("main_object_occlusion", clip, 3, seed=5, main_objects=str(path), video_id="vid7")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_occlusion_area_grows_with_severity(clip):
    data = boxes_json()
    areas = [black_mask(apply("main_object_occlusion", clip, s, seed=1, main_objects=data, video_id="vid7")).sum()
             for s in (1, 2, 3, 4, 5)]
    assert areas == sorted(areas) and areas[0] < areas[-1]


def test_occlusion_position_keys_and_missing_detections(clip):
    data = boxes_json(key="position", empty=(0, 5, 6))
    r = render("main_object_occlusion", clip, 2, seed=0, main_objects=data, video_id="vid7")
    assert r.meta["faithful"] is True and r.meta["frame_keys"] == "position"
    p = r.meta["patches"]
    # frame 0 has no detection and no previous patch: a centred box of W/8..W/4 x H/8..H/4
    x1, y1, x2, y2 = p[0]
    assert W // 8 <= x2 - x1 <= W // 4 and H // 8 <= y2 - y1 <= H // 4
    assert abs((x1 + x2) / 2 - W / 2) <= 1 and abs((y1 + y2) / 2 - H / 2) <= 1
    # frames 5 and 6: the previous patch, same size, shifted by at most 5 px
    for i in (5, 6):
        assert (p[i][2] - p[i][0], p[i][3] - p[i][1]) == (p[i - 1][2] - p[i - 1][0], p[i - 1][3] - p[i - 1][1])
        assert abs(p[i][0] - p[i - 1][0]) <= 5 and abs(p[i][1] - p[i - 1][1]) <= 5


def test_occlusion_frame_keys_from_another_decoder_map_by_order():
    entry = {"ranked_objects_per_frame": {"3": [{"box": [0, 0, 4, 4]}], "10": [], "17": [{"box": [1, 1, 5, 5]}]}}
    objs, mode = mo.per_frame_objects(entry, np.array([2, 9, 16]))
    assert mode == "sorted_order" and objs[0][0]["box"] == [0, 0, 4, 4] and objs[1] == []
    with pytest.raises(ValueError, match="do not match"):
        mo.per_frame_objects(entry, np.array([1, 2, 3, 4]))


def test_occlusion_bad_assets_are_errors(clip, tmp_path):
    missing = tmp_path / "nope" / "boxes.json"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        apply("main_object_occlusion", clip, 1, main_objects=str(missing), video_id="vid7")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        apply("main_object_occlusion", clip, 1, main_objects=str(bad), video_id="vid7")
    with pytest.raises(KeyError, match="vid99"):
        apply("main_object_occlusion", clip, 1, main_objects=boxes_json(), video_id="vid99")


def test_occlusion_without_boxes_uses_locator(clip):
    r = render("main_object_occlusion", clip, 5, seed=2)
    assert r.meta["faithful"] is False and "locator" in r.meta["fallback"]
    assert r.frames.shape == (12, H, W, 3) and r.frames.dtype == np.uint8
    idx = uniform_indices(N, 12)
    hits = 0
    for i, box in enumerate(r.meta["object_boxes"]):
        assert box is not None
        cx = 10 + (W - 20) * int(idx[i]) // (N - 1)  # the disc's true centre
        x1, y1, x2, y2 = box
        hits += (x1 - 2 <= cx <= x2 + 2) and (y1 - 2 <= H // 2 <= y2 + 2)
        ys, xs = np.nonzero(black_mask(r.frames[i]))
        assert xs.min() >= int(x1) and xs.max() < int(x2) + 1 and ys.min() >= int(y1) and ys.max() < int(y2) + 1
    assert hits >= 10  # the locator finds the moving disc
    assert np.array_equal(r.frames, apply("main_object_occlusion", clip, 5, seed=2))


# ================================================================================ style_transfer

def identity_adain_state_dicts():
    """AdaIN weights in the authors' format whose encoder passes RGB through channels 0-2 (max-pooled to 1/8) and
    whose decoder upsamples them back: AdaIN then is a colour-statistics transfer we can reason about."""
    vgg, dec = adain.make_vgg(), adain.make_decoder()
    sds = []
    for net in (vgg, dec):
        sd = {}
        for k, v in net.state_dict().items():
            v = torch.zeros_like(v)
            if k.endswith("weight"):
                kh, kw = v.shape[2:]
                for c in range(min(3, v.shape[0], v.shape[1])):
                    v[c, c, kh // 2, kw // 2] = 1.0
            sd[k] = v
        sds.append(sd)
    return sds


def random_init(net):
    """He-normal random weights (the default init shrinks activations to a constant through 18 conv layers)."""
    for m in net.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            torch.nn.init.normal_(m.bias, std=0.01)
    return net


@pytest.fixture(scope="module")
def adain_weights(tmp_path_factory):
    root = tmp_path_factory.mktemp("adain")
    torch.manual_seed(0)
    paths = {"random": (root / "vgg_normalised.pth", root / "decoder.pth"),
             "identity": (root / "id_vgg.pth", root / "id_decoder.pth")}
    torch.save(random_init(adain.make_vgg()).state_dict(), paths["random"][0])
    torch.save(random_init(adain.make_decoder()).state_dict(), paths["random"][1])
    vgg_sd, dec_sd = identity_adain_state_dicts()
    torch.save(vgg_sd, paths["identity"][0])
    torch.save(dec_sd, paths["identity"][1])
    return {k: (str(a), str(b)) for k, (a, b) in paths.items()}


@pytest.fixture(scope="module")
def style_dir(tmp_path_factory):
    import cv2

    root = tmp_path_factory.mktemp("styles")
    (root / "sub").mkdir()
    rng = np.random.default_rng(0)
    red = np.clip(rng.normal((200, 40, 50), 25, (40, 56, 3)), 0, 255).astype(np.uint8)
    cv2.imwrite(str(root / "red.PNG"), cv2.cvtColor(red, cv2.COLOR_RGB2BGR))
    cv2.imwrite(str(root / "sub" / "red2.Jpeg"), cv2.cvtColor(red, cv2.COLOR_RGB2BGR))
    (root / "notes.txt").write_text("not an image")
    return root


def test_list_style_images_recursive_any_case(style_dir, tmp_path):
    paths = st.list_style_images(str(style_dir))
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["red.PNG", "red2.Jpeg"]
    with pytest.raises(FileNotFoundError, match="no_such_styles"):
        st.list_style_images(str(tmp_path / "no_such_styles"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty"):
        st.list_style_images(str(tmp_path / "empty"))


def test_style_proxy_moves_colours_toward_style(clip, style_dir):
    rs = render_many(clip, [("style_transfer", s, 3) for s in (1, 5)], style_images=str(style_dir))
    content = clip[uniform_indices(N, 12)].astype(np.float64)
    for r in rs:
        assert r.frames.shape == (12, H, W, 3) and r.frames.dtype == np.uint8
        assert r.meta["faithful"] is False and r.meta["mode"] == "proxy" and "style images" in r.meta["fallback"]
        json.dumps(r.meta)
    style_mean = np.array([200, 40, 50], np.float64)
    d_content = np.abs(content.reshape(-1, 3).mean(0) - style_mean).sum()
    d5 = np.abs(rs[1].frames.reshape(-1, 3).mean(0) - style_mean).sum()
    assert d5 < 0.5 * d_content  # colour statistics moved toward the style
    dist = [np.abs(r.frames.astype(np.float64) - content).mean() for r in rs]
    assert dist[0] < dist[1]  # severity 1 (alpha 0.2) stays closer to the content than severity 5
    again = apply("style_transfer", clip, 5, seed=3, style_images=str(style_dir))
    assert np.array_equal(again, rs[1].frames)


def test_unreadable_style_image_falls_back_to_first(clip, style_dir, tmp_path):
    import shutil

    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(style_dir / "red.PNG", folder / "a_good.png")
    (folder / "z_bad.jpg").write_bytes(b"\xff\xd8 truncated")
    metas = [render("style_transfer", clip, 1, seed=s, style_images=str(folder)).meta for s in range(8)]
    bad = [m for m in metas if "style_fallback" in m]
    assert bad and all(m["style"].endswith("a_good.png") and "z_bad.jpg" in m["style_fallback"] for m in bad)


def test_style_proxy_builtin_styles_deterministic(clip):
    styles = st.builtin_styles()
    assert len(styles) >= 5 and all(im.shape == (256, 256, 3) and im.std() > 10 for _, im in styles)
    a = render("style_transfer", clip, 4, seed=0)
    b = render("style_transfer", clip, 4, seed=0)
    assert np.array_equal(a.frames, b.frames) and a.meta["style"].startswith("builtin:")
    assert a.meta["faithful"] is False and not np.array_equal(a.frames, clip[uniform_indices(N, 12)])
    picks = {render("style_transfer", clip, 1, seed=s).meta["style"] for s in range(12)}
    assert len(picks) > 1  # the style is drawn from the seed


def test_adain_random_init_weights_load_and_run(clip, adain_weights, style_dir):
    vgg_p, dec_p = adain_weights["random"]
    model = adain.load_adain(vgg_p, dec_p)
    assert adain.load_adain(vgg_p, dec_p) is model  # cached per process
    assert len(list(model.encoder.children())) == adain.ENCODER_CHILDREN
    rs = render_many(clip, [("style_transfer", s, 1) for s in (1, 5)],
                     adain_vgg=vgg_p, adain_decoder=dec_p, style_images=str(style_dir))
    for r in rs:
        assert r.frames.shape == (12, H, W, 3) and r.frames.dtype == np.uint8
        assert r.meta["faithful"] is True and r.meta["mode"] == "adain"
    assert not np.array_equal(rs[0].frames, rs[1].frames)
    again = apply("style_transfer", clip, 5, seed=1, adain_vgg=vgg_p, adain_decoder=dec_p,
                  style_images=str(style_dir))
    assert np.array_equal(again, rs[1].frames)


def test_adain_severity_1_closer_to_content(clip, adain_weights, style_dir):
    vgg_p, dec_p = adain_weights["identity"]
    rs = render_many(clip, [("style_transfer", s, 0) for s in (1, 5)],
                     adain_vgg=vgg_p, adain_decoder=dec_p, style_images=str(style_dir))
    content = clip[uniform_indices(N, 12)].astype(np.float64)
    dist = [np.abs(r.frames.astype(np.float64) - content).mean() for r in rs]
    assert dist[0] < dist[1]
    red = [r.frames[..., 0].mean() - r.frames[..., 2].mean() for r in rs]
    assert red[0] < red[1]  # towards the red style


def test_adain_crops_decoder_output_to_odd_frame_sizes(adain_weights):
    odd = make_clip(n=6, h=45, w=61)
    vgg_p, dec_p = adain_weights["identity"]
    out = apply("style_transfer", odd, 1, adain_vgg=vgg_p, adain_decoder=dec_p)
    assert out.shape == (12, 45, 61, 3) and out.dtype == np.uint8


def test_adain_without_style_images_is_not_faithful(clip, adain_weights):
    vgg_p, dec_p = adain_weights["identity"]
    r = render("style_transfer", clip, 2, seed=0, adain_vgg=vgg_p, adain_decoder=dec_p)
    assert r.meta["mode"] == "adain" and r.meta["faithful"] is False and "procedural" in r.meta["fallback"]


def test_adain_bad_weights_are_errors(clip, adain_weights, tmp_path):
    vgg_p, dec_p = adain_weights["random"]
    missing = str(tmp_path / "missing_decoder.pth")
    with pytest.raises(FileNotFoundError, match="missing_decoder.pth"):
        apply("style_transfer", clip, 1, adain_vgg=vgg_p, adain_decoder=missing)
    with pytest.raises(ValueError, match="both"):
        apply("style_transfer", clip, 1, adain_vgg=vgg_p)
    with pytest.raises(ValueError, match="decoder.pth"):  # decoder weights given as the vgg
        adain.load_adain(dec_p, dec_p)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pth"):
        adain.load_adain(str(junk), dec_p)


def test_adain_accepts_truncated_encoder_state_dict(adain_weights, tmp_path):
    sd = adain.make_encoder().state_dict()
    p = tmp_path / "enc_only.pth"
    torch.save(sd, p)
    model = adain.load_adain(str(p), adain_weights["random"][1])
    assert model.encode(np.zeros((1, 3, 16, 16), np.float32)).shape == (1, 512, 2, 2)


# ================================================================================ event_insertion

def test_event_insertion_builtin_distractor(clip):
    sampled = clip[uniform_indices(N, 12)]
    ks = []
    for sev in (1, 2, 3, 4, 5):
        r = render("event_insertion", clip, sev, seed=9)
        keep, k = r.meta["keep_n"], r.meta["k_insert"]
        ks.append(k)
        assert r.frames.shape == (12, H, W, 3) and r.frames.dtype == np.uint8
        assert keep + k == 12 and r.meta["ratio"] == ei.RATIOS[sev]
        assert np.array_equal(r.frames[:keep], sampled[:keep])
        assert not np.array_equal(r.frames[keep], sampled[keep])
        assert r.meta["faithful"] is False and r.meta["distractor"]["mode"] == "builtin"
    assert ks == [4, 5, 6, 7, 8]
    assert np.array_equal(apply("event_insertion", clip, 3, seed=9), apply("event_insertion", clip, 3, seed=9))
    assert not np.array_equal(apply("event_insertion", clip, 3, seed=9), apply("event_insertion", clip, 3, seed=10))


def test_insert_counts_scale_with_num_frames():
    assert [ei.insert_counts(12, s) for s in (1, 2, 3, 4, 5)] == [(8, 4), (7, 5), (6, 6), (5, 7), (4, 8)]
    assert ei.insert_counts(16, 5) == (5, 11) and ei.insert_counts(2, 1) == (1, 1) and ei.insert_counts(1, 3) == (0, 1)


def test_event_insertion_given_array(clip):
    other = make_clip(n=20, seed=1)[:, ::-1].copy()
    r = render("event_insertion", clip, 2, seed=0, event_distractor=other, event_distractor_source="clip4clip:v12")
    keep, k = r.meta["keep_n"], r.meta["k_insert"]
    assert np.array_equal(r.frames[keep:], other[uniform_indices(20, k)])
    assert r.meta["faithful"] is False and r.meta["distractor"]["source"] == "clip4clip:v12"
    json.dumps(r.meta)
    r2 = render("event_insertion", clip, 2, event_distractor=other, event_distractor_faithful=True)
    assert r2.meta["faithful"] is True and "fallback" not in r2.meta
    small = other[:, ::2, ::2].copy()  # resized bilinearly to the query's H x W
    r3 = render("event_insertion", clip, 2, event_distractor=small)
    assert r3.frames.shape == (12, H, W, 3)
    assert np.array_equal(r3.frames[keep:], ei.resize_bilinear(small[uniform_indices(20, k)], H, W))


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    (root / "a").mkdir()
    for i, name in enumerate(["a/v0.mp4", "v1.avi.mp4", "v2.MP4"]):
        frames = np.full((16, 32, 64, 3), 40 + 70 * i, np.uint8)  # decord 0.6 fails on widths < 64
        for t in range(16):
            frames[t, :, 2 * t:2 * t + 8] = 250  # a moving white bar
        write_mp4(root / name, frames, fps=8)
    (root / "readme.txt").write_text("x")
    return root


def test_list_pool_and_choose_distractor(pool_dir, tmp_path):
    paths = ei.list_pool(pool_dir)
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["v0.mp4", "v1.avi.mp4", "v2.MP4"]
    with pytest.raises(FileNotFoundError, match="no_pool_here"):
        ei.list_pool(tmp_path / "no_pool_here")
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0]])
    cap = np.array([0.0, 1.0])
    assert ei.choose_distractor(cap, emb) == 2  # raw dot product (cosine would pick 1)
    assert ei.choose_distractor(cap, emb, exclude=2) == 1
    assert ei.choose_distractor(cap, emb, exclude=[1, 2]) == 0
    with pytest.raises(ValueError):
        ei.choose_distractor(cap, emb, exclude=[0, 1, 2])
    with pytest.raises(ValueError, match="dimension"):
        ei.choose_distractor(np.ones(3), emb)


def test_event_insertion_retrieved_from_pool(clip, pool_dir, tmp_path):
    paths = ei.list_pool(pool_dir)
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0]], np.float32)
    np.save(tmp_path / "emb.npy", emb)
    cap = np.array([0.0, 1.0], np.float32)
    r = render("event_insertion", clip, 4, seed=0, distractor_pool=str(pool_dir),
               distractor_embeddings=str(tmp_path / "emb.npy"), caption_embedding=cap)
    keep, k = r.meta["keep_n"], r.meta["k_insert"]
    assert r.meta["distractor"]["mode"] == "retrieved" and r.meta["distractor"]["index"] == 2
    assert np.array_equal(r.frames[keep:], ei.resize_bilinear(read_frames(paths[2], k), H, W))
    assert r.meta["faithful"] is False  # not declared the reference's pool/caption/CLIP
    r2 = render("event_insertion", clip, 4, distractor_pool=paths, distractor_embeddings=emb,
                caption_embedding=cap, video_path=paths[2], event_distractor_faithful=True)
    assert r2.meta["distractor"]["index"] == 1 and r2.meta["faithful"] is True  # the query itself is excluded
    with pytest.raises(ValueError, match=r"\[3, D\]"):
        apply("event_insertion", clip, 1, distractor_pool=str(pool_dir), distractor_embeddings=emb[:2],
              caption_embedding=cap)
    with pytest.raises(ValueError, match="caption_embedding"):
        apply("event_insertion", clip, 1, distractor_pool=str(pool_dir), distractor_embeddings=emb)


def test_event_insertion_random_pool_pick(clip, pool_dir):
    picks = set()
    for seed in range(6):
        r = render("event_insertion", clip, 1, seed=seed, distractor_pool=str(pool_dir))
        assert r.meta["distractor"]["mode"] == "random" and r.meta["faithful"] is False
        picks.add(r.meta["distractor"]["index"])
    assert len(picks) > 1
    a = apply("event_insertion", clip, 1, seed=3, distractor_pool=str(pool_dir))
    assert np.array_equal(a, apply("event_insertion", clip, 1, seed=3, distractor_pool=str(pool_dir)))


def test_event_insertion_bad_paths_are_errors(clip, tmp_path):
    with pytest.raises(FileNotFoundError, match="gone.mp4"):
        apply("event_insertion", clip, 1, event_distractor=str(tmp_path / "gone.mp4"))
    with pytest.raises(FileNotFoundError, match="missing_pool"):
        apply("event_insertion", clip, 1, distractor_pool=str(tmp_path / "missing_pool"))
    with pytest.raises(FileNotFoundError, match="emb_missing.npy"):
        apply("event_insertion", clip, 1, distractor_pool=[str(tmp_path / "x.mp4")],
              distractor_embeddings=str(tmp_path / "emb_missing.npy"), caption_embedding=np.ones(2))


def test_clip_context_short_video_pads():
    short = make_clip(n=5)
    r = render("event_insertion", short, 1, seed=0)
    assert r.frames.shape == (12, H, W, 3)
    assert np.array_equal(r.frames[:8], short[ClipContext(short).indices[:8]])


def test_one_style_per_clip_across_severities_with_a_clip_seed():
    import numpy as np

    from workloads.perturbations.video import render_many

    rng = np.random.default_rng(0)
    video = rng.integers(0, 256, (16, 48, 64, 3), dtype=np.uint8)
    requests = [("style_transfer", s, 100 + s) for s in (1, 2, 3, 4, 5)]
    out = render_many(video, requests, clip_seed=7)
    assert len({r.meta["style"] for r in out}) == 1
    dist = [np.abs(r.frames.astype(int) - out[0].frames.astype(int)).mean() for r in out]
    assert dist == sorted(dist), "same style: strength grows with severity"
    # different clips (clip seeds) may draw different styles, and a clip seed is reproducible
    again = render_many(video, requests, clip_seed=7)
    assert all(np.array_equal(a.frames, b.frames) for a, b in zip(out, again))
