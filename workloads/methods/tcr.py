"""TCR (Li et al. 2025, ICLR) for retrieval, as vtr_tta ports it (docs/faithfulness.md: TCR). lr 3e-4 in both
directions.

Per step, with q = query features [B, D] and g_all = gallery features [G, D] (see the modes below):
1. nearest neighbours nn_i = argmax_j S_ij on the cosine scores; g_i = g_all[nn_i];
2. queue update (step 0 of the first `update_batches` (10) batches only, no grad): the n = int(0.3 B) pairs with the
   smallest gap indicator I_i = 2||q_i - g_i|| - ||q_i - mean q|| - ||g_i - mean g|| are pushed as
   (I_i, q_i, g_i, E_i), E_i = row entropy of softmax(q g^T / 0.02) over the B x B matrix; once the queue holds
   >= `queue_size` (16 = the batch size) entries it keeps the `queue_size` smallest I ("min-stack");
3. M = ||mean n(q_queue) - mean n(g_queue)|| (reference modality gap), E_m = max queue entropy;
4. L = L_REM + L_UNI + L_EMG with
   L_REM = mean over {E_i <= E_m} of clamp(1 - E_i/(E_m + 1e-3), 0) * E_i   (weight detached),
   L_UNI = mean_i exp(-t ||q_i - mean q||)  (t = 0.1, the paper's t = 10 as a divisor),
   L_EMG = (||mean n(q) - mean n(g)|| - M)^2.
Scores: the cosine matrix of the last step's forward.

faithful=True: the features the base harness gives (ForwardOutput.query_feat / gallery_feat): the video side is the
  mean of UNnormalised frame features (v2t queries; t2v gallery), the text side is L2-normalised; so Z = q g^T and the
  L_UNI distances carry the video-embedding norm (the port's quirk).
faithful=False: both sides L2-normalised, as the official TCR always feeds unit vectors. Nothing else changes.

NaN guards (the reference has none): an empty L_REM selection gives a zero term (no gradient from it) instead of a
NaN mean; an empty queue (only possible when the first batch has < 4 queries, so int(0.3 B) = 0, where the reference
crashes on zip(*[])) gives zero L_REM and L_EMG terms. Deviations only where the reference would crash or corrupt.

Options: queue_size (16), update_batches (10), select_ratio (0.3), t (0.1).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from workloads.methods._memory import (
    PairMemory,
    center_uniformity,
    gap_indicator,
    modality_gap,
    noise_robust_entropy,
    pair_entropy,
)
from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod
from workloads.options import Option
from workloads.methods.registry import register_method


@register_method("tcr", order=5)
class TCR(TTAMethod):
    corrected = "L2-normalised video features, as the official TCR"
    batch_statistic = (4, "its queue takes int(0.3 B) pairs of a batch and L_UNI its centre")
    lr = {"v2t": 3e-4, "t2v": 3e-4}
    OPTIONS = {"queue_size": Option(int, 16, min=1), "update_batches": Option(int, 10, min=0),
               "select_ratio": Option(float, 0.3, above=0, max=1), "t": Option(float, 0.1, above=0)}

    def reset_memory(self) -> None:
        self.queue = PairMemory(self.options["queue_size"], keep="smallest")
        self.batches_seen = 0
        self.last_terms: dict[str, Any] = {}

    def features(self, out: ForwardOutput) -> tuple[torch.Tensor, torch.Tensor]:
        q, g = out.query_feat, out.gallery_feat
        if not self.faithful:
            q, g = F.normalize(q, dim=-1), F.normalize(g, dim=-1)
        return q, g

    @torch.no_grad()
    def update_queue(self, q: torch.Tensor, g: torch.Tensor) -> None:
        n = int(self.options["select_ratio"] * q.shape[0])
        if n <= 0:
            return
        indicator = gap_indicator(q, g)
        idx = torch.argsort(indicator, stable=True)[:n]
        entropy = pair_entropy(q, g, self.temperature)
        self.queue.push(indicator[idx], q[idx], g[idx], entropy[idx])

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor:
        if step == 0:
            self.batch_no = self.batches_seen
            self.batches_seen += 1
        q, g_all = self.features(out)
        g = g_all[out.scores.detach().argmax(1)]
        if step == 0 and self.batch_no < self.options["update_batches"]:
            self.update_queue(q.detach(), g)
        l_uni = center_uniformity(q, self.options["t"])
        zero = torch.zeros((), device=q.device)
        n_rem = zero
        if len(self.queue):
            margin = modality_gap(self.queue.query, self.queue.gallery)
            l_rem, n_rem = noise_robust_entropy(pair_entropy(q, g, self.temperature), self.queue.entropy.max())
            l_emg = (modality_gap(q, g) - margin) ** 2
        else:
            l_rem = l_emg = zero
        # detached, not .item(): no device sync per step
        self.last_terms = {"rem": l_rem.detach(), "uni": l_uni.detach(), "emg": l_emg.detach(), "n_rem": n_rem}
        return l_rem + l_uni + l_emg
