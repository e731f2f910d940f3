"""Foreign CLIP / retrieval checkpoints -> this project's layout (open_clip CLIP + our pooling heads).

Formats `read_weights(path)` detects from the file itself (never from its name alone):

- "mlvp-backbone/1": our own checkpoint (`save_backbone`); handled by `create_backbone` directly.
- "open_clip": an open_clip state dict (`visual.conv1.weight`, `transformer.resblocks.*`, ...), bare or under
  "state_dict" (open_clip's training checkpoints, with or without a `module.` prefix), .pt/.pth/.bin or
  .safetensors; also an open_clip hub folder (open_clip_config.json + open_clip_model.safetensors / *.bin).
- "openai-torchscript": OpenAI's released archives (`ViT-B-32.pt`): a TorchScript zip (it holds code/ and
  constants.pkl), whose state dict is in open_clip's layout, in fp16, plus three integer entries.
- "hf-clip": a Hugging Face `CLIPModel` (`text_model.*`, `vision_model.*`, `visual_projection.weight`, ...): a folder
  with config.json + model.safetensors or pytorch_model.bin (e.g. a snapshot of openai/clip-vit-base-patch32), or a
  bare state-dict file.
- "xpool-codebase": a checkpoint of the X-Pool training code (layer6ai-labs/xpool, trainer/base_trainer.py) that the
  HAT-VTR authors fine-tuned with (bingqingzhang/vtr_tta): {"epoch", "state_dict", "optimizer"} with the CLIP under
  `clip.` (a Hugging Face CLIPModel with --huggingface, else OpenAI's CLIP module, which has open_clip's layout) and,
  for X-Pool, the pooling transformer under `pool_frames.`. The mean-pooling baseline has no pooling weights.

Every conversion reports missing and unexpected keys; an unexpected key is an error unless listed in
`KNOWN_UNUSED` (buffers that are recomputed, archive metadata), which are dropped and listed in the report.

OpenAI's CLIP weights (TorchScript archives, openai/clip-vit-base-patch32, and every checkpoint fine-tuned from them,
such as the X-Pool and HAT-VTR releases) use QuickGELU: they must be loaded into an open_clip config with
`quick_gelu: true`, e.g. `ViT-B-32-quickgelu` (`ViT-B-32` uses exact GELU; the features would be silently wrong).
"""
from __future__ import annotations

import functools
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workloads.backbones.configs import CHECKPOINT_FORMAT as MLVP
FORMATS = {
    MLVP: "this tool's checkpoint (save_backbone / convert-checkpoint)",
    "open_clip": "open_clip state dict (file or hub folder)",
    "openai-torchscript": "OpenAI CLIP TorchScript archive (e.g. ViT-B-32.pt)",
    "hf-clip": "Hugging Face CLIPModel (folder with config.json + weights, or a state-dict file)",
    "xpool-codebase": "X-Pool / HAT-VTR training checkpoint ({'state_dict': ...} with clip.* and pool_frames.*)",
}
# formats whose CLIP is OpenAI's (QuickGELU) whatever the file says
_OPENAI_FORMATS = ("openai-torchscript", "xpool-codebase")

# Keys a foreign checkpoint may hold that have no counterpart here, and why dropping them is safe.
KNOWN_UNUSED = {
    r"(text|vision)_model\.embeddings\.position_ids": "Hugging Face buffer (saved by transformers < 4.31): arange "
                                                       "of positions, rebuilt by the model",
    r"input_resolution|context_length|vocab_size": "OpenAI TorchScript archive metadata (integers)",
    r"logit_bias": "SigLIP-style logit bias, absent from CLIP (zero when present)",
}
_KNOWN_UNUSED_RE = re.compile("|".join(f"(?:{p})" for p in KNOWN_UNUSED) + "$")


class WeightsError(ValueError):
    """A weights file cannot be read, has an unknown layout, or does not fit the asked model."""


@dataclass
class LoadedWeights:
    """A foreign checkpoint in our layout: `clip_state` for open_clip's CLIP, `pooling_state` for our pooling head
    (None when the file has none) and what was dropped."""

    format: str
    path: str
    clip_state: dict[str, torch.Tensor]
    pooling_state: dict[str, torch.Tensor] | None = None
    quick_gelu: bool | None = None          # what the file says about its activation; None: it does not say
    dropped: list[str] = field(default_factory=list)   # known-unused keys

    def describe(self) -> str:
        pool = f", {len(self.pooling_state)} pooling tensors" if self.pooling_state else ""
        drop = f"; dropped known-unused {', '.join(self.dropped)}" if self.dropped else ""
        return f"{self.path}: {self.format} ({len(self.clip_state)} CLIP tensors{pool}{drop})"


