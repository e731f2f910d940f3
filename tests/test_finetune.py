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
    frames, _, kept, _ = decode_split(test, cfg.eval_frames, model.image_size)
    again = evaluate(model, frames, [test.pairs[i].caption for i in kept])
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
