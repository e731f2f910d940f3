"""Backbone details that every trial depends on."""
import pytest
import torch

from workloads.backbones import BACKBONES, create_backbone


@pytest.mark.parametrize("clip_model", ["mlvp-tiny", "ViT-B-32"])
def test_text_encoder_cut_at_the_longest_caption_matches_open_clip(clip_model):
    # encode_text runs only as many positions as the batch's longest caption; open_clip runs the whole context.
    # Features and the gradients of the text tower's LayerNorms must agree.
    torch.manual_seed(0)
    model = create_backbone("clip4clip", clip_model)
    assert model._trim_text
    tokens = model.tokenize(["a red disc", "two small green squares move up and down over a dotted background", ""])
    assert tokens.shape[1] == model.clip.context_length and (tokens[:, 20:] == 0).all()
    ours, ref = model.encode_text(tokens), model.clip.encode_text(tokens)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5)

    ln = model.clip.ln_final.weight
    g_ours = torch.autograd.grad(ours.square().sum(), ln)[0]
    g_ref = torch.autograd.grad(model.clip.encode_text(tokens).square().sum(), ln)[0]
    assert torch.allclose(g_ours, g_ref, atol=1e-4, rtol=1e-4)


def test_each_trial_gets_its_own_weights_and_shares_the_tokenizer():
    # workloads/trial.py load_model: trials of one worker start from the same base model; what one trial adapts must
    # not reach the next, while the tokenizer (never adapted, the bulk of a deep copy) is shared
    from workloads.spec import CLEAN, TrialSpec
    from workloads.trial import TrialContext, _base_model, load_model

    spec = TrialSpec("synthetic", "v2t", "query_shift", CLEAN, 0, "tent", "clip4clip", clip_model="mlvp-micro")
    ctx = TrialContext(render_cache="unused", checkpoint=None)
    base = _base_model(spec.backbone, spec.clip_model, ctx.checkpoint, ctx.clip_only)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    first, second = load_model(spec, ctx), load_model(spec, ctx)
    assert first is not base and first.tokenizer is base.tokenizer is second.tokenizer
    with torch.no_grad():
        for p in first.parameters():
            p.add_(1.0)
    for model in (base, second):
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    tokens = ["a red disc moves left"]
    assert torch.equal(first.tokenize(tokens), base.tokenize(tokens))
    assert not torch.allclose(first.encode_text(first.tokenize(tokens)), second.encode_text(second.tokenize(tokens)))


_CONFIGS_WITHOUT_OPEN_CLIP = """
import json, sys
from workloads.backbones import CHECKPOINT_FORMAT, model_config
names = json.loads(sys.argv[1])
configs = {n: model_config(n) for n in names}
print(json.dumps({"configs": configs, "imported": sorted(m for m in ("open_clip", "torch") if m in sys.modules),
                  "format": CHECKPOINT_FORMAT}))
"""


