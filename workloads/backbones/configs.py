"""The open_clip model configs this project knows, read without importing open_clip (2-4 s): its own small
models (`mlvp-tiny`, `mlvp-micro`, in model_configs/) and the configs open_clip ships; and the name of this tool's
checkpoint format. Light on purpose: listing, planning and checkpoint detection read it without torch."""
from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path


CONFIG_DIR = Path(__file__).parent / "model_configs"


CHECKPOINT_FORMAT = "mlvp-backbone/1"  # defined here, not in convert (its MLVP), so that reading it imports no torch


@functools.cache
def _register_configs() -> None:
    import open_clip

    open_clip.add_model_config(CONFIG_DIR)


def model_config(clip_model: str) -> dict | None:
    """The open_clip config of `clip_model` (None when unknown). The project's own models and those open_clip ships
    are read from their JSON without importing open_clip (2-4 s), so planning, `status` and `resume` never import it
    (open_clip's registry is those same files: `open_clip.factory._rescan_model_configs`)."""
    # once open_clip is imported, ask it: configs may have been added at run time (`open_clip.add_model_config`)
    if "open_clip" not in sys.modules and clip_model and "/" not in clip_model and ":" not in clip_model:
        for path in _config_files(clip_model):
            cfg = json.loads(path.read_text())
            if all(k in cfg for k in ("embed_dim", "vision_cfg", "text_cfg")):
                return cfg
        return None
    import open_clip  # and hf-hub:/local-dir: names, which open_clip resolves

    _register_configs()
    return open_clip.get_model_config(clip_model)


def _config_files(clip_model: str) -> list[Path]:
    """The config files named `clip_model`, this project's first (they win in open_clip too: added last)."""
    folders = [CONFIG_DIR]
    spec = importlib.util.find_spec("open_clip")  # its folder, without importing it
    if spec is not None:
        folders += [Path(p) / "model_configs" for p in spec.submodule_search_locations or []]
    return [f / f"{clip_model}.json" for f in folders if (f / f"{clip_model}.json").is_file()]


def list_clip_models() -> list[str]:
    import open_clip

    _register_configs()
    return open_clip.list_models()


def weights_file_problem(path: str | Path) -> str | None:
    """Why a file cannot be a weights file, from its first bytes (None: it may be one): torch.save's zip archive
    (TorchScript too), a legacy pickle, or safetensors (an 8-byte header length, then a JSON header). Read without
    torch, so a grid naming random bytes fails when it loads, not in every trial."""
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":
        return None
    if len(head) == 9 and head[8:9] == b"{" and 0 < int.from_bytes(head[:8], "little") < 100_000_000:
        return None
    what = "empty" if not head else f"starts with {head[:8]!r}"
    return (f"not a weights file ({what}; a checkpoint is a torch.save zip or pickle, or safetensors): "
            "check the path, or convert it (mlvp convert-checkpoint --help)")


def project_models() -> list[str]:
    """The open_clip configs this project ships (model_configs/: mlvp-tiny, mlvp-micro, ...)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def known_models() -> list[str]:
    """Every config name `model_config` can read without importing open_clip: the project's and open_clip's own."""
    spec = importlib.util.find_spec("open_clip")
    folders = [CONFIG_DIR] + [Path(p) / "model_configs" for p in (spec.submodule_search_locations or [])
                              if spec is not None]
    return sorted({p.stem for f in folders for p in f.glob("*.json")})
