"""DSL (dual softmax; Cheng et al. 2021, "Improving video-text retrieval by multi-stream corpus alignment and dual
softmax loss") as a training-free re-scoring on the shared loop (docs/faithfulness.md: Hubness-suppression
baselines). No update: one forward per batch of the unadapted model, then each batch's scores S [B, G] are revised
by the prior of the other direction, the softmax over the batch's queries of each gallery item's column:

    S' = S * softmax(S / prior_temperature, dim=0) * B

the line of the authors' `dual_softmax_loss` (starmemda/CAMoE, DSL.py) that revises the similarity matrix, applied
to the batch's matrix (rows = queries). A gallery item that several queries of the batch claim shares its prior
among them; the query it suits best keeps most of it. Each row is then ranked along the gallery (the loss's second
softmax, over the gallery, is monotone in a row and changes no ranking). The factor B (the authors' `len(S)`)
changes no ranking either; it is kept so the scores are the authors' values.

`prior_temperature` is in cosine units (S is the loop's cosine): 0.01 is the authors' `temp` of 1 on CLIP's logits
(100 cos), as public CLIP4Clip-derived evaluation codes apply DSL at test time; the authors' file's default
`temp=1000` is the training loss's, on logits, and makes the prior nearly uniform. A batch of one query is left as
it is (its prior is 1).
"""
from __future__ import annotations

import torch

from workloads.methods.base import ForwardOutput, NoAdaptation, QueryBatch
from workloads.methods.registry import register_method
from workloads.options import Option


def dual_softmax(sims: torch.Tensor, prior_temperature: float = 0.01) -> torch.Tensor:
    """The revised scores S * softmax(S / prior_temperature, dim=0) * len(S) of a [queries, gallery] matrix."""
    s = sims.float()
    return s * torch.softmax(s / prior_temperature, dim=0) * s.shape[0]


@register_method("dsl", order=8)
class DSL(NoAdaptation):
    OPTIONS = {"prior_temperature": Option(float, 0.01, above=0,
                                           doc="temperature of the prior's softmax over the batch, cosine units")}

    def score(self, out: ForwardOutput, batch: QueryBatch) -> torch.Tensor:
        return dual_softmax(out.scores.detach(), self.options["prior_temperature"])
