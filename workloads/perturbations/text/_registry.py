"""Registry of the text (t2v) perturbations and what every type shares.

A type registers a `make_sampler(severity, assets) -> Sampler`. A Sampler produces successive perturbation attempts of
one caption from that caption's own random stream (`CaptionStream`); the engine (`_engine.py`) calls it once, or
repeatedly under the similarity retry, and handles empty outputs, faithfulness flags and statistics for every type.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from workloads.registry import Registry
from workloads.seeding import stable_seed

LEVELS = ("character", "word", "sentence")
SEVERITIES = {"character": (1, 2, 3, 4, 5, 6, 7), "word": (1, 2, 3, 4, 5, 6, 7), "sentence": (1,)}
# The authors' example config: every character type at 7, every word type at 2, the sentence types at 1.
DEFAULT_SEVERITIES = {"character": 7, "word": 2, "sentence": 1}

# Every asset key any type reads; a key outside this set is a typo and is rejected.
ASSET_KEYS = ("precomputed", "wordnet", "sentence_encoder", "back_translation_models", "styleformer_models",
              "device")

TEXT_PERTURBATIONS = Registry("text perturbation", package="workloads.perturbations.text")


def ratio(severity: int) -> float:
    """The authors' edit ratio, computed as they do (0.05 * severity in floating point, e.g. 0.35000000000000003)."""
    return 0.05 * severity


class CaptionStream:
    """The random streams of one caption: `random` (a `random.Random`, consumed exactly as the authors' code consumes
    Python's global `random`) and `next_seed()` for libraries seeded per call (torch sampling)."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.random = random.Random(self.seed)
        self._calls = 0

    def next_seed(self) -> int:
        self._calls += 1
        return stable_seed(self.seed, "call", self._calls)


@dataclass
class Sampler:
    """`sample(text, stream, count)` -> `count` successive attempts (a `None` or empty attempt means "no output").
    `faithful`: whether the outputs are the authors' algorithm with the reference assets; `reason` says why not.
    `meta`: JSON-able description (versions, model paths) merged into PerturbedCaptions.meta."""

    sample: Callable[[str, CaptionStream, int], list]
    faithful: bool = True
    reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TextPerturbation:
    name: str
    level: str                  # "character" | "word" | "sentence"
    similarity_retry: bool      # the authors' retry until the sentence-embedding cosine to the original is >= 0.9
    make_sampler: Callable[[int, Mapping[str, Any]], Sampler]
    asset_keys: tuple[str, ...]  # the assets it reads besides `precomputed`
    missing: Callable[[Mapping[str, Any]], str | None]  # None when it can run with these assets, else why not
    doc: str


def _nothing_missing(assets: Mapping[str, Any]) -> str | None:
    return None


def register(name: str, *, order: float, level: str, similarity_retry: bool, asset_keys: tuple[str, ...] = (),
             missing: Callable[[Mapping[str, Any]], str | None] = _nothing_missing, doc: str = ""):
    """Register `make_sampler(severity, assets)` of one type; `order` is its column in the paper's Table 3."""
    if level not in LEVELS:
        raise ValueError(f"text perturbation {name!r}: level must be one of {LEVELS}, got {level!r}")
    unknown = set(asset_keys) - set(ASSET_KEYS)
    if unknown:
        raise ValueError(f"text perturbation {name!r}: unknown asset keys {sorted(unknown)}; known: {ASSET_KEYS}")

    def wrap(make_sampler):
        info = TextPerturbation(name, level, similarity_retry, make_sampler, tuple(asset_keys), missing,
                                (doc or make_sampler.__doc__ or "").strip())
        TEXT_PERTURBATIONS.add(name, info, order=order, level=level, similarity_retry=similarity_retry)
        return make_sampler

    return wrap


def get(name: str) -> TextPerturbation:
    return TEXT_PERTURBATIONS.lookup(name)


def check_severity(name: str, severity: int) -> int:
    """The severity as an int, or a ValueError naming the severities this type allows."""
    level = get(name).level
    allowed = SEVERITIES[level]
    if not isinstance(severity, bool) and isinstance(severity, (int, np.integer)) and int(severity) in allowed:
        return int(severity)
    raise ValueError(f"text perturbation {name!r} ({level} level) takes severity one of {list(allowed)}, "
                     f"got {severity!r}")


def check_assets(assets: Mapping[str, Any]) -> None:
    unknown = sorted(set(assets) - set(ASSET_KEYS))
    if unknown:
        raise ValueError(f"unknown text perturbation asset(s) {unknown}; known assets: {', '.join(ASSET_KEYS)}")


def default_device(assets: Mapping[str, Any]) -> str:
    device = assets.get("device")
    if device:
        return str(device)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
