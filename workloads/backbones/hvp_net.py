"""HVP-Net (Xie, Zhang et al.; docs/faithfulness.md: HVP-Net), in its query-side mode: hierarchical CLIP features
and a score of three terms per level, with every text weighting its OWN words.

Video side, per clip of T frames (`video_features`):
  1. CLIP's vision tower, read after blocks 1, 6 and 12 of a 12-block ViT (`shallow`, `middle`, the last; on a
     shallower model the same fractions of its depth: mlvp-tiny's 4 blocks -> 1, 2, 4; mlvp-micro's 2 -> 1, 2),
     every token through `ln_post` and the projection (open_clip's public `forward_intermediates`);
  2. frame features F_l [T, D]: each frame's class token at level l (at the last level: the main embedding, CLIP's
     own image feature);
  3. patch features: all T (1 + M) tokens of level l (class tokens included, as the authors' code) through the
     Multi-layer Patch Processing (MPP): `mpp_blocks` (3) blocks shared by the levels, each a token convolution
     (kernel 3 over the sequence, residual), LayerNorm, a saliency score (a linear layer), DPC-KNN clustering of the
     N tokens into ceil(N `keep_ratio`) clusters (`knn` neighbours for the density), a saliency-weighted merge, and
     a cross-attention block (the merged tokens attend to the N tokens, the saliency added to the logits):
     ViT-B/32's 12 x 50 = 600 tokens -> 75; mlvp-tiny's 12 x 17 = 204 -> 26.
Text side (`text_features`): the sentence feature (CLIP's, the main embedding) and the word features (every
position through ln_final and the projection; the words are the positions after the start token up to the end
token).
Score per (text t, video v), level l (cosines of L2-normalised features; `score`):
  SF = sum_f a_f cos(s_t, F_vf)            a = softmax over frames of MLP_f(F_v)
  SP = sum_k b_k cos(s_t, P_vk)            b = softmax over patches of MLP_p(P_v)
  WP = (sum_w c_tw max_k cos(w_tw, P_vk) + sum_k b_k max_w cos(w_tw, P_vk)) / 2
                                           c = softmax over t's words of MLP_w(w_t): THE TEXT'S OWN WORDS
  S = the mean of the 3 levels x 3 terms (the paper sums them: the same ranking; the mean keeps S a weighted cosine
  in [-1, 1], which the TTA methods' temperatures assume).
Fine-tuning loss (`finetune_loss`): the sum over levels and terms of the symmetric InfoNCE of each term's matrix at
CLIP's logit scale (paper Eq. 2).

What differs from the public code (boyun-zhang/HVP-Net, docs/faithfulness.md: HVP-Net):
- word weights: the code weights text a's words by the MLP of the caption PAIRED with video b ('abw,bw->ab'), at
  test time the gallery video's own test caption: a label leak. Here text t's words weight text t's terms, so a
  video's features and scores never read a caption (tests/test_backbones.py);
- weights are softmax-normalised over their tokens (the code uses the raw MLP output, an unbounded score) and
  padding positions are masked out of the word terms (the code includes them);
- DPC-KNN breaks density ties by token position instead of random noise, so encodings are deterministic.
No checkpoint is published; no published number applies to this mode.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads.backbones.model import Features, PoolingHead
from workloads.backbones.registry import register_backbone
from workloads.options import Option, check_options

# ViT-B/32 has 12 blocks; HVP-Net reads blocks 1, 6, 12 (1-based)
REFERENCE_DEPTH = 12

OPTIONS = {
    "shallow": Option(int, 1, min=1, max=REFERENCE_DEPTH, doc="shallow block of a 12-block ViT (scaled to depth)"),
    "middle": Option(int, 6, min=1, max=REFERENCE_DEPTH, doc="middle block of a 12-block ViT (scaled to depth)"),
    "mpp_blocks": Option(int, 3, min=1, max=8, doc="compression blocks, shared by the levels"),
    "keep_ratio": Option(float, 0.5, above=0, max=1, doc="clusters kept per block, as a share of its tokens"),
    "knn": Option(int, 3, min=1, doc="neighbours of DPC-KNN's density"),
    "heads": Option(int, 8, min=1, doc="heads of the cross-attention (must divide the embedding size)"),
}


def level_blocks(depth: int, shallow: int = 1, middle: int = 6) -> list[int]:
    """0-based indices of the blocks read on a ViT of `depth` blocks: the 12-block choice scaled to the depth,
    deduplicated, the last block always last."""
    picks = [max(1, min(depth, round(b * depth / REFERENCE_DEPTH))) for b in (shallow, middle)] + [depth]
    return sorted({p - 1 for p in picks})


def weight_mlp(dim: int) -> nn.Sequential:
    """The authors' token-weight MLP: D -> 2D -> D -> 1 with ReLUs."""
    return nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))


