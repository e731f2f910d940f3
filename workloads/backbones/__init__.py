"""Backbones by name: `create_backbone(name, clip_model, pretrained=<path or None>)`.

`name` is a registered pooling head (`clip4clip`, `xpool`); `clip_model` an open_clip model config name (the
project's own `mlvp-tiny` / `mlvp-micro`, or any open_clip config such as `ViT-B-32`); `pretrained` either
- a checkpoint written by `workloads.backbones.finetune` (a fine-tuned retrieval model: CLIP + pooling head), or
- open_clip CLIP weights (a local file; nothing is downloaded): the pooling head then starts at its initialisation,
  which for X-Pool is the identity-initialised head the reference uses zero-shot (s5, "zstta"), or
- None: random initialisation (seed torch first).
"""
from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch

from workloads.backbones.model import VideoTextModel, cosine_similarity
from workloads.backbones.registry import BACKBONES, register_backbone

CONFIG_DIR = Path(__file__).parent / "model_configs"
CHECKPOINT_FORMAT = "mlvp-backbone/1"


@functools.cache
def _register_configs() -> None:
    import open_clip

    open_clip.add_model_config(CONFIG_DIR)


def list_clip_models() -> list[str]:
    import open_clip

    _register_configs()
    return open_clip.list_models()


class _RandomInitFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Model initialized randomly" not in record.getMessage()


@contextlib.contextmanager
def _quiet_random_init(active: bool):
    """open_clip warns on the root logger whenever no weights load; random init is intended when the caller
    passes no file (weights are loaded from our own checkpoint afterwards), so drop just that record."""
    flt = _RandomInitFilter()
    if active:
        logging.getLogger().addFilter(flt)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(flt)


def _build_clip(clip_model: str, pretrained: str | None):
    import open_clip

    _register_configs()
    if clip_model not in open_clip.list_models():
        raise ValueError(f"unknown open_clip model {clip_model!r}; project configs: "
                         f"{', '.join(sorted(p.stem for p in CONFIG_DIR.glob('*.json')))}; "
                         f"or any of open_clip.list_models() (e.g. ViT-B-32)")
    if pretrained is not None and not Path(pretrained).is_file():
        raise FileNotFoundError(f"CLIP weights not found: {pretrained} (weights are local files; nothing is "
                                "downloaded)")
    with _quiet_random_init(pretrained is None):
        clip = open_clip.create_model(clip_model, pretrained=pretrained)
    tokenizer = open_clip.get_tokenizer(clip_model)
    image_size = clip.visual.image_size
    image_size = image_size[0] if isinstance(image_size, (tuple, list)) else image_size
    return clip, tokenizer, int(image_size)


@functools.lru_cache(maxsize=4)
def load_checkpoint(path: str) -> dict:
    """Read a checkpoint once per process (a reused Ray worker serves many trials from one file)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"cannot read checkpoint {path}: {type(err).__name__}: {err}") from err


def is_backbone_checkpoint(path: str | None) -> bool:
    if path is None or not str(path).endswith((".pt", ".pth")):
        return False
    try:
        ckpt = load_checkpoint(str(path))
    except (FileNotFoundError, ValueError):
        return False
    return isinstance(ckpt, dict) and ckpt.get("format") == CHECKPOINT_FORMAT


def create_backbone(name: str, clip_model: str = "mlvp-tiny", pretrained: str | None = None,
                    device: str | torch.device = "cpu", clip_only: bool = False, **pooling_kwargs) -> VideoTextModel:
    """`clip_only=True` takes only the CLIP weights from an mlvp checkpoint of another pooling head (X-Pool started
    from a fine-tuned mean-pooling model, or zero-shot X-Pool = CLIP + identity-initialised head)."""
    pooling_cls = BACKBONES.lookup(name)
    ckpt = load_checkpoint(str(pretrained)) if is_backbone_checkpoint(pretrained) else None
    whole = ckpt is not None and ckpt["backbone"] == name and not clip_only
    if ckpt is not None:
        if ckpt["clip_model"] != clip_model or (ckpt["backbone"] != name and not clip_only):
            raise ValueError(f"checkpoint {pretrained} holds backbone {ckpt['backbone']!r} on "
                             f"{ckpt['clip_model']!r}, but {name!r} on {clip_model!r} was asked for "
                             "(pass clip_only=True to take just its CLIP weights)")
        if whole:
            pooling_kwargs = {**ckpt.get("pooling_kwargs", {}), **pooling_kwargs}
        clip, tokenizer, image_size = _build_clip(clip_model, None)
    else:
        clip, tokenizer, image_size = _build_clip(clip_model, pretrained)
    embed_dim = int(clip.text_projection.shape[1])
    pooling = pooling_cls(embed_dim=embed_dim, **pooling_kwargs)
    model = VideoTextModel(clip, pooling, tokenizer, backbone=name, clip_model=clip_model, image_size=image_size)
    if whole:
        model.load_state_dict(ckpt["state_dict"], strict=True)
    elif ckpt is not None:
        clip_state = {k[len("clip."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("clip.")}
        model.clip.load_state_dict(clip_state, strict=True)
    model.pooling_kwargs = dict(pooling_kwargs)
    return model.to(device).eval()


def save_backbone(model: VideoTextModel, path: str | Path, **extra) -> None:
    """Write a fine-tuned model in the format `create_backbone(..., pretrained=path)` reads (atomically)."""
    from workloads.atomic import atomic_path

    path = Path(path)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "backbone": model.backbone,
        "clip_model": model.clip_model,
        "pooling_kwargs": getattr(model, "pooling_kwargs", {}),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        **extra,
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


__all__ = ["BACKBONES", "VideoTextModel", "create_backbone", "save_backbone", "load_checkpoint",
           "cosine_similarity", "register_backbone", "list_clip_models", "is_backbone_checkpoint"]
