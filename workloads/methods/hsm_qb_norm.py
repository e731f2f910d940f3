"""HSM + QB-Norm, the HAT-VTR paper's training-free hubness-suppression row (its Table 14, "HSM+QBNorm"; docs/
faithfulness.md: Hubness-suppression baselines). The paper names the row and its type only; how the two combine is
ours, and every trial records method_faithful: false.

No update: one forward per batch of the unadapted model, then its scores S [B, G] go through, in this order,
1. HAT-VTR's posterior re-ranking (workloads/methods/hat_vtr.py `HubnessSuppressionMemory`, alpha 100, beta 10,
   m 0.5, its memory as HAT-VTR keeps it in each mode: faithful, the newest int(0.1 G) batch matrices and the first
   batch left as it is; corrected, the newest 100 query rows from the first batch on): S^ = the last B rows of
   hub_suppress([memory; S]); then the raw S joins the memory;
2. QB-Norm's dynamic inverted softmax of S^ against the querybank (workloads/methods/qb_norm.py, beta `qb_beta` 20,
   activation set of the top `k` (1), `bank_size` source train queries), the bank's raw scores as QB-Norm's code
   takes them.
The order: the HSM is HAT-VTR's last stage before ranking and reads raw cosines (its softmax temperatures and its
product S * W assume them), while the dynamic inverted softmax post-processes whatever scores a model outputs, as
the authors' `qb_norm(train_test, test_test)` is applied to a finished similarity matrix. Without a source train
split the querybank is off and the row is the HSM alone (the trial's fallbacks and one plan line say so).

Options: alpha (100), beta (10), m (0.5), hsm_size (per mode, as HAT-VTR's), qb_beta (20), k (1), bank_size (0 =
one query per video of the whole split).
"""
from __future__ import annotations

from typing import Any

import torch

from workloads.methods.base import ForwardOutput, QueryBatch
from workloads.methods.hat_vtr import HATVTR, HubnessSuppressionMemory
from workloads.methods.qb_norm import QBNorm
from workloads.methods.registry import register_method
from workloads.options import Option


@register_method("hsm_qb_norm", order=10, source_stage="querybank")
class HSMQBNorm(QBNorm):
    corrected = "HSM memory of the newest K = 100 query rows from the first batch on (as HAT-VTR's)"
    paper_derived = ("hsm_qb_norm: the HAT-VTR paper's training-free HSM+QBNorm row (Table 14) names no order; ours "
                     "re-ranks by HAT-VTR's HSM, then applies QB-Norm's dynamic inverted softmax")
    OPTIONS = {"alpha": HATVTR.OPTIONS["alpha"], "beta": HATVTR.OPTIONS["beta"], "m": HATVTR.OPTIONS["m"],
               "hsm_size": HATVTR.OPTIONS["hsm_size"],
               "qb_beta": Option(float, 20.0, above=0, doc="inverse temperature of the dynamic inverted softmax"),
               "k": QBNorm.OPTIONS["k"], "bank_size": QBNorm.OPTIONS["bank_size"]}
    BETA = "qb_beta"

    def resolve_options(self, o: dict[str, Any]) -> dict[str, Any]:
        if o["hsm_size"] is None:
            o["hsm_size"] = max(1, int(0.1 * len(self.gallery))) if self.faithful else 100
        return o

    def reset_memory(self) -> None:
        super().reset_memory()
        o = self.options
        self.hsm = HubnessSuppressionMemory("batches" if self.faithful else "rows", o["hsm_size"], o["alpha"],
                                            o["beta"], o["m"])

    def score(self, out: ForwardOutput, batch: QueryBatch) -> torch.Tensor:
        sims = out.scores.detach()
        refined = self.hsm.refine(sims)
        self.hsm.push(sims)
        return self.normalise(refined)
