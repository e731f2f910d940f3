"""Training-free TCR (Li et al. 2025, ICLR, Appendix C, Algorithm 2; docs/faithfulness.md: Training-free TCR), as
the TCR authors implement it (XLearning-SCU/2025-ICLR-TCR, models/clip_model.py `forward_tta_untrain`): no gradient,
no parameter changes; each batch's query embeddings are moved before they are scored.

Per batch (one forward), with z = the L2-normalised query embeddings [B, D] (video: the mean of the frame features;
text: the text feature) and g_all = the L2-normalised gallery embeddings (the features TCR's losses use):
1. candidates: nn_i = argmax_j S_ij on the model's scores (X-Pool's too); g_i = g_all[nn_i];
2. queue (the first `update_batches` (10) batches only): the n = int(0.3 B) pairs with the smallest gap indicator
   I_i = 2||z_i - g_i|| - ||z_i - mean z|| - ||g_i - mean g|| join TCR's min-stack of `queue_size` (16) pairs;
3. Delta_S = ||mean n(z_queue) - mean n(g_queue)|| (Eq. 7), Delta_T = ||mean n(z) - mean n(g)|| (the batch's gap
   to its candidates);
4. Eq. 12: z <- c + lambda (z - c), c = mean z, lambda = `scale` (2): more uniformity;
5. Eq. 13: z <- z + (1 - Delta_S / Delta_T) (mean g - c): the centre moves along the gap direction until the gap to
   the candidates is Delta_S (it widens when Delta_T < Delta_S);
6. z' = n(z); scored against the gallery.
Scoring: CLIP4Clip: cos(z', g) for video queries is the mean-pooled transformed frames' cosine; so for both heads
the move is applied where the head reads the query: video queries' frame features f_t (mean m, s = ||m||) become
s c + lambda (f_t - s c) + s (1 - Delta_S / Delta_T)(mean g - c), whose mean is s times the moved embedding (the
same cosine under mean pooling; X-Pool pools them as it pools any frames); text queries are replaced by s z'
(s = their norm). The gallery is untouched. A backbone with its own score (workloads/backbones/model.py) scores
the moved global embedding with its other parts as they are.
Guard: an empty queue (a first batch of < 4 queries, where the authors' code fails) leaves the gap as it is
(only step 4 applies). Both modes are the same method.

Options: scale (2.0), queue_size (16), update_batches (10), select_ratio (0.3).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads.methods._memory import PairMemory, gap_indicator, modality_gap
from workloads.methods.base import ForwardOutput, NoAdaptation, QueryBatch
from workloads.methods.registry import register_method
from workloads.options import Option


def rectify_queries(z: torch.Tensor, g: torch.Tensor, scale: float, target_gap: torch.Tensor | None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Algorithm 2's move of unit query embeddings z [B, D] against their candidates g [B, D]: (the moved embeddings
    before re-normalisation, the batch centre c, the shift added to every row). `target_gap` None: no gap
    rectification (scaling only)."""
    c = z.mean(0)
    moved = c + scale * (z - c)
    shift = torch.zeros_like(c)
    if target_gap is not None:
        shift = (1 - target_gap / modality_gap(z, g)) * (g.mean(0) - c)
    return moved + shift, c, shift


@register_method("tcr_untrained", order=5.5)
class TCRUntrained(NoAdaptation):
    batch_statistic = (4, "its queue takes int(0.3 B) pairs and Eq. 12 scales queries about the batch centre")
    OPTIONS = {"scale": Option(float, 2.0, above=0, doc="lambda of Eq. 12 (1: no scaling)"),
               "queue_size": Option(int, 16, min=1), "update_batches": Option(int, 10, min=0),
               "select_ratio": Option(float, 0.3, above=0, max=1)}

    def reset_memory(self) -> None:
        self.queue = PairMemory(self.options["queue_size"], keep="smallest")
        self.batches_seen = 0

    @torch.no_grad()
    def forward_output(self, batch: QueryBatch) -> ForwardOutput:
        g_side = self.gallery.side
        g_raw = g_side.main
        with self.autocast():
            q = self.encode_queries(batch)
            scores = self.score_queries(q, g_side)                                     # [B, G]
            if self.direction == "v2t":
                frames = q.main.float()                                                # [B, T, D]
                query, g_all = frames.mean(1), F.normalize(g_raw.float(), dim=-1)
            else:
                query = q.main.float()                                                 # [B, D]
                g_all = F.normalize(g_raw.float().mean(1), dim=-1)
        norm = query.norm(dim=-1, keepdim=True)
        z = query / norm
        g = g_all[scores.float().argmax(1)]
        if self.batches_seen < self.options["update_batches"]:
            n = int(self.options["select_ratio"] * z.shape[0])
            if n > 0:
                indicator = gap_indicator(z, g)
                idx = torch.argsort(indicator, stable=True)[:n]
                self.queue.push(indicator[idx], z[idx], g[idx], torch.zeros(n, device=z.device))
        self.batches_seen += 1
        target = modality_gap(self.queue.query, self.queue.gallery) if len(self.queue) else None
        moved, c, shift = rectify_queries(z, g, self.options["scale"], target)
        with self.autocast():
            if self.direction == "v2t":
                s = norm.unsqueeze(1)                                                  # [B, 1, 1]
                frames = s * c + self.options["scale"] * (frames - s * c) + s * shift
                scores = self.score_queries(q.with_main(frames), g_side)
            else:
                text = norm * F.normalize(moved, dim=-1)
                scores = self.score_queries(q.with_main(text), g_side)
        return ForwardOutput(scores.float(), F.normalize(moved, dim=-1), g_all)
