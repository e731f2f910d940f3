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
