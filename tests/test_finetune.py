"""Source fine-tuning: the embedded default learns retrieval far above chance, the checkpoint is cached, the published
recipes set the trainers' learning rates and schedules, and batches do not depend on the number of worker processes."""
import math

import pytest
import torch

from workloads.backbones import create_backbone
from workloads.backbones.finetune import (FinetuneConfig, decode_split, ensure_finetuned, evaluate,
                                         resolve_precision, cpu_has_native_bf16)
from workloads.datasets import create_dataset

pytestmark = pytest.mark.integration


def test_finetune_learns_far_above_chance_and_caches_by_content(tmp_path):
    ds = create_dataset("synthetic", root=str(tmp_path / "data"), n_train=400, n_test=40, size=32)
    train, test = ds.train_split(), ds.test_split()
    cfg = FinetuneConfig(backbone="clip4clip", clip_model="mlvp-micro", steps=150, batch_size=32, precision="fp32")
    logs: list[str] = []
    path, record = ensure_finetuned(cfg, train, test, tmp_path / "models", ds.version(), log=logs.append)

    chance = 100 / len(test)  # 2.5% for 40 test pairs
    m = record["metrics"]
    assert m["v2t_R1"] >= 10 * chance and m["t2v_R1"] >= 10 * chance, m
    assert record["device"] == "cpu" and record["config"]["steps"] == 150

    # the saved checkpoint is the model that was evaluated
    model = create_backbone("clip4clip", "mlvp-micro", pretrained=str(path))
    frames, rows, kept, _ = decode_split(test, cfg.eval_frames, model.image_size)
    again = evaluate(model, frames, [test.pairs[i].caption for i in kept], rows)
    assert again["v2t_R1"] == pytest.approx(m["v2t_R1"]) and again["t2v_R1"] == pytest.approx(m["t2v_R1"])

    # same content key: reused without training; a changed config trains a new checkpoint beside it
    logs.clear()
    path2, record2 = ensure_finetuned(cfg, train, test, tmp_path / "models", ds.version(), log=logs.append)
    assert path2 == path and record2["train_seconds"] == record["train_seconds"]
    assert any("reusing" in line for line in logs) and not any(line.startswith("step ") for line in logs)
    other = FinetuneConfig(backbone="clip4clip", clip_model="mlvp-micro", steps=3, batch_size=32, precision="fp32")
    path3, _ = ensure_finetuned(other, train, test, tmp_path / "models", ds.version(), log=logs.append)
    assert path3 != path and path.is_file() and path3.is_file()


def test_precision_auto_never_emulates_bf16():
    cpu = torch.device("cpu")
    assert resolve_precision("fp32", cpu) == "fp32" and resolve_precision("bf16", cpu) == "bf16"
    # bf16 autocast on a CPU without native bf16 is emulated (~10x slower than fp32): auto must pick fp32 there
    assert resolve_precision("auto", cpu) == ("bf16" if cpu_has_native_bf16() else "fp32")
    # with native bf16, a small model still trains faster in fp32 on a CPU (CPU_BF16_MIN_PARAMS): only a large one
    # (or one of unknown size) gets bf16
    assert resolve_precision("auto", cpu, params=8_000_000) == "fp32"
    assert resolve_precision("auto", cpu, params=151_000_000) == ("bf16" if cpu_has_native_bf16() else "fp32")
    assert resolve_precision("bf16", cpu, params=8_000_000) == "bf16"   # asked for: kept
    with pytest.raises(ValueError, match="'fp32', 'bf16' or 'auto', got 'fp16'"):
        resolve_precision("fp16", cpu)


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    x86 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n"
    (tmp_path / "avx2").write_text(x86)
    (tmp_path / "spr").write_text(x86.replace("avx512f", "avx512f avx512_bf16 amx_bf16"))
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16\n")
    assert not cpu_has_native_bf16(str(tmp_path / "avx2"))
    assert cpu_has_native_bf16(str(tmp_path / "spr")) and cpu_has_native_bf16(str(tmp_path / "arm"))
    assert not cpu_has_native_bf16(str(tmp_path / "absent"))   # no /proc (macOS): fp32


