"""A video-text retrieval model: an open_clip CLIP (image tower applied per frame, text tower) plus a temporal
pooling head (CLIP4Clip mean pooling or X-Pool text-conditioned attention pooling).

Features are returned UNnormalised, as the reference's TTA harness consumes them (docs/faithfulness.md: The online
loop); callers
normalise where the method they implement does.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from workloads.video_io import CLIP_MEAN, CLIP_STD


class PoolingHead(nn.Module):
    """Turns frame features [Nv, T, D] (and, if text-conditioned, text features [Nt, D]) into video embeddings:
    [Nv, D] when not text-conditioned, else [Nv, Nt, D]."""

    text_conditioned: bool = False

    def forward(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


def cosine_similarity(text: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
    """Cosine similarity [Nt, Nv] between texts [Nt, D] and pooled videos [Nv, D] or [Nv, Nt, D] (one pooled
    embedding per (video, text) pair, as X-Pool produces)."""
    t = F.normalize(text, dim=-1)
    v = F.normalize(pooled, dim=-1)
    if v.dim() == 2:
        return t @ v.t()
    if v.dim() == 3 and v.shape[1] == t.shape[0]:
        return torch.einsum("td,vtd->tv", t, v)
    raise ValueError(f"pooled videos must be [Nv, D] or [Nv, Nt={t.shape[0]}, D], got {tuple(v.shape)}")


def _trims_padding(clip: nn.Module, tokenizer) -> bool:
    """Whether the text tower is open_clip's built-in CLIP one with a causal mask, fed by its SimpleTokenizer
    (padding id 0), pooling a token that precedes the padding (argmax = EOT, eos, first); others run unchanged."""
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    return (type(clip) is open_clip.CLIP and isinstance(tokenizer, SimpleTokenizer)
            and getattr(clip, "attn_mask", None) is not None and clip.text_pool_type in ("argmax", "eos", "first"))


class VideoTextModel(nn.Module):
    def __init__(self, clip: nn.Module, pooling: PoolingHead, tokenizer, *, backbone: str, clip_model: str,
                 image_size: int, mean: Sequence[float] = CLIP_MEAN, std: Sequence[float] = CLIP_STD):
        super().__init__()
        self.clip = clip
        self.pooling = pooling
        self.tokenizer = tokenizer
        self.backbone = backbone
        self.clip_model = clip_model
        self.image_size = int(image_size)
        self.register_buffer("pixel_mean", torch.tensor(mean).view(1, 1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(std).view(1, 1, 3, 1, 1), persistent=False)
        self._trim_text = _trims_padding(clip, tokenizer)

    # -- inputs -------------------------------------------------------------------------------------------------
    def tokenize(self, captions: Sequence[str]) -> torch.Tensor:
        return self.tokenizer(list(captions))

    def preprocess_frames(self, frames_uint8: torch.Tensor) -> torch.Tensor:
        """uint8 [B, T, H, W, 3] at model resolution -> normalised float [B, T, 3, H, W] on the model's device."""
        if frames_uint8.dtype != torch.uint8 or frames_uint8.dim() != 5 or frames_uint8.shape[-1] != 3:
            raise ValueError(f"expected uint8 frames [B, T, H, W, 3], got {frames_uint8.dtype} "
                             f"{tuple(frames_uint8.shape)}")
        if frames_uint8.shape[2:4] != (self.image_size, self.image_size):
            raise ValueError(f"frames are {tuple(frames_uint8.shape[2:4])}, the model expects "
                             f"{self.image_size}x{self.image_size}; render at the model resolution")
        x = frames_uint8.to(self.pixel_mean.device, non_blocking=True).permute(0, 1, 4, 2, 3).float().div_(255.0)
        return (x - self.pixel_mean) / self.pixel_std

    # -- encoders -----------------------------------------------------------------------------------------------
    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B, L] token ids -> unnormalised [B, D]."""
        tokens = tokens.to(self.pixel_mean.device)
        clip = self.clip
        if not self._trim_text:
            return clip.encode_text(tokens, normalize=False)
        # open_clip runs the whole context (32 / 77 tokens) whatever the captions' length. With a causal mask no
        # position sees the padding after it, and the pooled EOT token comes before it, so cutting the batch at its
        # longest caption gives the same features (to float rounding) at a fraction of the cost: half of a
        # fine-tuning step's text work on the synthetic captions, ~6x less for MSRVTT captions in 77 tokens.
        from open_clip.transformer import text_global_pool

        used = (tokens != 0).any(dim=0).nonzero()
        n = int(used.max()) + 1 if len(used) else 1
        tokens = tokens[:, :n]
        cast = clip.transformer.get_cast_dtype()
        x = clip.token_embedding(tokens).to(cast) + clip.positional_embedding[:n].to(cast)
        x = clip.transformer(x, attn_mask=clip.attn_mask[:n, :n])
        x = clip.ln_final(x)
        x = text_global_pool(x, tokens, clip.text_pool_type, eos_token_id=getattr(clip, "text_eos_id", None))
        if isinstance(clip.text_projection, nn.Linear):
            return clip.text_projection(x)
        return x if clip.text_projection is None else x @ clip.text_projection

    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """Normalised float frames [B, T, 3, H, W] -> unnormalised frame features [B, T, D]."""
        b, t = frames.shape[:2]
        feats = self.clip.encode_image(frames.flatten(0, 1), normalize=False)
        return feats.view(b, t, -1)

    def pool(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return self.pooling(text, frames)

    def similarity(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """Cosine [Nt, Nv] from raw text features and raw frame features (pooling applied to whatever it is
        given; the caller decides on normalisation)."""
        return cosine_similarity(text, self.pool(text, frames))

    # -- adaptation ---------------------------------------------------------------------------------------------
    def query_tower(self, direction: str) -> list[nn.Module]:
        """Modules whose LayerNorms test-time adaptation updates: the video tower for v2t (video
        queries), the text tower for t2v. Projections, the pooling head and logit_scale are never adapted."""
        if direction == "v2t":
            return [self.clip.visual]
        if direction == "t2v":
            # open_clip keeps the text tower at top level: transformer blocks + final LayerNorm
            return [self.clip.transformer, self.clip.ln_final]
        raise ValueError(f"direction must be 'v2t' or 't2v', got {direction!r}")

    def query_layernorms(self, direction: str) -> list[nn.LayerNorm]:
        return [m for tower in self.query_tower(direction) for m in tower.modules() if isinstance(m, nn.LayerNorm)]

    @property
    def embed_dim(self) -> int:
        return int(self.clip.text_projection.shape[1]) if isinstance(self.clip.text_projection, torch.Tensor) \
            else int(self.clip.text_projection.out_features)
