"""DeYO (Lee et al. 2024, ICLR) for retrieval (docs/faithfulness.md: DeYO), following its authors' public code
(Jhyun17/DeYO, methods/deyo.py and config.py) on the shared loop, with the prediction of TCR's retrieval
benchmark: p_i = softmax(S_i / 0.02) over the whole gallery (G = the number of classes). lr 3e-5 in both directions
(Tent's: DeYO is built on Tent's code and its authors give every method the same rate).

Per step (3 per batch), with H_i the row entropy of p_i:
1. entropy filter (`filter_ent`): keep i with H_i < deyo_margin * ln G (0.5 ln G); off: H_i <= ln G;
2. the object-destroying transformation x' of the kept queries, scored with no gradient:
   - video queries (v2t): every frame cut into patch_len x patch_len (4 x 4) patches, shuffled by a random
     permutation drawn per frame (the authors' `aug_type: patch` on each frame as an image; a side not divisible by
     patch_len is resized to the nearest multiple below and back, bilinear with antialiasing, as torchvision's
     Resize does);
   - text queries (t2v): the tokens between the start token and the end token (the highest id, where CLIP pools)
     shuffled by a random permutation per caption (the words' order is the sentence's structure, as shape is the
     image's; the bag of tokens, like an image's texture, stays). TCR's own copy of DeYO applies no transformation
     to text and switches the PLPD filter off there (docs/faithfulness.md: DeYO);
3. PLPD_i = p_i[c_i] - p'_i[c_i] with c_i = argmax p_i (the drop of the pseudo-label's probability under x');
   PLPD filter (`filter_plpd`): keep PLPD_i > plpd_threshold (0.2); off: PLPD_i >= -2 (everybody);
4. L = mean over the kept i of H_i * (reweight_ent * exp(-(H_i - margin_e0 * ln G)) + reweight_plpd * exp(PLPD_i))
   (weights detached); with both reweightings off, the plain mean of H_i.
A step whose filters leave nobody makes no update (loss None), as the authors' code skips backward and step.

What the shared loop changes from the authors' image-classification setting (every method of the benchmark runs the
same loop): AdamW at the loop's rate on every LayerNorm of the query tower (the authors: SGD with momentum 0.9 on
the normalisation layers of all but the last three ViT blocks), three steps per batch, eval mode (no dropout).
Nothing else differs; `faithful: false` is the same method. The selection and the loss match the authors'
functions on shared tensors to float rounding (docs/notes/2026-11-27-deyo-vs-authors.md).

Options: deyo_margin (0.5), margin_e0 (0.4), plpd_threshold (0.2), patch_len (4), switches filter_ent,
filter_plpd, reweight_ent, reweight_plpd (all true).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod, softmax_entropy
from workloads.methods.registry import register_method
from workloads.options import Option


def patch_shuffle(images: torch.Tensor, patch_len: int = 4, generator: torch.Generator | None = None
                  ) -> torch.Tensor:
    """Images [..., C, H, W] (H = W) with each image's patch_len x patch_len grid of patches permuted at random (one
    permutation per image, drawn as argsort of uniform keys on the CPU generator). A side that patch_len does not
    divide is resized down to a multiple of it first and back after (bilinear, antialiased)."""
    lead, (c, h, w) = images.shape[:-3], images.shape[-3:]
    if h != w:
        raise ValueError(f"patch shuffling expects square images, got {h}x{w}")
    x = images.reshape(-1, c, h, w)
    n, side = x.shape[0], (h // patch_len) * patch_len
    if side < patch_len:
        raise ValueError(f"images of {h} px are smaller than {patch_len} patches per side")
    if side != h:
        x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False, antialias=True)
    s = side // patch_len
    patches = x.reshape(n, c, patch_len, s, patch_len, s).permute(0, 2, 4, 1, 3, 5).reshape(n, patch_len ** 2, c, s, s)
    perm = torch.argsort(torch.rand(n, patch_len ** 2, generator=generator), dim=-1).to(x.device)
    patches = patches[torch.arange(n, device=x.device).unsqueeze(-1), perm]
    x = patches.reshape(n, patch_len, patch_len, c, s, s).permute(0, 3, 1, 4, 2, 5).reshape(n, c, side, side)
    if side != h:
        x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
    return x.reshape(*lead, c, h, w)


def token_shuffle(tokens: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Token ids [B, L] with the tokens strictly between the first one (start of text) and the end-of-text token
    (each row's highest id, where CLIP's text tower pools) permuted at random, one permutation per row; the start
    token, the end token and the padding stay in place."""
    out = tokens.clone()
    ends = tokens.argmax(dim=1).tolist()
    for row, end in enumerate(ends):
        if end > 2:  # at least two tokens between start and end
            keys = torch.rand(end - 1, generator=generator)
            out[row, 1:end] = tokens[row, 1:end][torch.argsort(keys).to(tokens.device)]
    return out


