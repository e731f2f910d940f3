"""TCD's scene-text plug-in (Zhao et al., AAAI 2026; docs/faithfulness.md: TCD) on CLIP4Clip or X-Pool: OCR captions
as a second modality of the video side. No authors' code exists; everything below is read from the paper.

Video side (`video_features`): CLIP's frame features V [T, D] (the main embedding, as CLIP4Clip's) and the OCR
windows of the clip (workloads/ocr.py: one window per sampled frame, read at the source resolution before the
resize, its words templated into "There are scene texts: ... in this frame.") encoded by CLIP's text tower: O [W, D]
(part `ocr`). With `ocr: false` every window reads "There is no scene text in this frame." (TCD without OCR): the
head then reads no OCR at all (`video_inputs` is empty, so no OCR entry is rendered or read for it), one window per
frame.
Score (`score`), for text T and a video (V, O), on L2-normalised features:
  1. video-OCR co-attention (Eq. 6-7): O~ = O + softmax(Q_V K_O^T / sqrt(D)) V_O W, V~ = V + softmax(Q_O K_V^T /
     sqrt(D)) V_V W' (residual, the value projections W, W' zero-initialised so that a fresh plug-in scores as its
     base: ours, the paper has no residual);
  2. hybrid clue (Eq. 8-11): learnable clues C_V, C_O plus type embeddings; C*_V = MHCA(C'_V, O~, O~), C*_O =
     MHCA(C'_O, V~, V~); C = (C*_V + C*_O) / 2 (in a cross-attention the clue's output does not depend on the other
     query rows of Eq. 9-10, so only the clue row is computed);
  3. S_TV: the base head on the co-attended frames V~: X-Pool's attention pooling (`base: xpool`), or the frames
     weighted by the query (Eq. 2), p = softmax over frames of cos(T, V~_n) x 100 / tau (`base: clip4clip`);
     S_TO = cos(T, sum_n q_n O~_n), q = softmax over windows of cos(T, O~_n) x 100 / tau; S_TH = cos(T, C);
     S = (S_TV + S_TO + S_TH) / 3 (Eq. 12-13). The query-conditioned weighting comes after the co-attention here
     (the paper weights before it), so that the co-attention and the clue are computed once per video, not per
     (text, video) pair; "x 100": CLIP's logit scale at its ceiling turns the paper's dot product of CLIP features
     into cosines (ours).
Fine-tuning loss (`finetune_loss`, Eq. 14-15): the symmetric InfoNCE of S at CLIP's logit scale + `cycle_weight`
(lambda, 0.1: the paper's TextVR / M4-ViteVQA value; 0.05 on MSRVTT) x the cycle-consistency loss of Eq. 3-5: from
frame i, a soft nearest OCR window (softmax of cosines / 0.1), back to a soft frame index mu; (i - mu)^2 averaged.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads.backbones.clip4clip import MeanPooling
from workloads.backbones.model import Features, PoolingHead, cosine_similarity
from workloads.backbones.registry import register_backbone
from workloads.backbones.xpool import XPoolPooling
from workloads.ocr import NO_TEXT, OCR_OPTIONS, window_caption
from workloads.options import Option, check_options

CLIP_SCALE = 100.0      # CLIP's logit scale at its ceiling (module docstring, step 3)
CYCLE_TEMPERATURE = 0.1

OPTIONS = {
    "base": Option(str, "clip4clip", choices=("clip4clip", "xpool"), doc="the retrieval model it plugs into"),
    **OCR_OPTIONS,   # ocr, engine: declared in workloads/ocr.py, where a plan reads them without torch
    "tau": Option(float, 5.0, above=0, doc="temperature of the query-conditioned weighting (Eq. 2)"),
    "heads": Option(int, 1, min=1, doc="heads of the clue attention (must divide the embedding size)"),
    "cycle_weight": Option(float, 0.1, min=0, doc="lambda of the cycle-consistency loss (Eq. 15)"),
}


class CoAttention(nn.Module):
    """x attends to y (Eq. 6-7), residual: x + softmax(q(x) k(y)^T / sqrt(D)) v(y), v zero-initialised."""

    def __init__(self, dim: int):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        nn.init.zeros_(self.v.weight)
        nn.init.zeros_(self.v.bias)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = (self.q(x) @ self.k(y).transpose(-2, -1) / math.sqrt(x.shape[-1])).softmax(dim=-1)
        return x + a @ self.v(y)


@register_backbone("tcd", order=3, ocr=True)   # ocr: it takes OCR_OPTIONS and reads OCR entries (workloads/ocr.py)
class TCDPlugin(PoolingHead):
    text_conditioned = True
    video_inputs = ("ocr",)   # per instance: () with `ocr: false`
    OPTIONS = OPTIONS

    def __init__(self, embed_dim: int, **options: Any):
        super().__init__()
        o = check_options("backbone 'tcd'", options, OPTIONS)
        if embed_dim % o["heads"]:
            raise ValueError(f"backbone 'tcd': heads {o['heads']} do not divide the embedding size {embed_dim}")
        self.options = o
        self.video_inputs = ("ocr",) if o["ocr"] else ()
        self.base = XPoolPooling(embed_dim) if o["base"] == "xpool" else MeanPooling(embed_dim)
        self.video_to_ocr, self.ocr_to_video = CoAttention(embed_dim), CoAttention(embed_dim)
        self.clues = nn.Parameter(torch.randn(2, embed_dim) * 0.02)        # C_V, C_O
        self.types = nn.Parameter(torch.zeros(3, embed_dim))               # clue, video, OCR type embeddings
        self.clue_attention = nn.MultiheadAttention(embed_dim, o["heads"], batch_first=True)

    @property
    def ocr_engine(self) -> str:
        """The OCR engine whose entries the video side reads (workloads/ocr.py)."""
        return self.options["engine"]

    def forward(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """The base head's pooling (what `VideoTextModel.pool` gives: frames without their OCR)."""
        return self.base(text, frames)

    # -- features -------------------------------------------------------------------------------------------------
    def video_features(self, model, frames: torch.Tensor, side: dict | None = None) -> Features:
        """main: CLIP's frame features [B, T, D]; part `ocr`: the OCR captions' text features [B, W, D] (without
        OCR: W = T windows of the no-text caption, whatever `side` holds)."""
        main = model.encode_frames(frames)
        if not self.options["ocr"]:
            captions = [NO_TEXT] * (main.shape[0] * main.shape[1])
        else:
            windows = side["ocr"]
            if len(windows) != main.shape[0] or len({len(w) for w in windows}) != 1:
                raise ValueError(f"tcd: {len(windows)} OCR window lists for {main.shape[0]} clips, or clips with "
                                 "different window counts")
            captions = [window_caption(w) for clip in windows for w in clip]
        unique = list(dict.fromkeys(captions))  # the no-text caption and a static sign repeat: encode each once
        encoded = torch.cat([model.encode_text(model.tokenize(unique[i:i + 256])) for i in range(0, len(unique), 256)])
        row = {c: i for i, c in enumerate(unique)}
        ocr = encoded[torch.tensor([row[c] for c in captions], device=encoded.device)]
        return Features(main, {"ocr": ocr.view(main.shape[0], -1, ocr.shape[-1]).to(main.dtype)})

    # -- score ----------------------------------------------------------------------------------------------------
    def fuse(self, video: Features) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per video: the co-attended frames V~ [Nv, T, D], windows O~ [Nv, W, D] and the hybrid clue C [Nv, D]."""
        v, o = video.main, video.parts["ocr"].to(video.main.dtype)
        o_co, v_co = self.video_to_ocr(o, v), self.ocr_to_video(v, o)
        n = v.shape[0]
        clue_v = (self.clues[0] + self.types[0]).expand(n, 1, -1)
        clue_o = (self.clues[1] + self.types[0]).expand(n, 1, -1)
        c_v = self.clue_attention(clue_v, o_co + self.types[2], o_co + self.types[2], need_weights=False)[0]
        c_o = self.clue_attention(clue_o, v_co + self.types[1], v_co + self.types[1], need_weights=False)[0]
        return v_co, o_co, ((c_v + c_o) / 2).squeeze(1)

    def weighted(self, t: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        """cos(t, sum_n w_n seq_n), w = softmax_n(cos(t, seq_n) 100 / tau): [Nt, Nv] for t [Nt, D], seq [Nv, N, D]."""
        cos = torch.einsum("td,vnd->tvn", t, F.normalize(seq, dim=-1))
        w = (cos * (CLIP_SCALE / self.options["tau"])).softmax(dim=-1)
        pooled = torch.einsum("tvn,vnd->tvd", w, seq)
        return torch.einsum("td,tvd->tv", t, F.normalize(pooled, dim=-1))

    def terms(self, text: Features, video: Features) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """S_TV, S_TO, S_TH [Nt, Nv]."""
        t = F.normalize(text.main, dim=-1)
        v_co, o_co, clue = self.fuse(video)
        if self.options["base"] == "xpool":
            s_tv = cosine_similarity(text.main, self.base(text.main, v_co))
        else:
            s_tv = self.weighted(t, v_co)
        return s_tv, self.weighted(t, o_co), t @ F.normalize(clue, dim=-1).t()

    def score(self, text: Features, video: Features, chunk: int = 256) -> torch.Tensor:
        return torch.cat([torch.stack(self.terms(text, video.rows(slice(i, i + chunk)))).mean(0)
                          for i in range(0, len(video), chunk)], dim=1)

    def finetune_loss(self, model, text: Features, video: Features) -> torch.Tensor:
        sims = torch.stack(self.terms(text, video)).mean(0)
        scale = model.clip.logit_scale.clamp(max=math.log(100)).exp()
        target = torch.arange(len(text), device=sims.device)
        loss = (F.cross_entropy(sims * scale, target) + F.cross_entropy(sims.t() * scale, target)) / 2
        if self.options["cycle_weight"] > 0:
            loss = loss + self.options["cycle_weight"] * cycle_loss(video.main, video.parts["ocr"].to(video.main.dtype))
        return loss


def cycle_loss(frames: torch.Tensor, ocr: torch.Tensor) -> torch.Tensor:
    """TCD's calibration loss (Eq. 3-5) of frames [B, T, D] and OCR windows [B, W, D]: from frame i a soft nearest
    window, from it a soft frame index mu_i; the mean of (i - mu_i)^2."""
    v, o = F.normalize(frames, dim=-1), F.normalize(ocr, dim=-1)
    alpha = (v @ o.transpose(1, 2) / CYCLE_TEMPERATURE).softmax(dim=-1)         # [B, T, W]
    back = F.normalize(alpha @ ocr, dim=-1)                                      # [B, T, D]
    beta = (back @ v.transpose(1, 2) / CYCLE_TEMPERATURE).softmax(dim=-1)       # [B, T, T]
    index = torch.arange(frames.shape[1], device=frames.device, dtype=beta.dtype)
    mu = beta @ index
    return ((index - mu) ** 2).mean()
