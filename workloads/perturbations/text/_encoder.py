"""Sentence encoders for the similarity retry.

The authors compare `sentence-transformers/paraphrase-mpnet-base-v2` embeddings of the original and the perturbed
caption. That model folder (sentence-transformers layout: a transformers model and tokenizer at the top, mean pooling
described in 1_Pooling/config.json, the length limit in sentence_bert_config.json) is loaded here with `transformers`
alone. Any object with `encode(list[str]) -> np.ndarray` (one L2-normalised row per text) and a boolean `faithful`
attribute can stand in for it, e.g. the retrieval backbone's own text encoder (faithful=False).
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

STAND_IN_KEY = "mlvp_stand_in"  # set in config.json of the tiny random models of _tiny.py (never the reference)


def is_stand_in(folder: str | os.PathLike) -> bool:
    try:
        return bool(json.loads((Path(folder) / "config.json").read_text()).get(STAND_IN_KEY, False))
    except (OSError, ValueError):
        return False


class SentenceEncoder:
    """A sentence-transformers-style model folder: transformer + pooling (mean by default), rows L2-normalised.

    `faithful` is True unless the folder is one of our tiny stand-ins: a user-supplied folder is taken to be the
    reference paraphrase-mpnet-base-v2 (its path is recorded in the meta)."""

    def __init__(self, path: str | os.PathLike, device: str = "cpu", batch_size: int = 64):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.path = str(Path(path).expanduser())
        self.device = device
        self.batch_size = int(batch_size)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModel.from_pretrained(self.path).eval().to(device)
        self.pooling = _pooling_mode(Path(self.path))
        self.max_length = _max_length(Path(self.path), self.tokenizer)
        self.faithful = not is_stand_in(self.path)
        self._torch = torch

    def describe(self) -> dict[str, Any]:
        return {"kind": "model folder", "path": self.path, "pooling": self.pooling, "max_length": self.max_length,
                "faithful": self.faithful}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        rows = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state.float()
                if self.pooling == "cls":
                    pooled = hidden[:, 0]
                else:  # mean over real tokens, as sentence-transformers' Pooling does
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                rows.append(torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy())
        if not rows:
            return np.zeros((0, int(self.model.config.hidden_size)), dtype=np.float32)
        return np.concatenate(rows).astype(np.float32)


def _pooling_mode(folder: Path) -> str:
    cfg = folder / "1_Pooling" / "config.json"
    if not cfg.is_file():
        return "mean"
    modes = json.loads(cfg.read_text())
    if modes.get("pooling_mode_mean_tokens"):
        return "mean"
    if modes.get("pooling_mode_cls_token"):
        return "cls"
    raise ValueError(f"{cfg}: only mean or CLS pooling is supported, got {modes}")


def _max_length(folder: Path, tokenizer) -> int:
    cfg = folder / "sentence_bert_config.json"
    if cfg.is_file():
        length = json.loads(cfg.read_text()).get("max_seq_length")
        if length:
            return int(length)
    return int(min(getattr(tokenizer, "model_max_length", 512) or 512, 512))


_CACHE: dict[tuple[str, str], SentenceEncoder] = {}
_LOCK = threading.Lock()


def resolve(encoder: Any, device: str) -> Any:
    """The `sentence_encoder` asset as an encoder object: a folder path is loaded once per (path, device); an object
    must have `encode` and a boolean `faithful`."""
    if encoder is None:
        return None
    if isinstance(encoder, (str, os.PathLike)):
        path = str(Path(encoder).expanduser())
        if not (Path(path) / "config.json").is_file():
            raise ValueError(f"sentence_encoder {path!r} is not a model folder (no config.json)")
        with _LOCK:
            if (path, device) not in _CACHE:
                _CACHE[(path, device)] = SentenceEncoder(path, device=device)
            return _CACHE[(path, device)]
    if not callable(getattr(encoder, "encode", None)) or not isinstance(getattr(encoder, "faithful", None), bool):
        raise ValueError("sentence_encoder must be a model folder path or an object with encode(list[str]) -> "
                         f"np.ndarray and a boolean attribute `faithful`; got {type(encoder).__name__}")
    return encoder


def missing_reason(encoder: Any) -> str | None:
    if isinstance(encoder, (str, os.PathLike)) and not (Path(encoder).expanduser() / "config.json").is_file():
        return f"sentence_encoder {str(encoder)!r} is not a model folder (no config.json)"
    return None


def describe(encoder: Any) -> dict[str, Any]:
    if hasattr(encoder, "describe"):
        return encoder.describe()
    return {"kind": type(encoder).__name__, "faithful": bool(encoder.faithful)}
