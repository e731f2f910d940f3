"""What determines a fine-tuned checkpoint (its content key and file name), apart from the fine-tuning code in
workloads/backbones/finetune.py: the plan computes every checkpoint's path from this without importing torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from workloads import FINETUNE_VERSION
from workloads.seeding import digest


@dataclass(frozen=True)
class FinetuneConfig:
    backbone: str = "clip4clip"
    clip_model: str = "mlvp-tiny"
    init: str = ""                      # identity of the starting weights ("" = random init), part of the key
    steps: int = 500
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.2
    warmup: float = 0.1                 # fraction of steps
    train_frames: int = 16              # frames decoded per train video (uniform rule; all 16 of a synthetic clip)
    frames_per_clip: int = 4            # of those, random frames per clip per step, in order (1 = image-caption)
    eval_frames: int = 12
    precision: str = "auto"             # "fp32", "bf16" (autocast), or "auto": bf16 where the device computes it
                                        # natively, else fp32 (see resolve_precision)
    seed: int = 0
    pooling_kwargs: dict = field(default_factory=dict)

    def key(self, dataset: str, data_version: str) -> str:
        """Content key: config (with the init weights' identity), data version, code version."""
        return digest({"config": asdict(self), "dataset": dataset, "data": data_version, "code": FINETUNE_VERSION})


def checkpoint_path(config: FinetuneConfig, dataset: str, data_version: str, cache_dir: str | Path) -> Path:
    return Path(cache_dir) / f"{config.backbone}-{config.clip_model}-{dataset}-{config.key(dataset, data_version)}.pt"
