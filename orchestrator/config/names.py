"""The names a grid may use, read from the workloads registries (the only list of each kind). The registries read
names from their packages' source without importing the entries, so listing them never starts torch."""
from __future__ import annotations

from workloads.backbones import BACKBONES
from workloads.datasets import DATASETS
from workloads.methods import METHODS
from workloads.perturbations.text import TEXT_PERTURBATIONS
from workloads.perturbations.video import VIDEO_PERTURBATIONS


def known_datasets() -> list[str]:
    return list(DATASETS.names())


def known_backbones() -> list[str]:
    return list(BACKBONES.names())


def known_methods() -> list[str]:
    return list(METHODS.names())


def known_video_perturbations() -> list[str]:
    return list(VIDEO_PERTURBATIONS.names())


def known_text_perturbations() -> list[str]:
    return list(TEXT_PERTURBATIONS.names())