# --------------------------------------------------------------------------------------------------------------
# Hugging Face CLIPModel <-> open_clip CLIP

# per-layer renames (HF suffix -> open_clip suffix); q/k/v are fused into in_proj separately
_LAYER_RENAMES = {
    "self_attn.out_proj.weight": "attn.out_proj.weight",
    "self_attn.out_proj.bias": "attn.out_proj.bias",
    "layer_norm1.weight": "ln_1.weight",
    "layer_norm1.bias": "ln_1.bias",
    "layer_norm2.weight": "ln_2.weight",
    "layer_norm2.bias": "ln_2.bias",
    "mlp.fc1.weight": "mlp.c_fc.weight",
    "mlp.fc1.bias": "mlp.c_fc.bias",
    "mlp.fc2.weight": "mlp.c_proj.weight",
    "mlp.fc2.bias": "mlp.c_proj.bias",
}
# top-level renames; a projection is stored transposed (HF Linear weight [out, in], open_clip x @ proj [in, out])
_TOP_RENAMES = {
    "vision_model.embeddings.class_embedding": "visual.class_embedding",
    "vision_model.embeddings.patch_embedding.weight": "visual.conv1.weight",
    "vision_model.embeddings.position_embedding.weight": "visual.positional_embedding",
    "vision_model.pre_layrnorm.weight": "visual.ln_pre.weight",
    "vision_model.pre_layrnorm.bias": "visual.ln_pre.bias",
    "vision_model.post_layernorm.weight": "visual.ln_post.weight",
    "vision_model.post_layernorm.bias": "visual.ln_post.bias",
    "visual_projection.weight": "visual.proj",
    "text_model.embeddings.token_embedding.weight": "token_embedding.weight",
    "text_model.embeddings.position_embedding.weight": "positional_embedding",
    "text_model.final_layer_norm.weight": "ln_final.weight",
    "text_model.final_layer_norm.bias": "ln_final.bias",
    "text_projection.weight": "text_projection",
    "logit_scale": "logit_scale",
}
_TRANSPOSED = {"visual.proj", "text_projection"}
_TOWERS = (("vision_model.", "visual."), ("text_model.", ""))
_LAYER_RE = re.compile(r"(vision_model|text_model)\.encoder\.layers\.(\d+)\.(.+)$")


def is_hf_clip_state(state: dict) -> bool:
    return any(k.startswith(("text_model.", "vision_model.")) for k in state)


def is_open_clip_state(state: dict) -> bool:
    return "visual.conv1.weight" in state or "token_embedding.weight" in state or any(
        k.startswith("transformer.resblocks.") for k in state)


