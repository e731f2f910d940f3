"""READ (Yang et al. 2024) for retrieval (docs/faithfulness.md: READ). lr 3e-5 in both directions.

Per step, with p_i = softmax(S_i / 0.02) over the whole gallery and pmax_i = max_j p_ij:
    L_ra  = mean_i pmax_i * (1 - log pmax_i + log gamma),   gamma = e^-1  (= mean_i -pmax_i log pmax_i)
    L_bal = entropy of softmax_j(sum_i p_ij)                (READ's balance term, over the gallery)
    L     = L_ra - balance_weight * L_bal

faithful=True (vtr_tta): L_bal is computed but given weight 0 -> `balance_weight` defaults to 0.
faithful=False (READ as published, and TCR's READ baseline): `balance_weight` defaults to 1.0.
That is the only difference between the modes; no selection is involved, so no NaN guard is needed (pmax >= 1/G).

Options: gamma (float, e^-1), balance_weight (float; default 0 when faithful, 1 otherwise).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod
from workloads.options import Option
from workloads.methods.registry import register_method


def read_loss(logits: torch.Tensor, gamma: float = math.exp(-1), balance_weight: float = 0.0
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L, L_ra, L_bal) for logits [B, G] (already divided by the temperature)."""
    p = logits.softmax(1)
    pmax = p.max(1).values
    l_ra = (pmax * (1 - pmax.log() + math.log(gamma))).mean()
    p_sum = p.sum(0)
    l_bal = -(p_sum.softmax(0) * p_sum.log_softmax(0)).sum()
    return l_ra - balance_weight * l_bal, l_ra, l_bal


@register_method("read", order=2)
class READ(TTAMethod):
    corrected = "balance term weighted 1 (READ as published) instead of 0"
    lr = {"v2t": 3e-5, "t2v": 3e-5}
    OPTIONS = {"gamma": Option(float, math.exp(-1), above=0),
               "balance_weight": Option(float, None, min=0, doc="default 0 faithful (the authors' code), 1 corrected")}

    def resolve_options(self, o: dict[str, Any]) -> dict[str, Any]:
        if o["balance_weight"] is None:
            o["balance_weight"] = 0.0 if self.faithful else 1.0
        return o

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor:
        return read_loss(self.logits(out), self.options["gamma"], self.options["balance_weight"])[0]