def test_decoded_split_is_cached_memory_mapped_and_drops_undecodable_videos(tmp_path, monkeypatch):
    import shutil

    import numpy as np

    from workloads.backbones import finetune as ft

    src = create_dataset("synthetic", root=str(tmp_path / "gen"), n_train=96, n_test=40, size=32).data_dir
    shutil.copytree(src, tmp_path / "msrvtt")
    test = create_dataset("msrvtt", root=str(tmp_path / "msrvtt")).test_split()
    victim = test.pairs[3]
    with open(victim.video_path, "wb") as f:  # a truncated download
        f.write(b"\x00\x00\x00\x18ftypisom" + b"\x00" * 200)

    plain = ft.decode_split(test, 12, 32)
    clips, rows, kept, bad = ft.decode_split(test, 12, 32, cache_dir=tmp_path / "frames")
    assert isinstance(clips, np.memmap) and clips.shape == (40, 12, 32, 32, 3)
    assert bad == [victim.video_id] and kept == [i for i in range(40) if i != 3] and len(rows) == 39
    assert all(np.array_equal(clips[r], plain[0][r]) for r in rows) and np.array_equal(rows, plain[1])
    assert sorted(p.suffix for p in (tmp_path / "frames").iterdir()) == [".json", ".npy"]

    # the second call reads the cache: nothing is decoded
    def no_decode(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(ft, "read_frames", no_decode)
    again, rows2, kept2, bad2 = ft.decode_split(test, 12, 32, cache_dir=tmp_path / "frames")
    assert np.array_equal(np.asarray(again), np.asarray(clips)) and kept2 == kept and bad2 == bad
    assert np.array_equal(rows2, rows)
    # a different frame count or size is a different entry
    with pytest.raises(AssertionError, match="decoded again"):
        ft.decode_split(test, 8, 32, cache_dir=tmp_path / "frames")


# ---------------------------------------------------------------------------------------------------- recipes
def test_quick_keys_are_unchanged_and_evaluation_frames_are_not_in_any_key():
    from dataclasses import asdict

    from workloads import FINETUNE_VERSION
    from workloads.backbones.finetune_config import RECIPES
    from workloads.seeding import digest

    cfg = FinetuneConfig(backbone="xpool", clip_model="mlvp-micro", init="model:abc", steps=150, lr=1e-6)
    # the key as it was computed before recipes: every field of the config (eval_frames 12) hashed with the data
    before = {k: v for k, v in asdict(cfg).items() if k not in ("recipe", "epochs", "workers")}
    assert cfg.key("msrvtt", "v1") == digest({"config": before, "dataset": "msrvtt", "data": "v1",
                                              "code": FINETUNE_VERSION})
    # evaluating on other frames after training does not retrain (issue #36)
    assert FinetuneConfig(eval_frames=8).key("d", "v") == FinetuneConfig().key("d", "v")
    assert FinetuneConfig(workers=4).key("d", "v") == FinetuneConfig().key("d", "v")
    # a published recipe's key holds its own numbers, not the quick fields it replaces
    xp = FinetuneConfig(recipe="xpool")
    assert xp.key("d", "v") != FinetuneConfig().key("d", "v")
    assert FinetuneConfig(recipe="xpool", steps=3, lr=1.0).key("d", "v") == xp.key("d", "v")
    assert FinetuneConfig(recipe="xpool", epochs=1).key("d", "v") != xp.key("d", "v")
    assert xp.key_fields()["recipe"] == asdict(RECIPES["xpool"])
    with pytest.raises(ValueError, match="unknown fine-tuning recipe 'slow'"):
        FinetuneConfig(recipe="slow")


def test_published_recipes_set_the_trainers_groups_and_schedules():
    from workloads.backbones.finetune import optimizer, schedule
    from workloads.backbones.finetune_config import RECIPES

    model = create_backbone("xpool", "mlvp-micro")
    for name in ("xpool", "clip4clip"):
        recipe = RECIPES[name]
        opt, sched = optimizer(model, FinetuneConfig(backbone="xpool", recipe=name), total_steps=100, dataset="msrvtt")
        by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
        for pname, p in model.named_parameters():
            g = by_param[id(p)]
            lr = recipe.clip_lr if pname.startswith("clip.") else recipe.head_lr_for("msrvtt")
            decayed = not any(s in pname for s in recipe.no_decay)
            assert g["initial_lr"] == lr and g["weight_decay"] == (recipe.weight_decay if decayed else 0.0), pname
            assert g["betas"] == recipe.betas and g["eps"] == recipe.eps
        assert len(by_param) == len(list(model.parameters()))
    assert RECIPES["xpool"].head_lr_for("msrvtt") == 3e-5 and RECIPES["xpool"].head_lr_for("msvd") == 1e-5
    # X-Pool (transformers' cosine): 0 at the first step, 1 at the end of the 10 warm-up steps, 0 at the end
    f = schedule(RECIPES["xpool"], 100)
    assert f(0) == 0.0 and f(5) == 0.5 and f(10) == 1.0 and f(55) == pytest.approx(0.5) and f(100) == 0.0
    # CLIP4Clip (BertAdam's warmup_cosine of the whole run's progress x = (s + 1) / 100)
    g = schedule(RECIPES["clip4clip"], 100)
    assert g(0) == pytest.approx(0.1) and g(8) == pytest.approx(0.9)
    assert g(9) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.1))) and g(99) == pytest.approx(0.0)