def dpc_knn(x: torch.Tensor, clusters: int, k: int) -> torch.Tensor:
    """Density-peak clustering with k-nearest-neighbour density of tokens x [B, N, C]: the cluster index [B, N] of
    each token; the `clusters` centres are the tokens with the largest density x distance to a denser token."""
    with torch.no_grad():
        b, n, c = x.shape
        dist = torch.cdist(x.float(), x.float()) / math.sqrt(c)
        near = torch.topk(dist, k=min(k, n), dim=-1, largest=False).values
        density = (-(near ** 2).mean(dim=-1)).exp()
        # ties broken by position, deterministically (the authors add uniform noise of 1e-6)
        density = density + torch.arange(n, device=x.device, dtype=density.dtype) * 1e-9
        denser = (density[:, None, :] > density[:, :, None]).to(dist.dtype)
        far = dist.flatten(1).max(dim=-1).values[:, None, None]
        delta = (dist * denser + far * (1 - denser)).min(dim=-1).values
        centres = torch.topk(delta * density, k=clusters, dim=-1).indices              # [B, K]
        to_centre = torch.gather(dist, 1, centres[..., None].expand(b, clusters, n))    # [B, K, N]
        assign = to_centre.argmin(dim=1)                                                # [B, N]
        assign.scatter_(1, centres, torch.arange(clusters, device=x.device).expand(b, clusters))
    return assign


class CompressionBlock(nn.Module):
    """One MPP block: compress N tokens into ceil(N keep_ratio) and refine them by cross-attention to the N."""

    def __init__(self, dim: int, heads: int, keep_ratio: float, knn: int):
        super().__init__()
        self.keep_ratio, self.knn, self.heads = keep_ratio, knn, heads
        self.conv = nn.Conv1d(dim, dim, kernel_size=3, padding=1, bias=False)
        self.norm = nn.LayerNorm(dim)
        self.saliency = nn.Linear(dim, 1)
        self.attn_norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        for lin in (self.q, self.kv, self.proj):
            nn.init.trunc_normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        x = self.norm(x)
        score = self.saliency(x)                                                       # [B, N, 1]
        k = max(1, math.ceil(n * self.keep_ratio))
        assign = dpc_knn(x, k, self.knn)
        # saliency-weighted mean per cluster (softmax of the scores within each cluster: exp, normalised)
        weight = (score - score.amax(dim=1, keepdim=True)).exp()
        index = assign[..., None]
        total = torch.zeros(b, k, 1, dtype=weight.dtype, device=x.device).scatter_add_(1, index, weight)
        merged = torch.zeros(b, k, d, dtype=x.dtype, device=x.device).scatter_add_(
            1, index.expand(b, n, d), x * (weight / total.gather(1, index)).to(x.dtype))
        q_in, kv_in = self.attn_norm(merged), self.attn_norm(x)
        h, hd = self.heads, d // self.heads
        q = self.q(q_in).view(b, k, h, hd).transpose(1, 2)
        key, value = self.kv(kv_in).view(b, n, 2, h, hd).permute(2, 0, 3, 1, 4)
        logits = q @ key.transpose(-2, -1) / math.sqrt(hd) + score.view(b, 1, 1, n).to(q.dtype)
        out = (logits.softmax(dim=-1) @ value).transpose(1, 2).reshape(b, k, d)
        return merged + self.proj(out)


