"""Backbones by name: `create_backbone(name, clip_model, pretrained=<path or None>)`.

`name` is a registered backbone (`BACKBONES.names()`: its head, docs/architecture.md "A backbone's features and
score"); `clip_model` an open_clip model config name (the project's own `mlvp-tiny` / `mlvp-micro`, or any
open_clip config such as `ViT-B-32-quickgelu`); `pretrained` a local file or folder whose format is detected from
its content (`workloads.backbones.convert`):
- a checkpoint written by `save_backbone` (a fine-tuned retrieval model: CLIP + pooling head, "mlvp-backbone/1"), or
- a checkpoint of the X-Pool code that the HAT-VTR authors fine-tuned with ({"state_dict": ...} with `clip.*` and,
  for X-Pool, `pool_frames.*`): CLIP and, for X-Pool, the pooling head, or
- CLIP weights alone: an open_clip state dict, OpenAI's TorchScript archive (ViT-B-32.pt) or a Hugging Face CLIPModel
  folder (config.json + model.safetensors / pytorch_model.bin): the pooling head then starts at its initialisation,
  which for X-Pool is the identity-initialised head the reference uses zero-shot ("zstta"), or
- None: random initialisation (seed torch first).
Every key must find its place (missing or unexpected keys raise WeightsError with a report; only the documented
`convert.KNOWN_UNUSED` keys are dropped). OpenAI-derived weights need a QuickGELU config (`ViT-B-32-quickgelu`).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.backbones.configs import (  # noqa: F401 (the package's names)
    CHECKPOINT_FORMAT,
    CONFIG_DIR,
    _register_configs,
    list_clip_models,
    model_config,
)
from workloads.backbones.registry import BACKBONES, register_backbone

if TYPE_CHECKING:
    import torch

    from workloads.backbones.model import VideoTextModel


# torch (~1 s) is imported by what builds or reads a model, not by this package: listing the backbones, reading a
# model's config or the package's names must not start it (a grid's validation, `plan`, `status`)
_LAZY = {"VideoTextModel": "workloads.backbones.model", "cosine_similarity": "workloads.backbones.model",
         "WeightsError": "workloads.backbones.convert", "detect_format": "workloads.backbones.convert"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def backbone_options(name: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """The options of backbone `name` checked against the Options its head declares (`OPTIONS`: TCD's ocr, engine,
    ...), in their canonical form: sorted, coerced to their kinds, without the ones at their default (null: the
    default). Two spellings of one configuration give one form, which the checkpoint, gallery and trial keys are made
    of; {} is the backbone as registered. OptionError (one line: the option, its rule, the bad value) otherwise.
    Imports the backbone's module (torch) only when options are given."""
    from workloads.options import OptionError, check_options

    if not options:
        return {}
    spec = getattr(BACKBONES.lookup(name), "OPTIONS", {})
    if not spec:
        raise OptionError(f"backbone {name!r} takes no options; got {', '.join(map(repr, options))}")
    checked = check_options(f"backbone {name!r}", options, spec)
    return {k: checked[k] for k in sorted(options) if checked[k] is not None and checked[k] != spec[k].default}


def ocr_engine(name: str, options: dict[str, Any] | None = None) -> str | None:
    """The OCR engine whose entries backbone `name` with these (canonical) options reads, or None: a backbone that
    reads no OCR, or an OCR backbone with `ocr: false`. Read from the registration (`ocr=True`) and
    workloads/ocr.py, without importing the backbone."""
    if not BACKBONES.static_info(name).get("ocr"):
        return None
    from workloads.ocr import engine_of

    return engine_of(options or {})


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


def _build_clip(clip_model: str):
    import open_clip

    _register_configs()
    if clip_model not in open_clip.list_models():
        raise ValueError(f"unknown open_clip model {clip_model!r}; project configs: "
                         f"{', '.join(sorted(p.stem for p in CONFIG_DIR.glob('*.json')))}; "
                         f"or any of open_clip.list_models() (e.g. ViT-B-32-quickgelu)")
    with _quiet_random_init(True):  # weights, if any, are loaded afterwards
        clip = open_clip.create_model(clip_model, pretrained=None)
    tokenizer = open_clip.get_tokenizer(clip_model)
    image_size = clip.visual.image_size
    image_size = image_size[0] if isinstance(image_size, (tuple, list)) else image_size
    return clip, tokenizer, int(image_size)


@functools.lru_cache(maxsize=4)
def load_checkpoint(path: str) -> dict:
    """Read a checkpoint once per process (a reused Ray worker serves many trials from one file)."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"cannot read checkpoint {path}: {type(err).__name__}: {err}") from err


def is_backbone_checkpoint(path: str | None) -> bool:
    """Whether `path` is a checkpoint in this tool's format ("mlvp-backbone/1")."""
    from workloads.backbones.convert import detect_format

    if path is None:
        return False
    try:
        return detect_format(path) == CHECKPOINT_FORMAT
    except (FileNotFoundError, ValueError):
        return False