@pytest.mark.parametrize("recipe,backbone", [("xpool", "xpool"), ("clip4clip", "clip4clip")])
def test_each_published_recipe_runs_a_few_steps_on_the_micro_model(tmp_path, recipe, backbone):
    from workloads.backbones.finetune_config import RECIPES

    ds = create_dataset("synthetic", root=str(tmp_path / "data"), n_train=48, n_test=24, size=32)
    train, test = ds.train_split(), ds.test_split()
    cfg = FinetuneConfig(backbone=backbone, clip_model="mlvp-micro", recipe=recipe, epochs=1, precision="fp32")
    logs: list[str] = []
    path, record = ensure_finetuned(cfg, train, test, tmp_path / "models", ds.version(), log=logs.append)
    # one epoch: every (video, caption) pair once, in batches of the recipe's size
    assert record["steps"] == math.ceil(len(train.pairs) / RECIPES[recipe].batch_size)
    assert any(f"{recipe} recipe" in line for line in logs) and path.is_file()
    losses = [float(line.split("loss ")[1].split()[0]) for line in logs if line.startswith("step ")]
    assert losses and all(math.isfinite(v) for v in losses)
    assert set(record["metrics"]) >= {"v2t_R1", "t2v_R1"}


@pytest.mark.parametrize("recipe", ["quick", "xpool"])
def test_batches_are_the_same_with_worker_processes(tmp_path, recipe):
    """Batch assembly (gather, X-Pool's crop and flip) runs in DataLoader workers; what each batch holds is drawn in
    the main process, so 2 workers give exactly the batches of none."""
    import numpy as np

    from workloads.backbones.finetune import TrainBatches, batch_plans

    rng = np.random.default_rng(0)
    clips = rng.integers(0, 256, (20, 12, 32, 32, 3), dtype=np.uint8)
    npy = tmp_path / "clips.npy"
    np.save(npy, clips)
    mapped = np.load(npy, mmap_mode="r")  # as decode_split's cache: reopened in the workers, not copied
    clip_of_pair = np.repeat(np.arange(20), 2)
    tokens = torch.arange(40 * 5).view(40, 5)
    groups = [[2 * v, 2 * v + 1] for v in range(20)]
    cfg = FinetuneConfig(recipe=recipe, steps=7, batch_size=8, train_frames=12, frames_per_clip=4, epochs=2)

    def run(workers):
        plans, steps = batch_plans(cfg, groups, 40, 12, 32, np.random.default_rng(3))
        loader = torch.utils.data.DataLoader(TrainBatches(mapped, clip_of_pair, tokens), batch_size=None,
                                             sampler=plans, num_workers=workers, persistent_workers=workers > 0)
        return steps, [(t.clone(), c.clone()) for t, c in loader]

    steps, alone = run(0)
    assert steps == (7 if recipe == "quick" else 2 * math.ceil(40 / 32)) and len(alone) == steps  # X-Pool: batch 32
    _, pooled = run(2)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(alone, pooled))
    if recipe == "xpool":  # augmented: not the stored frames, but the stored frames' content, resized
        tok, batch = alone[0]
        assert batch.shape[1:] == (12, 32, 32, 3)
        assert not torch.equal(batch, torch.from_numpy(clips[tok[:, 0] // 10]))


def test_crop_flip_crops_each_clip_once_for_all_its_frames_and_mirrors_exactly():
    # X-Pool's augmentation (workloads/backbones/finetune.py apply_crop_flip): a crop of the whole frame is no change;
    # a mirrored clip is its unmirrored twin reversed left to right, pixel for pixel; every frame gets its clip's crop
    import numpy as np

    from workloads.backbones.finetune import apply_crop_flip

    rng = np.random.default_rng(0)
    clips = rng.integers(0, 256, (3, 4, 32, 32, 3), dtype=np.uint8)
    clips[:, 1] = clips[:, 0]                       # two equal frames in each clip
    whole = np.array([[0, 0, 32, 32, 0], [0, 0, 32, 32, 1], [5, 3, 20, 24, 0]])
    out = apply_crop_flip(clips, whole)
    assert np.array_equal(out[0], clips[0])
    assert np.array_equal(out[1], clips[1][:, :, ::-1])
    assert np.array_equal(out[2, 0], out[2, 1]) and not np.array_equal(out[2], clips[2])
    crop = np.array([[5, 3, 20, 24, 0], [5, 3, 20, 24, 1], [5, 3, 20, 24, 0]])
    twins = apply_crop_flip(np.stack([clips[2]] * 3), crop)
    assert np.array_equal(twins[1], twins[0][:, :, ::-1]) and np.array_equal(twins[0], out[2])