def from_hf_clip(state_dict: dict, clip_model: str | None = None) -> dict[str, torch.Tensor]:
    """A Hugging Face `CLIPModel` state dict (keys `text_model.*`, `vision_model.*`, ...) in open_clip's `CLIP`
    layout. q/k/v projections are fused into `in_proj_*` (q, k, v order), projections transposed. With
    `clip_model` (an open_clip config name) the tower sizes are checked against the config, and a mismatch raises
    WeightsError naming both. Keys in KNOWN_UNUSED are dropped; any other key without a counterpart raises."""
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str, str], dict[str, torch.Tensor]] = {}  # (HF prefix, our prefix, weight|bias)
    unexpected = []
    for key, value in state_dict.items():
        m = _LAYER_RE.match(key)
        if m:
            tower, i, rest = m.group(1), int(m.group(2)), m.group(3)
            prefix = f"{dict(_TOWERS)[tower + '.']}transformer.resblocks.{i}."
            part = re.fullmatch(r"self_attn\.([qkv])_proj\.(weight|bias)", rest)
            if part:
                hf_prefix = f"{tower}.encoder.layers.{i}.self_attn."
                qkv.setdefault((hf_prefix, prefix, part.group(2)), {})[part.group(1)] = value
            elif rest in _LAYER_RENAMES:
                out[prefix + _LAYER_RENAMES[rest]] = value
            else:
                unexpected.append(key)
        elif key in _TOP_RENAMES:
            name = _TOP_RENAMES[key]
            out[name] = value.t().contiguous() if name in _TRANSPOSED else value
        elif not _KNOWN_UNUSED_RE.match(key):
            unexpected.append(key)
    missing = []
    for (hf_prefix, prefix, kind), parts in sorted(qkv.items()):
        absent = [f"{p}_proj" for p in "qkv" if p not in parts]
        if absent:
            missing += [f"{hf_prefix}{a}.{kind}" for a in absent]
            continue
        out[f"{prefix}attn.in_proj_{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]], dim=0)
    if unexpected or missing:
        raise WeightsError("Hugging Face CLIP state dict: " + _key_report(missing, unexpected))
    if clip_model is not None:
        check_dims(out, clip_model, source="Hugging Face CLIP weights")
    return out


def from_xpool_pooling(state_dict: dict) -> dict[str, torch.Tensor]:
    """X-Pool's pooling transformer (layer6ai-labs/xpool modules/transformer.py; `pool_frames.*` in its
    checkpoints, prefix optional) in the layout of our `XPoolPooling`: the attention's projections live in a
    `cross_attn` submodule there and at the head's top level here; the LayerNorms and linear_proj keep their names.
    Any other key raises WeightsError."""
    out, unexpected = {}, []
    for key, value in state_dict.items():
        name = key[len("pool_frames."):] if key.startswith("pool_frames.") else key
        m = re.fullmatch(r"cross_attn\.((?:q|k|v|out)_proj\.(?:weight|bias))", name)
        if m:
            out[m.group(1)] = value
        elif re.fullmatch(r"(linear_proj|layer_norm[123])\.(weight|bias)", name):
            out[name] = value
        else:
            unexpected.append(key)
    if unexpected:
        raise WeightsError("X-Pool pooling weights: " + _key_report([], unexpected))
    return out


# --------------------------------------------------------------------------------------------------------------
# config checks

def _config(clip_model: str) -> dict:
    from workloads.backbones.configs import model_config

    cfg = model_config(clip_model)
    if cfg is None:
        raise WeightsError(f"unknown open_clip model {clip_model!r}")
    return cfg


def check_dims(state: dict, clip_model: str, source: str = "weights") -> None:
    """The tower sizes of an open_clip-layout state dict against the open_clip config `clip_model`."""
    cfg = _config(clip_model)
    v, t = cfg.get("vision_cfg", {}), cfg.get("text_cfg", {})
    if not isinstance(v.get("layers"), int) or "visual.conv1.weight" not in state:
        return  # not a plain ViT config/state (e.g. a ResNet or timm tower): load_state_dict reports shapes

    def n_layers(prefix):
        return len({k[len(prefix):].split(".")[0] for k in state if k.startswith(prefix)})

    conv = state["visual.conv1.weight"]
    have = {
        "vision width": conv.shape[0], "patch size": conv.shape[-1],
        "vision layers": n_layers("visual.transformer.resblocks."),
        "image size": round((state["visual.positional_embedding"].shape[0] - 1) ** 0.5) * conv.shape[-1]
        if "visual.positional_embedding" in state else None,
        "text width": state["token_embedding.weight"].shape[1] if "token_embedding.weight" in state else None,
        "text layers": n_layers("transformer.resblocks."),
        "context length": state["positional_embedding"].shape[0] if "positional_embedding" in state else None,
        "vocab size": state["token_embedding.weight"].shape[0] if "token_embedding.weight" in state else None,
        "embed dim": state["text_projection"].shape[1] if "text_projection" in state else None,
    }
    image_size = v.get("image_size", 224)
    want = {
        "vision width": v.get("width"), "patch size": v.get("patch_size"), "vision layers": v.get("layers"),
        "image size": image_size[0] if isinstance(image_size, (list, tuple)) else image_size,
        "text width": t.get("width"), "text layers": t.get("layers"), "context length": t.get("context_length", 77),
        "vocab size": t.get("vocab_size", 49408), "embed dim": cfg.get("embed_dim"),
    }
    wrong = [f"{k} {have[k]} (config: {want[k]})" for k in want
             if have[k] is not None and want[k] is not None and int(have[k]) != int(want[k])]
    if wrong:
        raise WeightsError(f"{source} do not fit open_clip config {clip_model!r}: {'; '.join(wrong)}; "
                           f"name the config that matches (e.g. ViT-B-32-quickgelu for OpenAI's ViT-B/32, "
                           f"ViT-B-16-quickgelu for ViT-B/16)")


def quickgelu_name(clip_model: str, quick_gelu: bool) -> str | None:
    """The open_clip config twin of `clip_model` with the other activation, if it exists."""
    import open_clip

    base = clip_model[: -len("-quickgelu")] if clip_model.endswith("-quickgelu") else clip_model
    name = f"{base}-quickgelu" if quick_gelu else base
    return name if name in open_clip.list_models() else None


def check_activation(weights: LoadedWeights, clip_model: str) -> None:
    """OpenAI-derived weights need a QuickGELU config and others exact GELU: a mismatch computes different
    features without any error, so it is refused here with the name of the config to use."""
    need = weights.quick_gelu
    if need is None:
        return
    has = bool(_config(clip_model).get("quick_gelu", False))
    if has == need:
        return
    twin = quickgelu_name(clip_model, need)
    act = "QuickGELU (OpenAI CLIP)" if need else "exact GELU"
    hint = f"use clip_model {twin!r}" if twin else "use an open_clip config with " + (
        "quick_gelu: true" if need else "quick_gelu: false")
    raise WeightsError(f"{weights.path}: {weights.format} weights use {act}, but open_clip config {clip_model!r} "
                       f"uses {'QuickGELU' if has else 'exact GELU'}; {hint}")


# --------------------------------------------------------------------------------------------------------------
# reading files

def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.endswith("/constants.pkl") or "/code/" in n for n in z.namelist())


