"""Fine-tuning tasks declare their peak host memory to Ray (issue #33 item 1): the measured model
(workloads/finetune_memory.py `finetune_bytes`) reaches Ray as the task's `memory=` reservation, counts the
parameters open_clip builds, and a real short fine-tune in a process of its own stays under it."""
from __future__ import annotations

import pytest
from rich.console import Console

from conftest import plan_unrun
from workloads.backbones.finetune_config import FinetuneConfig
from workloads.datasets import create_dataset
from workloads.finetune_memory import BASE_BYTES, finetune_bytes, measure, model_dims

pytestmark = pytest.mark.integration

SMALL = {"n_train": 64, "n_test": 16, "size": 32}


@pytest.mark.parametrize("clip_model,backbone", [("mlvp-micro", "clip4clip"), ("mlvp-micro", "xpool"),
                                                 ("mlvp-tiny", "clip4clip"), ("ViT-B-32", "xpool")])
def test_the_parameter_count_from_the_config_is_open_clips(clip_model, backbone):
    from workloads.backbones import create_backbone

    model = create_backbone(backbone, clip_model)
    dims = model_dims(clip_model, backbone)
    assert dims["params"] == sum(p.numel() for p in model.parameters())
    assert dims["image_size"] == model.image_size


def test_the_declared_memory_reaches_ray(tmp_path, monkeypatch):
    import ray

    from orchestrator.run import ray_env
    from orchestrator.stages import finetune as stage

    plan = plan_unrun(tmp_path, tmp_path / "cache", "ftmem")   # a cache of its own: no checkpoint made yet
    models = [m for m in plan.models.values() if m.finetune is not None]
    assert models, "the plan fine-tunes a checkpoint"
    expected = stage.finetune_task_memory(plan, models[0], "cpu")
    assert expected > BASE_BYTES

    def assigned(*args, **kwargs):   # stands in for the fine-tune: what Ray granted the task it runs in
        import ray

        return ray.get_runtime_context().get_assigned_resources()

    monkeypatch.setattr(stage, "_finetune_task", assigned)
    ray_env.start_ray(None, 2, dashboard=False)
    try:
        refs = stage.launch_models(plan, Console(quiet=True))
        granted = [ray.get(ref, timeout=120) for ref in refs.values()]
    finally:
        ray.shutdown()
    assert granted and all(g["memory"] == pytest.approx(expected, rel=1e-6) for g in granted), (granted, expected)


@pytest.mark.parametrize("backbone,workers,recipe", [("clip4clip", 0, "quick"), ("xpool", 2, "xpool")])
def test_a_short_finetune_stays_under_the_declared_memory(tmp_path, backbone, workers, recipe):
    root = tmp_path / "data"
    ds = create_dataset("synthetic", root=str(root), **SMALL)
    pairs = len(ds.train_split().pairs)
    cfg = FinetuneConfig(backbone=backbone, clip_model="mlvp-micro", steps=3, batch_size=16, precision="fp32",
                         workers=workers, recipe=recipe, epochs=0.1 if recipe != "quick" else None)
    declared = finetune_bytes(cfg, "cpu", pairs)
    r = measure(cfg, "synthetic", root, SMALL, timeout=300)
    assert r["device"] == "cpu" and r["steps"] >= 1
    assert r["base_bytes"] < r["peak_bytes"], r
    assert r["peak_bytes"] + r["workers_bytes"] <= declared, (r, declared)
    if workers:
        assert r["workers_bytes"] > 0, "the DataLoader workers' pages were sampled"
