"""Local transformers models for the sentence-level types, loaded once per (folder, device, kind). No downloads:
only folders given as assets are read (HF_HUB_OFFLINE is honoured by transformers)."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

_CACHE: dict[tuple[str, str, str], tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def is_model_folder(path: Any) -> bool:
    return isinstance(path, (str, os.PathLike)) and (Path(path).expanduser() / "config.json").is_file()


def load(path: str | os.PathLike, device: str, kind: str = "seq2seq") -> tuple[Any, Any]:
    """(tokenizer, model) of a local folder, in eval mode on `device`; kind "seq2seq" or "classifier"."""
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

    folder = str(Path(path).expanduser())
    if not is_model_folder(folder):
        raise ValueError(f"{folder!r} is not a model folder (no config.json)")
    key = (folder, device, kind)
    with _LOCK:
        if key not in _CACHE:
            cls = AutoModelForSeq2SeqLM if kind == "seq2seq" else AutoModelForSequenceClassification
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = cls.from_pretrained(folder).eval().to(device)
            _CACHE[key] = (tokenizer, model)
        return _CACHE[key]


def clear_cache() -> None:
    """Forget every loaded model (they hold GPU or CPU memory until then)."""
    with _LOCK:
        _CACHE.clear()


def cuda_devices(device: str) -> list[int]:
    """The CUDA device indices whose random state a sampling call on `device` uses (for torch.random.fork_rng)."""
    import torch

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return []
    return [torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()]
