"""Backbone registry: grid names -> pooling-head classes."""
from __future__ import annotations

from typing import Callable

BACKBONES: dict[str, type] = {}


def register_backbone(name: str) -> Callable[[type], type]:
    def wrap(cls: type) -> type:
        if name in BACKBONES:
            raise ValueError(f"backbone {name!r} registered twice")
        BACKBONES[name] = cls
        cls.backbone_name = name
        return cls

    return wrap
