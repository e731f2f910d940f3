"""Source fine-tuning: the embedded default learns retrieval far above chance, and the checkpoint is cached."""
import pytest
import torch

from workloads.backbones import create_backbone
from workloads.backbones.finetune import (FinetuneConfig, decode_split, ensure_finetuned, evaluate,
                                         resolve_precision)
from workloads.datasets import create_dataset

pytestmark = pytest.mark.slow


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
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert resolve_precision("auto", cpu) == ("bf16" if native else "fp32")
    with pytest.raises(ValueError, match="'fp32', 'bf16' or 'auto', got 'fp16'"):
        resolve_precision("fp16", cpu)


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