def create_backbone(name: str, clip_model: str = "mlvp-tiny", pretrained: str | None = None,
                    device: str | torch.device = "cpu", clip_only: bool = False, **pooling_kwargs) -> VideoTextModel:
    """`clip_only=True` takes only the CLIP weights from a retrieval checkpoint of another pooling head (X-Pool
    started from a fine-tuned mean-pooling model, or zero-shot X-Pool = CLIP + identity-initialised head)."""
    from workloads.backbones.convert import WeightsError, check_activation, detect_format, load_state, read_weights
    from workloads.backbones.model import VideoTextModel

    pooling_cls = BACKBONES.lookup(name)
    fmt = None if pretrained is None else detect_format(pretrained)
    if fmt == CHECKPOINT_FORMAT:
        return _from_own_checkpoint(name, clip_model, str(pretrained), device, clip_only, pooling_kwargs)
    weights = None if fmt is None else read_weights(pretrained)
    if weights is not None:
        check_activation(weights, clip_model)
        if weights.pooling_state is not None and name != "xpool" and not clip_only:
            raise WeightsError(f"{pretrained} holds an X-Pool model (pool_frames.* weights) but backbone {name!r} was "
                               "asked for (use backbone 'xpool', or take just its CLIP: `mlvp convert-checkpoint ... "
                               "--clip-only`, or clip_only=True in Python)")
        if weights.format == "xpool-codebase" and weights.pooling_state is None and name == "xpool" \
                and not clip_only:
            raise WeightsError(f"{pretrained} holds a mean-pooling model (no pool_frames.* weights) but backbone "
                               "'xpool' was asked for (use 'clip4clip', or take just its CLIP to start X-Pool's head "
                               "at its identity initialisation: `mlvp convert-checkpoint ... --clip-only`, or "
                               "clip_only=True in Python)")
    clip, tokenizer, image_size = _build_clip(clip_model)
    embed_dim = int(clip.text_projection.shape[1])
    pooling = pooling_cls(embed_dim=embed_dim, **pooling_kwargs)
    model = VideoTextModel(clip, pooling, tokenizer, backbone=name, clip_model=clip_model, image_size=image_size)
    if weights is not None:
        _load_clip(model.clip, weights, clip_model)
        if weights.pooling_state is not None and name == "xpool" and not clip_only:
            load_state(model.pooling, weights.pooling_state, f"{pretrained} ({weights.format}) X-Pool pooling")
    model.pooling_kwargs = dict(pooling_kwargs)
    return model.to(device).eval()


def _load_clip(clip: torch.nn.Module, weights, clip_model: str) -> None:
    import open_clip

    from workloads.backbones.convert import check_dims, load_state

    what = f"{weights.path} ({weights.format}) into open_clip {clip_model!r}"
    if type(clip) is not open_clip.CLIP and weights.format == "open_clip":
        # towers open_clip builds from other libraries (timm, HF text): its own loader knows their layouts
        open_clip.load_checkpoint(clip, weights.path, strict=True)
        return
    check_dims(weights.clip_state, clip_model, source=f"{weights.path} ({weights.format})")
    load_state(clip, weights.clip_state, what)


def _from_own_checkpoint(name, clip_model, path, device, clip_only, pooling_kwargs) -> VideoTextModel:
    from workloads.backbones.model import VideoTextModel

    ckpt = load_checkpoint(path)
    whole = ckpt["backbone"] == name and not clip_only
    if ckpt["clip_model"] != clip_model or (ckpt["backbone"] != name and not clip_only):
        raise ValueError(f"checkpoint {path} holds backbone {ckpt['backbone']!r} on "
                         f"{ckpt['clip_model']!r}, but {name!r} on {clip_model!r} was asked for "
                         "(take just its CLIP weights: `mlvp convert-checkpoint ... --clip-only`, or clip_only=True "
                         "in Python)")
    if whole:
        pooling_kwargs = {**ckpt.get("pooling_kwargs", {}), **pooling_kwargs}
    clip, tokenizer, image_size = _build_clip(clip_model)
    embed_dim = int(clip.text_projection.shape[1])
    pooling = BACKBONES.lookup(name)(embed_dim=embed_dim, **pooling_kwargs)
    model = VideoTextModel(clip, pooling, tokenizer, backbone=name, clip_model=clip_model, image_size=image_size)
    if whole:
        model.load_state_dict(ckpt["state_dict"], strict=True)
    else:
        clip_state = {k[len("clip."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("clip.")}
        model.clip.load_state_dict(clip_state, strict=True)
    model.pooling_kwargs = dict(pooling_kwargs)
    return model.to(device).eval()


def save_backbone(model: VideoTextModel, path: str | Path, **extra) -> None:
    """Write a fine-tuned model in the format `create_backbone(..., pretrained=path)` reads (atomically)."""
    import torch

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


__all__ = ["BACKBONES", "VideoTextModel", "backbone_options", "ocr_engine", "create_backbone", "save_backbone",
           "load_checkpoint", "cosine_similarity", "register_backbone", "list_clip_models", "is_backbone_checkpoint",
           "WeightsError", "detect_format"]