@register_backbone("hvp_net", order=2)
class HVPNet(PoolingHead):
    text_conditioned = True  # its score reads the text's words: no video embedding without a text
    OPTIONS = OPTIONS

    def __init__(self, embed_dim: int, **options: Any):
        super().__init__()
        o = check_options("backbone 'hvp_net'", options, OPTIONS)
        if embed_dim % o["heads"]:
            raise ValueError(f"backbone 'hvp_net': heads {o['heads']} do not divide the embedding size {embed_dim}")
        self.options = o
        self.mpp = nn.ModuleList([CompressionBlock(embed_dim, o["heads"], o["keep_ratio"], o["knn"])
                                  for _ in range(o["mpp_blocks"])])
        self.frame_weight, self.patch_weight, self.word_weight = (weight_mlp(embed_dim) for _ in range(3))

    def forward(self, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:  # pragma: no cover - guard
        raise TypeError("hvp_net scores with its parts: call VideoTextModel.score, not pool")

    # -- features -------------------------------------------------------------------------------------------------
    def blocks(self, model) -> list[int]:
        depth = len(model.clip.visual.transformer.resblocks)
        return level_blocks(depth, self.options["shallow"], self.options["middle"])

    def video_features(self, model, frames: torch.Tensor, side: dict | None = None) -> Features:
        """main: CLIP's image features per frame (the last level's frame features) [B, T, D]; parts: `frames`
        [B, levels - 1, T, D] (the shallower levels' class tokens) and `patches` [B, levels, K, D] (after MPP)."""
        visual = model.clip.visual
        b, t = frames.shape[:2]
        blocks = self.blocks(model)
        out = visual.forward_intermediates(frames.flatten(0, 1), indices=blocks, output_fmt="NLC",
                                           output_extra_tokens=True)
        levels = []
        for cls, patch in zip(out["image_intermediates_prefix"], out["image_intermediates"]):
            tokens = visual.ln_post(torch.cat([cls, patch], dim=1))
            levels.append(tokens @ visual.proj)                                          # [B T, 1 + M, D]
        main = out["image_features"].view(b, t, -1)
        shallow = torch.stack([lv[:, 0].view(b, t, -1) for lv in levels[:-1]], dim=1)    # [B, L-1, T, D]
        patches = torch.stack([self.compress(lv.reshape(b, -1, lv.shape[-1])) for lv in levels], dim=1)
        return Features(main, {"frames": shallow, "patches": patches})

    def compress(self, tokens: torch.Tensor) -> torch.Tensor:
        for block in self.mpp:
            tokens = block(tokens)
        return tokens

    def text_features(self, model, tokens: torch.Tensor) -> Features:
        """main: the sentence feature [B, D]; parts: `words` [B, n, D] and `word_mask` [B, n] (1 after the start
        token up to and with the end token)."""
        sentence, words, ids = model.encode_text_tokens(tokens)
        mask = (ids != 0) & (torch.arange(ids.shape[1], device=ids.device) > 0)
        return Features(sentence, {"words": words, "word_mask": mask.to(words.dtype)})

    # -- score ----------------------------------------------------------------------------------------------------
    def level_scores(self, text: Features, video: Features) -> list[torch.Tensor]:
        """The 3 x levels score matrices [Nt, Nv] (SF, SP, WP per level, shallow first)."""
        s = F.normalize(text.main, dim=-1)
        words = F.normalize(text.parts["words"], dim=-1)
        mask = text.parts["word_mask"] > 0
        c = self.word_weight(text.parts["words"]).squeeze(-1).masked_fill(~mask, float("-inf")).softmax(-1)
        frame_levels = list(video.parts["frames"].unbind(1)) + [video.main]
        out = []
        for frames, patches in zip(frame_levels, video.parts["patches"].unbind(1)):
            a = self.frame_weight(frames).squeeze(-1).softmax(-1)                         # [Nv, T]
            b = self.patch_weight(patches).squeeze(-1).softmax(-1)                        # [Nv, K]
            f, p = F.normalize(frames, dim=-1), F.normalize(patches, dim=-1)
            sf = torch.einsum("td,vfd,vf->tv", s, f, a)
            sp = torch.einsum("td,vkd,vk->tv", s, p, b)
            sims = torch.einsum("twd,vkd->tvwk", words, p)                               # [Nt, Nv, n, K]
            w2p = torch.einsum("tvw,tw->tv", sims.amax(dim=-1), c)
            p2w = torch.einsum("tvk,vk->tv", sims.masked_fill(~mask[:, None, :, None], float("-inf"))
                               .amax(dim=2), b)
            out += [sf, sp, (w2p + p2w) / 2]
        return out

    def score(self, text: Features, video: Features, chunk: int = 256) -> torch.Tensor:
        """The mean of the level scores [Nt, Nv], in chunks of `chunk` videos (the word-patch term holds
        Nt x chunk x words x patches cosines)."""
        return torch.cat([torch.stack(self.level_scores(text, video.rows(slice(i, i + chunk)))).mean(0)
                          for i in range(0, len(video), chunk)], dim=1)

    def finetune_loss(self, model, text: Features, video: Features) -> torch.Tensor:
        scale = model.clip.logit_scale.clamp(max=math.log(100)).exp()
        target = torch.arange(len(text), device=text.main.device)
        return sum((F.cross_entropy(m * scale, target) + F.cross_entropy(m.t() * scale, target)) / 2
                   for m in self.level_scores(text, video))