def deyo_select(entropy: torch.Tensor, probs: torch.Tensor, probs_prime_fn, ent_threshold: float,
                plpd_threshold: float, filter_ent: bool = True, filter_plpd: bool = True, max_entropy: float = math.inf
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices of the kept queries in the batch, their PLPD), DeYO's two filters. `probs_prime_fn(ids)` gives the
    probabilities of the transformed queries `ids` (only the entropy-filtered ones are transformed and scored, as in
    the authors' code). Empty indices when a filter leaves nobody."""
    h = entropy.detach()
    ids1 = torch.nonzero(h < ent_threshold if filter_ent else h <= max_entropy).flatten()
    if ids1.numel() == 0:
        return ids1, h.new_zeros(0)
    p = probs.detach()[ids1]
    cls = p.argmax(dim=1, keepdim=True)
    plpd = (p.gather(1, cls) - probs_prime_fn(ids1).detach().gather(1, cls)).flatten()
    keep = torch.nonzero(plpd > plpd_threshold if filter_plpd else plpd >= -2.0).flatten()
    return ids1[keep], plpd[keep]


def deyo_weighted_entropy(entropy: torch.Tensor, plpd: torch.Tensor, e0: float, reweight_ent: bool = True,
                          reweight_plpd: bool = True) -> torch.Tensor:
    """mean_i H_i * (reweight_ent * exp(-(H_i - e0)) + reweight_plpd * exp(PLPD_i)), weights detached; the plain mean
    of H_i with both reweightings off."""
    if not (reweight_ent or reweight_plpd):
        return entropy.mean()
    h = entropy.detach()
    coeff = float(reweight_ent) * torch.exp(-(h - e0)) + float(reweight_plpd) * torch.exp(plpd.detach())
    return (entropy * coeff).mean()


@register_method("deyo", order=4.5)
class DeYO(TTAMethod):
    passes = (2, 1)  # + the no-grad forward of the transformed queries (an upper bound: the kept ones only)
    lr = {"v2t": 3e-5, "t2v": 3e-5}
    OPTIONS = {"deyo_margin": Option(float, 0.5, above=0, doc="entropy filter threshold, a fraction of ln(G)"),
               "margin_e0": Option(float, 0.4, above=0, doc="entropy reweighting margin, a fraction of ln(G)"),
               "plpd_threshold": Option(float, 0.2, doc="PLPD filter threshold"),
               "patch_len": Option(int, 4, min=1, doc="patches per frame side for the patch shuffle (v2t)"),
               "filter_ent": Option(bool, True), "filter_plpd": Option(bool, True),
               "reweight_ent": Option(bool, True), "reweight_plpd": Option(bool, True)}

    def reset_memory(self) -> None:
        self.updates = 0       # steps that produced an update
        self.selected: list[int] = []  # queries kept per step (after both filters)

    def stream_stats(self, gt, gallery_groups=None) -> dict[str, float]:
        steps = max(1, len(self.selected))
        return {"deyo_updates_share": self.updates / steps,
                "deyo_selected_per_step": sum(self.selected) / steps}

    def transform(self, inputs: torch.Tensor) -> torch.Tensor:
        """DeYO's object-destroying transformation of query inputs (frames [B, T, 3, H, W] or tokens [B, L])."""
        if self.direction == "v2t":
            return patch_shuffle(inputs, self.options["patch_len"])
        return token_shuffle(inputs)

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor | None:
        o, log_g = self.options, math.log(out.scores.shape[1])
        logits = self.logits(out)
        entropy = softmax_entropy(logits)

        def probs_prime(ids: torch.Tensor) -> torch.Tensor:
            # ids live where the scores are (the GPU); t2v's query tokens stay on the CPU until the forward
            picked = batch.inputs[ids.to(batch.inputs.device)]
            with torch.no_grad():
                prime = self.forward_output(batch.with_inputs(self.transform(picked), ids.tolist()))
            return self.logits(prime).softmax(1)

        ids, plpd = deyo_select(entropy, logits.softmax(1), probs_prime, o["deyo_margin"] * log_g,
                                o["plpd_threshold"], o["filter_ent"], o["filter_plpd"], max_entropy=log_g)
        self.selected.append(int(ids.numel()))
        if ids.numel() == 0:
            return None
        self.updates += 1
        return deyo_weighted_entropy(entropy[ids], plpd, o["margin_e0"] * log_g, o["reweight_ent"],
                                     o["reweight_plpd"])