def _torch_load(path: Path):
    try:
        try:  # memory-mapped: sniffing a checkpoint's format does not read its tensors
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):  # the legacy (pre-zip) serialisation cannot be mapped
                raise
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise WeightsError(f"cannot read {path}: {type(err).__name__}: {err}") from err


def _read_tensors(path: Path) -> dict:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    return _torch_load(path)


def _strip_module(state: dict) -> dict:
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def _hf_quick_gelu(config_path: Path) -> bool | None:
    try:
        cfg = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise WeightsError(f"cannot read {config_path}: {err}") from err
    if cfg.get("model_type") not in (None, "clip"):
        raise WeightsError(f"{config_path}: model_type {cfg.get('model_type')!r}; only Hugging Face CLIPModel "
                           "('clip') folders are supported")
    acts = {c.get("hidden_act") for c in (cfg.get("text_config") or {}, cfg.get("vision_config") or {})}
    acts.discard(None)
    if not acts:
        return True  # transformers' CLIP default is quick_gelu
    if len(acts) > 1:
        raise WeightsError(f"{config_path}: text and vision towers use different activations {sorted(acts)}")
    act = acts.pop()
    if act not in ("quick_gelu", "gelu"):
        raise WeightsError(f"{config_path}: hidden_act {act!r} has no open_clip counterpart (quick_gelu or gelu)")
    return act == "quick_gelu"


def _folder_weights(folder: Path) -> tuple[str, Path, Path | None]:
    """(format, weights file, config file) of a Hugging Face or open_clip hub folder."""
    for name in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"):
        if (folder / name).is_file():
            return "open_clip", folder / name, None
    config = folder / "config.json"
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            if not config.is_file():
                raise WeightsError(f"{folder}: {name} without config.json; a Hugging Face CLIP folder holds both")
            return "hf-clip", folder / name, config
    raise WeightsError(f"{folder}: not a weights folder; expected config.json + model.safetensors or "
                       "pytorch_model.bin (Hugging Face CLIPModel), or open_clip_model.safetensors")


def _split_dropped(state: dict) -> tuple[dict, list[str]]:
    kept = {k: v for k, v in state.items() if not _KNOWN_UNUSED_RE.match(k)}
    return kept, sorted(set(state) - set(kept))


def detect_format(path: str | os.PathLike) -> str:
    """The format of a weights file or folder (a key of FORMATS); WeightsError when none fits."""
    return _read(str(path), _stamp(path))[0]


def read_weights(path: str | os.PathLike) -> LoadedWeights:
    """A foreign checkpoint converted to our layout (cached per file version: a Ray worker reuses it across
    trials). Our own format is not converted: `create_backbone` reads it."""
    fmt, weights = _read(str(path), _stamp(path))
    if weights is None:
        raise WeightsError(f"{path} is a {fmt} checkpoint; load it with create_backbone")
    return weights


def _stamp(path) -> tuple:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"weights not found: {path} (weights are local files; nothing is downloaded)")
    st = p.stat()
    return (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=2)
