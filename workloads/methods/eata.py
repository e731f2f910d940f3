"""EATA (Niu et al. 2022) for retrieval (docs/faithfulness.md: EATA). lr 3e-4 in both directions. Per step (state
updated
every step, 3 per batch), with H_i the row entropy of p_i = softmax(S_i / 0.02) over the gallery:

1. reliability filter: keep i with H_i < E0;
2. redundancy filter (once a moving-average probability vector m exists): keep the survivors with
   |cos(m, p_i)| < d_margin (0.05);
3. m <- 0.9 m + 0.1 * mean(p_i of the kept queries) (no grad; initialised with the first mean);
4. L = mean over kept i of H_i * exp(-(H_i - E0)) (weight detached).
No Fisher/EWC anti-forgetting term in either mode (the reference passes fishers=None, and computing Fisher
information needs labelled source samples we do not have), so this is "ETA".

faithful=True (vtr_tta's eata.py):
- E0 = `e_margin` = 0.40 nats, ABSOLUTE (the reference passes 0.40 where EATA means 0.4 ln C);
- fallbacks not in EATA: if nobody passes filter 1 keep the ceil(25%) lowest-entropy queries; if nobody passes
  filter 2 keep the ceil(10%) lowest-entropy filter-1 survivors. So the loss is never over an empty set.
faithful=False (EATA as published):
- E0 = e_margin * ln(G) nats (0.4 ln C);
- no fallbacks: an empty set after either filter skips the update for that step (loss None: no AdamW step, no
  weight decay) and leaves m unchanged, as the official code does (`if x[ids1][ids2].size(0) != 0`).
m is cleared by `reset_memory` (the reference keeps it across reset(); reset only happens at stream start, so
this does not change any result).

Options: e_margin (0.40; nats when faithful, fraction of ln G otherwise), d_margin (0.05).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod, softmax_entropy
from workloads.options import Option
from workloads.methods.registry import register_method


def eata_select(entropy: torch.Tensor, probs: torch.Tensor, e0: float, d_margin: float,
                model_probs: torch.Tensor | None, fallbacks: bool) -> torch.Tensor:
    """Indices (into the batch) of the queries EATA adapts on; empty when `fallbacks` is False and a filter leaves
    nobody."""
    h = entropy.detach()
    ids = torch.nonzero(h < e0).flatten()
    if ids.numel() == 0:
        if not fallbacks:
            return ids
        k = max(1, math.ceil(0.25 * h.numel()))
        ids = torch.topk(h, k, largest=False).indices
    if model_probs is None:
        return ids
    cos = F.cosine_similarity(model_probs.unsqueeze(0), probs.detach()[ids], dim=1)
    keep = torch.nonzero(cos.abs() < d_margin).flatten()
    if keep.numel() == 0:
        if not fallbacks:
            return keep
        k = max(1, math.ceil(0.1 * ids.numel()))
        keep = torch.topk(h[ids], k, largest=False).indices
    return ids[keep]


def eata_weighted_entropy(entropy: torch.Tensor, e0: float) -> torch.Tensor:
    """mean_i H_i * exp(-(H_i - E0)), weight detached."""
    return (entropy * torch.exp(-(entropy.detach() - e0))).mean()


@register_method("eata", order=4)
class EATA(TTAMethod):
    corrected = "entropy margin 0.4 ln(G) nats, no 25%/10% fallbacks (empty selections skip the update)"
    lr = {"v2t": 3e-4, "t2v": 3e-4}
    OPTIONS = {"e_margin": Option(float, 0.40, above=0, doc="reliability threshold in nats (absolute)"),
               "d_margin": Option(float, 0.05, above=0, doc="redundancy threshold on |cos|")}

    @property
    def e0(self) -> float:
        g = len(self.gallery)
        return self.options["e_margin"] if self.faithful else self.options["e_margin"] * math.log(g)

    def reset_memory(self) -> None:
        self.model_probs: torch.Tensor | None = None
        self.updates = 0  # steps that produced an update (corrected mode may skip)

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor | None:
        logits = self.logits(out)
        entropy = softmax_entropy(logits)
        probs = logits.softmax(1)
        ids = eata_select(entropy, probs, self.e0, self.options["d_margin"], self.model_probs, self.faithful)
        if ids.numel() == 0:  # corrected mode only
            return None
        with torch.no_grad():
            mean = probs[ids].mean(0)
            self.model_probs = mean if self.model_probs is None else 0.9 * self.model_probs + 0.1 * mean
        self.updates += 1
        return eata_weighted_entropy(entropy[ids], self.e0)
