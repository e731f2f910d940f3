"""CLIP4Clip mean pooling (docs/faithfulness.md: Backbones and checkpoints): the video embedding is the mean of its
frame embeddings.

As in the reference this is the X-Pool-codebase "clip_baseline" with pooling_type "avg", not ArrowLuo's release.
Whether frames are L2-normalised before averaging is the caller's choice: the training/eval path normalises them,
the reference's TTA harness averages unnormalised features (docs/faithfulness.md: The online loop).
"""
from __future__ import annotations

import torch

from workloads.backbones.model import PoolingHead
from workloads.backbones.registry import register_backbone


@register_backbone("clip4clip", order=0)
class MeanPooling(PoolingHead):
    text_conditioned = False

    def __init__(self, embed_dim: int, **_: object):
        super().__init__()
        self.embed_dim = embed_dim

    def forward(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return frames.mean(dim=1)
