"""A video-text retrieval model: an open_clip CLIP (image tower applied per frame, text tower) plus a head
registered as the backbone (CLIP4Clip mean pooling, X-Pool text-conditioned attention pooling, HVP-Net's hierarchical
matching, TCD's OCR plug-in).

Features are returned UNnormalised, as the reference's TTA harness consumes them (docs/faithfulness.md: The online
loop); callers normalise where the method they implement does.

The backbone contract (docs/architecture.md: "A backbone's features and score"): every side of a retrieval pair is a
`Features`: `main`, the backbone's documented global embedding (texts [N, D]; videos per frame [N, T, D], which
`encode_text` / `encode_frames` return), plus `parts`, the extra tensors its own score reads (empty for CLIP4Clip and
X-Pool). Ranking uses `score(text, video)` [Nt, Nv], on the cosine scale (within [-1, 1]: the methods' temperatures
assume it); the methods' feature terms (TCR, HAT-VTR, TITAN, the diagnostics) read `main` only. A method that moves
or normalises `main` (`Features.with_main`) changes the terms of the score that read it and leaves the parts as
they are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from workloads.video_io import CLIP_MEAN, CLIP_STD


@dataclass
class Features:
    """One side of retrieval pairs for N items: `main` [N, D] (texts) or [N, T, D] (videos, per frame), the global
    embedding; `parts`, tensors with N rows the backbone's score also reads (HVP-Net's words, shallow levels and
    compressed patches; TCD's OCR captions)."""

    main: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self):
        for name, part in self.parts.items():
            if part.shape[0] != self.main.shape[0]:
                raise ValueError(f"part {name!r} has {part.shape[0]} rows, main has {self.main.shape[0]}")

    def __len__(self) -> int:
        return self.main.shape[0]

    def with_main(self, main: torch.Tensor) -> "Features":
        """The same parts with another global embedding (normalised, moved by a method)."""
        return Features(main, self.parts)

    def rows(self, index) -> "Features":
        return Features(self.main[index], {k: v[index] for k, v in self.parts.items()})

    def to(self, device=None, dtype: torch.dtype | None = None) -> "Features":
        """On `device`; floating parts (stored fp16 in the gallery cache) cast to `dtype` when given."""
        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype if dtype is not None and t.is_floating_point() else None)
        return Features(cast(self.main), {k: cast(v) for k, v in self.parts.items()})

    @staticmethod
    def cat(items: Sequence["Features"]) -> "Features":
        """Rows of several batches; a part whose length varies by batch (words: each batch is cut at its longest
        caption) is zero-padded along dim 1 to the longest."""
        def join(parts: list[torch.Tensor]) -> torch.Tensor:
            n = max(t.shape[1] for t in parts) if parts[0].dim() > 1 else 0
            return torch.cat([t if t.dim() < 2 or t.shape[1] == n else
                              torch.nn.functional.pad(t, [0, 0] * (t.dim() - 2) + [0, n - t.shape[1]])
                              for t in parts])
        return Features(torch.cat([f.main for f in items]),
                        {k: join([f.parts[k] for f in items]) for k in items[0].parts})


class PoolingHead(nn.Module):
    """The backbone-specific part of a retrieval model. As a pooling head it turns frame features [Nv, T, D] (and,
    if text-conditioned, text features [Nt, D]) into video embeddings: [Nv, D] when not text-conditioned, else
    [Nv, Nt, D]. Its hooks are the backbone contract (module docstring); the defaults are a single cosine of pooled
    features, so a pooling head overrides none of them."""

    text_conditioned: bool = False
    # per-clip inputs the video side reads besides its frames, which whoever encodes clips supplies in `side`
    # ({"ocr": the clip's OCR windows}: workloads/ocr.py); () for the pooling heads
    video_inputs: ClassVar[tuple[str, ...]] = ()

    def forward(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def text_features(self, model: "VideoTextModel", tokens: torch.Tensor) -> Features:
        return Features(model.encode_text(tokens))

    def video_features(self, model: "VideoTextModel", frames: torch.Tensor,
                       side: dict[str, Any] | None = None) -> Features:
        return Features(model.encode_frames(frames))

    def score(self, text: Features, video: Features) -> torch.Tensor:
        """Scores [Nt, Nv] on the cosine scale: here the cosine of the texts and their pooled videos."""
        return cosine_similarity(text.main, self(text.main, video.main))

    def finetune_loss(self, model: "VideoTextModel", text: Features, video: Features) -> torch.Tensor | None:
        """The fine-tuning loss of a batch of pairs (row i of each side), or None: the shared symmetric InfoNCE of
        workloads/backbones/finetune.py `clip_loss`."""
        return None


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
        if not self._trim_text:
            return self.clip.encode_text(tokens, normalize=False)
        return self.encode_text_tokens(tokens)[0]

    def encode_text_tokens(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, L] token ids -> (sentence features [B, D] as `encode_text`, every position's features through ln_final
        and the projection [B, n, D], the ids [B, n]), n = the batch's longest caption. Needs open_clip's built-in
        text tower (word-level backbones: HVP-Net)."""
        tokens = tokens.to(self.pixel_mean.device)
        clip = self.clip
        if not self._trim_text:
            raise ValueError(f"{type(clip).__name__} with {type(self.tokenizer).__name__}: word features need "
                             "open_clip's built-in CLIP text tower")
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
        pooled = text_global_pool(x, tokens, clip.text_pool_type, eos_token_id=getattr(clip, "text_eos_id", None))
        if isinstance(clip.text_projection, nn.Linear):
            return clip.text_projection(pooled), clip.text_projection(x), tokens
        if clip.text_projection is None:
            return pooled, x, tokens
        return pooled @ clip.text_projection, x @ clip.text_projection, tokens

    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """Normalised float frames [B, T, 3, H, W] -> unnormalised frame features [B, T, D]."""
        b, t = frames.shape[:2]
        feats = self.clip.encode_image(frames.flatten(0, 1), normalize=False)
        return feats.view(b, t, -1)

    def pool(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return self.pooling(text, frames)

    # -- the backbone contract (module docstring): features with their parts, and the backbone's own score ----------
    @property
    def video_inputs(self) -> tuple[str, ...]:
        return tuple(self.pooling.video_inputs)

    def text_features(self, tokens: torch.Tensor) -> Features:
        """[B, L] token ids -> Features (main: unnormalised [B, D])."""
        return self.pooling.text_features(self, tokens)

    def video_features(self, frames: torch.Tensor, side: dict[str, Any] | None = None) -> Features:
        """Normalised float frames [B, T, 3, H, W] (+ the clips' `side` inputs) -> Features (main: [B, T, D])."""
        if self.video_inputs and side is None:
            raise ValueError(f"backbone {self.backbone!r} reads {', '.join(self.video_inputs)} beside the frames; "
                             "pass side={...} (the trial reads them from the render cache)")
        return self.pooling.video_features(self, frames, side)

    def score(self, text: Features, video: Features) -> torch.Tensor:
        """The backbone's ranking scores [Nt, Nv], on the cosine scale."""
        return self.pooling.score(text, video)

    @property
    def own_score(self) -> bool:
        """Whether the head scores with its own `score` (HVP-Net, TCD) rather than the cosine of pooled features: its
        score may depend on the scale of `main` (TCD's co-attention does), so a method that normalises features for
        its own terms must rank the features as encoded."""
        return type(self.pooling).score is not PoolingHead.score

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