def _read(path: str, _stamp: tuple) -> tuple[str, LoadedWeights | None]:
    p = Path(path)
    if p.is_dir():
        fmt, file, config = _folder_weights(p)
        state = _strip_module(_read_tensors(file))
        if fmt == "hf-clip":
            state, dropped = _split_dropped(state)
            return fmt, LoadedWeights(fmt, path, from_hf_clip(state), None, _hf_quick_gelu(config), dropped)
        state, dropped = _split_dropped(state)
        return fmt, LoadedWeights(fmt, path, state, None, None, dropped)
    if _is_torchscript(p):
        try:
            module = torch.jit.load(str(p), map_location="cpu")
        except Exception as err:
            raise WeightsError(f"cannot read TorchScript archive {p}: {type(err).__name__}: {err}") from err
        state = {k: v.float() if v.is_floating_point() else v for k, v in module.state_dict().items()}
        state, dropped = _split_dropped(state)
        if not is_open_clip_state(state):
            raise WeightsError(f"{p}: a TorchScript archive that is not an OpenAI CLIP model (no visual.* / "
                               "transformer.* weights)")
        return "openai-torchscript", LoadedWeights("openai-torchscript", path, state, None, True, dropped)

    obj = _read_tensors(p)
    if not isinstance(obj, dict):
        raise WeightsError(f"{p}: expected a state dict or a checkpoint dict, got {type(obj).__name__}")
    if obj.get("format") == MLVP:
        return MLVP, None
    if "format" in obj and isinstance(obj["format"], str):
        raise WeightsError(f"{p}: checkpoint format {obj['format']!r} is not supported (this version reads {MLVP})")
    state = obj["state_dict"] if isinstance(obj.get("state_dict"), dict) else obj
    state = _strip_module(state)
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if len(tensors) != len(state):
        odd = sorted(k for k in state if k not in tensors)[:5]
        raise WeightsError(f"{p}: not a state dict (non-tensor entries {', '.join(map(str, odd))})")

    if any(k.startswith("clip.") for k in state):
        return "xpool-codebase", _from_xpool_codebase(path, state)
    state, dropped = _split_dropped(state)
    if is_hf_clip_state(state):
        return "hf-clip", LoadedWeights("hf-clip", path, from_hf_clip(state), None, None, dropped)
    if is_open_clip_state(state):
        return "open_clip", LoadedWeights("open_clip", path, state, None, None, dropped)
    sample = ", ".join(sorted(state)[:4])
    raise WeightsError(f"{p}: unknown weights layout (first keys: {sample}); supported: "
                       + "; ".join(FORMATS.values()))


def _from_xpool_codebase(path: str, state: dict) -> LoadedWeights:
    clip = {k[len("clip."):]: v for k, v in state.items() if k.startswith("clip.")}
    pool = {k: v for k, v in state.items() if k.startswith("pool_frames.")}
    other = sorted(k for k in state if not k.startswith(("clip.", "pool_frames.")))
    clip, dropped = _split_dropped(clip)
    other_kept = [k for k in other if not _KNOWN_UNUSED_RE.match(k)]
    if other_kept:
        raise WeightsError(f"{path}: X-Pool-codebase checkpoint: " + _key_report([], other_kept)
                           + " (expected only clip.* and pool_frames.*)")
    if is_hf_clip_state(clip):
        try:
            clip_state = from_hf_clip(clip)
        except WeightsError as err:
            raise WeightsError(f"{path}: clip.*: {err}") from None
    elif is_open_clip_state(clip):
        clip_state = clip  # OpenAI's CLIP module (the code's non-huggingface path) has open_clip's layout
    else:
        raise WeightsError(f"{path}: clip.* holds neither Hugging Face nor OpenAI CLIP weights")
    pooling = from_xpool_pooling(pool) if pool else None
    return LoadedWeights("xpool-codebase", path, clip_state, pooling, True,
                         [f"clip.{k}" for k in dropped] + [k for k in other if k not in other_kept])


# --------------------------------------------------------------------------------------------------------------
# loading with a report

def _key_report(missing, unexpected, limit: int = 10) -> str:
    def names(keys):
        keys = list(keys)
        more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
        return ", ".join(keys[:limit]) + more

    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s): {names(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s): {names(unexpected)}")
    return "; ".join(parts) or "all keys match"


def load_state(module: torch.nn.Module, state: dict, what: str) -> None:
    """Load `state` into `module` requiring every key on both sides (unexpected keys in KNOWN_UNUSED are
    skipped); WeightsError with a report of missing / unexpected keys and shape mismatches otherwise."""
    state = {k: v for k, v in state.items() if not _KNOWN_UNUSED_RE.match(k)}
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k} {tuple(state[k].shape)} (model: {tuple(own[k].shape)})" for k in sorted(set(own) & set(state))
              if tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or unexpected or shapes:
        report = _key_report(missing, unexpected)
        if shapes:
            report += f"; {len(shapes)} shape mismatch(es): {', '.join(shapes[:5])}"
        raise WeightsError(f"{what}: {report}")
    module.load_state_dict(state, strict=True)