def test_model_configs_are_read_without_importing_open_clip_and_equal_its_own():
    """`plan` and `status` read a model's config (its image size) from the JSON files open_clip and this project
    ship, without importing open_clip or torch (seconds per command); every config equals open_clip's answer."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import open_clip

    from workloads.backbones import CONFIG_DIR, _register_configs
    from workloads.backbones.convert import MLVP

    _register_configs()
    # the shipped configs (a test may have added one at run time to this process's open_clip: tests/test_convert.py)
    shipped = [Path(open_clip.__file__).parent / "model_configs", CONFIG_DIR]
    names = sorted({p.stem for folder in shipped for p in folder.glob("*.json")}) + ["no-such-model"]
    assert {"mlvp-tiny", "mlvp-micro", "ViT-B-32-quickgelu"} <= set(names)
    out = subprocess.run([sys.executable, "-c", _CONFIGS_WITHOUT_OPEN_CLIP, json.dumps(names)], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parents[1])
    got = json.loads(out.stdout)
    assert got["imported"] == []
    assert got["format"] == MLVP
    for name in names:
        assert got["configs"][name] == open_clip.get_model_config(name), name


# -- the backbone contract (workloads/backbones/model.py): multi-part features and the backbone's own score ----------

def _micro_pair(backbone, n=6, seed=0):
    """A micro model of `backbone` with n random clips (and OCR windows where it reads them) and n captions."""
    torch.manual_seed(seed)
    model = create_backbone(backbone, "mlvp-micro").eval()
    g = torch.Generator().manual_seed(seed)
    clips = model.preprocess_frames(torch.randint(0, 256, (n, 12, 32, 32, 3), dtype=torch.uint8, generator=g))
    side = {"ocr": [[[f"WORD{i}"]] * 12 for i in range(n)]} if model.video_inputs else None
    captions = [f"a {c} shape number {i} moves left" for i, c in zip(range(n), ["red", "blue", "green"] * n)]
    return model, clips, side, captions


@pytest.mark.parametrize("backbone", BACKBONES.names())
def test_every_backbone_scores_on_the_cosine_scale_from_its_global_embedding(backbone):
    from workloads.backbones.model import cosine_similarity

    model, clips, side, captions = _micro_pair(backbone)
    with torch.no_grad():
        video = model.video_features(clips, side)
        text = model.text_features(model.tokenize(captions))
        scores = model.score(text, video)
        # the global embedding is what encode_frames / encode_text give (the methods' feature terms read it)
        assert torch.allclose(video.main, model.encode_frames(clips), atol=1e-5)
        assert torch.allclose(text.main, model.encode_text(model.tokenize(captions)), atol=1e-5)
    assert scores.shape == (6, 6) and torch.isfinite(scores).all() and scores.abs().max() <= 1 + 1e-5
    if backbone in ("clip4clip", "xpool"):   # a pooling head scores exactly as before the contract
        assert torch.equal(scores, cosine_similarity(text.main, model.pool(text.main, video.main)))
    else:   # its own score: moving the global embedding moves the score, the parts stay
        moved = model.score(text.with_main(text.main.flip(0)), video)
        assert not torch.allclose(moved, scores)


def test_hvp_net_reads_blocks_1_6_12_scaled_to_the_depth_and_compresses_tokens():
    from workloads.backbones.hvp_net import dpc_knn, level_blocks

    assert level_blocks(12) == [0, 5, 11] and level_blocks(4) == [0, 1, 3] and level_blocks(2) == [0, 1]
    model, clips, side, _ = _micro_pair("hvp_net", n=2)
    with torch.no_grad():
        video = model.video_features(clips)
    # micro: 12 frames x (16 patches + class token) = 204 tokens -> 102 -> 51 -> 26 after three blocks; 2 levels
    assert video.parts["patches"].shape == (2, 2, 26, 64) and video.parts["frames"].shape == (2, 1, 12, 64)
    x = torch.randn(3, 40, 8, generator=torch.Generator().manual_seed(1))
    assign = dpc_knn(x, 5, 3)
    assert assign.shape == (3, 40) and assign.min() == 0 and assign.max() == 4
    assert torch.equal(assign, dpc_knn(x, 5, 3))                       # deterministic (no random tie-break)
    for b in range(3):                                                 # every cluster has a member
        assert set(assign[b].tolist()) == set(range(5))


def test_hvp_net_gallery_side_never_reads_a_test_caption():
    """The label leak of the public code (docs/faithfulness.md: HVP-Net): its word-patch term weights text a's words
    by the MLP of the caption paired with video b, so video b's scores read b's test caption. Here a video's
    features take no text, and its score against text a reads a's words only: rewriting caption j changes row j of
    the score matrix and nothing else. The leaky weighting, computed beside it, fails the same check."""
    import torch.nn.functional as F

    model, clips, _, captions = _micro_pair("hvp_net")
    head = model.pooling
    with torch.no_grad():
        video = model.video_features(clips)          # frames only: no caption can reach the gallery's features
        for p in head.word_weight.parameters():      # a word-weight MLP that prefers some words (not uniform)
            p.normal_(0, 1.0)
        before = model.score(model.text_features(model.tokenize(captions)), video)
        changed = list(captions)
        changed[2] = "an entirely different caption about blue triangles and dotted backgrounds"
        text = model.text_features(model.tokenize(changed))
        after = model.score(text, video)
        assert not torch.allclose(after[2], before[2])
        rows = [i for i in range(6) if i != 2]
        assert torch.allclose(after[rows], before[rows], atol=1e-5)

        def leaky_word_patch(text):   # the public code's 'abw,bw->ab': text a weighted by video b's caption
            words = F.normalize(text.parts["words"], dim=-1)
            w = head.word_weight(text.parts["words"]).squeeze(-1)
            sims = torch.einsum("awd,bkd->abwk", words, F.normalize(video.parts["patches"][:, -1], dim=-1))
            return torch.einsum("abw,bw->ab", sims.amax(-1), w)

        leak = leaky_word_patch(text) - leaky_word_patch(model.text_features(model.tokenize(captions)))
        assert not torch.allclose(leak[rows, 2], torch.zeros(5), atol=1e-6)   # column 2 moves for every text


def test_gallery_with_parts_is_cached_in_fp16_and_read_back(tmp_path):
    from workloads.trial import _pack, _unpack

    model, clips, side, _ = _micro_pair("hvp_net", n=3)
    with torch.no_grad():
        video = model.video_features(clips)
    packed = _pack(video)
    assert packed["main"].dtype == torch.float32 and all(v.dtype == torch.float16 for v in packed["parts"].values())
    torch.save(packed, tmp_path / "g.pt")
    back = _unpack(torch.load(tmp_path / "g.pt", weights_only=True))
    assert torch.equal(back.main, video.main)
    assert torch.allclose(back.parts["patches"], video.parts["patches"], atol=1e-2, rtol=1e-2)
    plain = _pack(create_backbone("clip4clip", "mlvp-micro").video_features(clips))
    assert isinstance(plain, torch.Tensor)   # a cosine backbone's gallery file is the tensor it always was


@pytest.mark.slow
def test_hvp_net_fine_tunes_above_chance_on_the_synthetic_default_and_every_method_runs_on_it(tmp_path):
    """HVP-Net through the shared fine-tuning path (its own loss: workloads/backbones/hvp_net.py) learns the
    embedded default far above chance, and every registered method streams the test split on the fine-tuned model
    in both directions with finite scores that agree with the model's own ranking before adaptation."""
    from workloads.backbones.finetune import FinetuneConfig, decode_split, ensure_finetuned, evaluate
    from workloads.datasets import create_dataset
    from workloads.methods import METHODS, Gallery, create_method, iter_batches, run_stream

    ds = create_dataset("synthetic", root=str(tmp_path / "data"), n_train=400, n_test=40, size=32)
    train, test = ds.train_split(), ds.test_split()
    cfg = FinetuneConfig(backbone="hvp_net", clip_model="mlvp-micro", steps=150, batch_size=32, precision="fp32")
    path, record = ensure_finetuned(cfg, train, test, tmp_path / "models", ds.version(), log=lambda m: None)
    chance = 100 / len(test)
    m = record["metrics"]
    assert m["v2t_R1"] >= 5 * chance and m["t2v_R1"] >= 5 * chance, m

    model = create_backbone("hvp_net", "mlvp-micro", pretrained=str(path))
    frames, rows, kept, _ = decode_split(test, cfg.eval_frames, model.image_size)
    captions = [test.pairs[i].caption for i in kept]
    again = evaluate(model, frames, captions, rows)
    assert again["t2v_R1"] == pytest.approx(m["t2v_R1"])          # the checkpoint is the model that was evaluated
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        clips = model.preprocess_frames(torch.from_numpy(frames[rows]))
        text, video = model.text_features(model.tokenize(captions)), model.video_features(clips)
        own = model.score(text, video)                             # [Nt, Nv], caption i <-> clip i
    for direction in ("v2t", "t2v"):
        gallery = Gallery(direction, *((text.main, text.parts) if direction == "v2t" else (video.main, video.parts)))
        queries = clips if direction == "v2t" else model.tokenize(captions)
        for name in METHODS.names():
            model.load_state_dict(initial)
            options = {"deyo_margin": 2.0, "plpd_threshold": -1.0} if name == "deyo" else {}
            scores = run_stream(create_method(name, model, direction, gallery, **options), iter_batches(queries, 16))
            assert scores.shape == (len(captions),) * 2 and torch.isfinite(scores).all(), (name, direction)
            if name == "source":
                assert torch.allclose(scores, own if direction == "t2v" else own.t(), atol=1e-4)


