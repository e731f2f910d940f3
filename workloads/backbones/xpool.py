"""X-Pool text-conditioned attention pooling (Gorti et al. 2022; docs/faithfulness.md: Backbones and checkpoints).

For every (video, text) pair the text attends over the video's frames:
  1. a shared LayerNorm1 on text t [Nt, D] and frames f [Nv, T, D];
  2. q = Wq t, k = Wk f, v = Wv f (identity-initialised, zero bias), split into heads;
  3. attention over the T frames of (k . q) / sqrt(head_dim);
  4. o = Wo(sum a v) -> LayerNorm2 -> o + Dropout(Wlin o) -> LayerNorm3.
Output [Nv, Nt, D]: one pooled video embedding per (video, text) pair. Its LayerNorms live outside the CLIP towers,
so test-time adaptation never touches them (docs/faithfulness.md: The online loop).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from workloads.backbones.model import PoolingHead
from workloads.backbones.registry import register_backbone


@register_backbone("xpool", order=1)
class XPoolPooling(PoolingHead):
    text_conditioned = True

    def __init__(self, embed_dim: int, num_heads: int = 1, dropout: float = 0.3, **_: object):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.linear_proj = nn.Linear(embed_dim, embed_dim)
        self.layer_norm1 = nn.LayerNorm(embed_dim)
        self.layer_norm2 = nn.LayerNorm(embed_dim)
        self.layer_norm3 = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj, self.linear_proj):
            nn.init.eye_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        nt, nv, t = text.shape[0], frames.shape[0], frames.shape[1]
        h, hd = self.num_heads, self.head_dim
        text = self.layer_norm1(text)
        frames = self.layer_norm1(frames)
        q = self.q_proj(text).view(nt, h, hd)                    # [Nt, h, hd]
        k = self.k_proj(frames).view(nv, t, h, hd)               # [Nv, T, h, hd]
        v = self.v_proj(frames).view(nv, t, h, hd)
        logits = torch.einsum("nhd,vthd->vhtn", q, k) / math.sqrt(hd)  # [Nv, h, T, Nt]
        weights = logits.softmax(dim=2)                          # over frames
        attn = torch.einsum("vhtn,vthd->vnhd", weights, v).reshape(nv, nt, self.embed_dim)
        out = self.layer_norm2(self.out_proj(attn))
        out = out + self.dropout(self.linear_proj(out))
        return self.layer_norm3(out)                             # [Nv, Nt, D]