@pytest.mark.slow
def test_hvp_net_runs_as_a_trial_with_its_gallery_parts_cached(tmp_path):
    """HVP-Net through the trial in both directions: the gallery (with its parts) is encoded once, cached as
    {"main": fp32, "parts": fp16}, and a second trial reads it back and scores the same."""
    from workloads.backbones.finetune import FinetuneConfig, ensure_finetuned
    from workloads.datasets import create_dataset
    from workloads.render_cache import RenderCache, render_video
    from workloads.spec import CLEAN, TrialSpec
    from workloads.trial import TrialContext, render_key, run

    options = {"n_train": 40, "n_test": 12, "size": 32}
    ds = create_dataset("synthetic", root=str(tmp_path / "data"), **options)
    cfg = FinetuneConfig(backbone="hvp_net", clip_model="mlvp-micro", steps=2, batch_size=8, train_frames=4,
                         frames_per_clip=2, eval_frames=4, precision="fp32")
    path, _ = ensure_finetuned(cfg, ds.train_split(), ds.test_split(), tmp_path / "models", ds.version(),
                               log=lambda m: None)
    cache = RenderCache(tmp_path / "render")
    for direction in ("t2v", "v2t"):
        spec = TrialSpec("synthetic", direction, "query_shift", CLEAN, 0, "source", "hvp_net", clip_model="mlvp-micro",
                         num_frames=4, resolution=32, hub_k=4, data_version=ds.version(), model_version="ft:test")
        for pair in ds.test_split().pairs:
            render_video(pair.video_path, [render_key(spec, pair.video_id)], cache)
        ctx = TrialContext(render_cache=str(cache.root), checkpoint=str(path), dataset_root=ds.root,
                           dataset_options=options, gallery_cache=str(tmp_path / "gallery"))
        first, second = run(spec, ctx), run(spec, ctx)
        assert first.status == "ok" and second.status == "ok", (first.error, second.error)
        assert first.metrics["R1"] == second.metrics["R1"] and 0 <= first.metrics["R1"] <= 100
    galleries = [p for p in (tmp_path / "gallery").iterdir() if "-hvp_net-" in p.name and "queries" not in p.name]
    assert len(galleries) == 2
    for file in galleries:
        stored = torch.load(file, weights_only=True)
        assert stored["main"].dtype == torch.float32
        assert {k: v.dtype for k, v in stored["parts"].items() if v.is_floating_point()} and \
            all(v.dtype == torch.float16 for v in stored["parts"].values() if v.is_floating_point())
