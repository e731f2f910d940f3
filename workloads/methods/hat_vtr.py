"""HAT-VTR (Hubness Alleviation for Test-time Video-Text Retrieval; docs/faithfulness.md: HAT-VTR). lr 3e-4 (v2t) /
3e-5 (t2v).

Own forward (not the base harness's): text features L2-normalised, video features L2-normalised PER FRAME
([B or G, T, D]); CLIP4Clip = mean of the normalised frames, re-normalised; X-Pool = pooling head on the normalised
text and frames, then normalised. S = cosine [B, G]. A backbone with its own score (HVP-Net, TCD) ranks its
features as it encoded them, unnormalised, with their parts (its head was trained on them); the normalised ones feed
the loss terms. query_feat: v2t frames [B, T, D] / t2v texts [B, D];
gallery_feat: v2t texts [G, D] / t2v frames [G, T, D].

Per step (3 per batch):
1. Hubness-aware target selection (`hsm_target`): nn = argmax of the last B rows of hub_suppress([HSM memory; S]);
   g = gallery_feat[nn] (without the switch: nn = argmax S).
2. Reliable Memory refresh (step 0 of EVERY batch, no grad): frames collapsed by their mean (not re-normalised);
   the n = int(0.3 B) queries with the LARGEST diversity d_i = ||q_i - mean q|| are pushed as (d_i, q_i, g_i, E_i),
   E_i = row entropy of softmax(q g^T / 0.02) over the B x B matrix; once >= `rm_size` (16) entries, keep the
   `rm_size` largest d.
3. L = L_NA + L_MGUNI + L_MGCM (unit weights), each term switchable for the paper's Table 7 grid:
   - `na`: L_NA = TCR's noise-robust entropy on the frame-averaged B x B matrix, E_m = max Reliable-Memory entropy;
   - `mguni_inter`: mean_i exp(-t ||vbar_i - mean vbar||) (vbar = frame mean; for text queries (t2v) this is TCR's
     L_UNI on the texts); `mguni_intra` (video queries only; no effect in t2v, where the paper omits it):
     (1/B) sum_i mean_f exp(-t ||f_if - vbar_i||);
   - `mgcm_global`: (||mean n(vbar) - mean n(x)|| - ||mean n(Vm) - mean n(Xm)||)^2 with V the video side [B, T, D]
     (query in v2t, NN gallery in t2v), x the text side, (Vm, Xm) the memory pairs;
     `mgcm_frame`: MSE over D^2 entries between C_b = (1/(B T)) sum_{i,f} n(V_if) n(x_i)^T and
     C_m = (1/M) sum_m n(Vm_m) n(Xm_m)^T.
4. AdamW step.
Scoring: S3 = the last step's cosine matrix, re-ranked by the HSM (`hsm_rerank`): the last B rows of
hub_suppress([HSM memory; S3]); then the RAW S3 is appended to the memory. The memory lives on the model's device
(the reference moves it to the CPU; we don't).

faithful=True (tta_model/hat_vtr.py):
- the HSM memory holds the newest `hsm_size` BATCH matrices, default max(1, int(0.1 G)) (100 only when G = 1000;
  since a stream has ceil(N/16) < 0.1 G batches for N ~ G it never evicts in practice);
- while the memory is empty (the first batch of the stream) neither target selection nor re-ranking is applied: the
  first batch is scored unrefined and its targets are plain argmax.
faithful=False (the paper, Sec. 4.2 and Appx. Fig. 7/11):
- the memory is a FIFO of the newest `hsm_size` = K = 100 QUERY ROWS (the paper's K; its HSM memory figure of
  < 0.4 MB for K = 100 at G = 1000 in fp32 is 100 rows, not 100 batch matrices); the stack for a batch is those
  K rows plus the batch's B rows;
- Eq. 5-6 apply from the first batch on (an empty memory means S-bar = S_t alone), for both stages.
The Reliable Memory keeps the largest-diversity pairs; its size is 16 (the paper) except where the authors' shipped
configuration says otherwise in faithful mode (t2v with CLIP4Clip: 100; workloads/methods/reference_configs.py).

NaN guards: L_NA's empty selection -> zero term (see `_memory.noise_robust_entropy`); an empty Reliable Memory
(first batch with < 4 queries, where the reference crashes) -> zero L_NA and L_MGCM terms. With every loss switch off
no update is made (scores only).

Options: alpha (100), beta (10), m (0.5), hsm_size (int; default per mode, see above), rm_size (16),
select_ratio (0.3), t (0.1), switches hsm_target, hsm_rerank, na, mguni_inter, mguni_intra, mgcm_global, mgcm_frame
(all true).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from workloads.methods._memory import (
    PairMemory,
    center_uniformity,
    intra_video_uniformity,
    modality_gap,
    noise_robust_entropy,
    pair_entropy,
)
from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod
from workloads.options import Option
from workloads.methods.registry import register_method

LOSS_TERMS = ("na", "mguni_inter", "mguni_intra", "mgcm_global", "mgcm_frame")


def hub_suppress(stacked: torch.Tensor, alpha: float = 100.0, beta: float = 10.0, m: float = 0.5) -> torch.Tensor:
    """Bi-directional hub suppression of a stacked similarity matrix A [rows, gallery] (HSM, paper Eq. 6):
    W_col = softmax over dim 0 of alpha*A (how strongly each row claims a gallery item relative to all remembered
    rows: hubs get small weights), W_row = softmax over dim 1 of beta*A, A' = m (A * W_col) + (1 - m) (A * W_row).
    Max-subtraction for stability (softmax does it)."""
    w_col = torch.softmax(alpha * stacked, dim=0)
    w_row = torch.softmax(beta * stacked, dim=1)
    return m * (stacked * w_col) + (1 - m) * (stacked * w_row)


class HubnessSuppressionMemory:
    """The HSM: remembered raw similarity rows and the refinement of a current batch S [B, G] against them.

    `unit="batches"` keeps the newest `size` batch matrices and leaves S untouched while empty (reference);
    `unit="rows"` keeps the newest `size` query rows and refines S against itself while empty (paper).
    Only W_col couples the current rows to the memory, through each column's softmax normaliser; the memory's
    column statistics (max of alpha*A and sum of exp(alpha*A - max)) are kept up to date at `push` (merged
    incrementally, recomputed only after an eviction), so selection and re-ranking cost O(B G) instead of the
    reference's O(R G) re-stacking of the whole memory (R up to N rows) four times per batch. The result equals
    `hub_suppress(cat([memory, S]))[-B:]` up to float rounding. The memory stays on the scores' device."""

    def __init__(self, unit: str, size: int, alpha: float = 100.0, beta: float = 10.0, m: float = 0.5):
        if unit not in ("batches", "rows"):
            raise ValueError(f"unit must be 'batches' or 'rows', got {unit!r}")
        self.unit, self.size = unit, int(size)
        self.alpha, self.beta, self.m = float(alpha), float(beta), float(m)
        self.clear()

    def clear(self) -> None:
        self.chunks: list[torch.Tensor] = []       # raw scores, oldest first (one per pushed batch)
        self._col_max: torch.Tensor | None = None  # [G] max over remembered rows of alpha*A
        self._col_sum: torch.Tensor | None = None  # [G] sum over remembered rows of exp(alpha*A - col_max)

    @property
    def rows(self) -> torch.Tensor | None:
        """The remembered rows [R, G], oldest first (None when empty)."""
        return torch.cat(self.chunks) if self.chunks else None

    @property
    def batch_sizes(self) -> list[int]:
        return [c.shape[0] for c in self.chunks]

    def __len__(self) -> int:
        return sum(self.batch_sizes)

    @property
    def active(self) -> bool:
        """Whether a current batch is refined now (reference: only once something is remembered)."""
        return self.unit == "rows" or bool(self.chunks)

    @torch.no_grad()
    def refine(self, sims: torch.Tensor) -> torch.Tensor:
        """Hub-suppressed scores of the current batch [B, G] (S itself when not active)."""
        if not self.active:
            return sims
        s = sims.float()
        a = self.alpha * s
        if not self.chunks:
            w_col = torch.softmax(a, dim=0)
        else:
            col_max = torch.maximum(self._col_max, a.max(0).values)
            e = torch.exp(a - col_max)
            w_col = e / (self._col_sum * torch.exp(self._col_max - col_max) + e.sum(0))
        w_row = torch.softmax(self.beta * s, dim=1)
        return self.m * (s * w_col) + (1 - self.m) * (s * w_row)

    @torch.no_grad()
    def select(self, sims: torch.Tensor) -> torch.Tensor:
        """Hubness-aware nearest neighbours: argmax over the gallery of the refined scores."""
        return self.refine(sims).argmax(1)

    @torch.no_grad()
    def push(self, sims: torch.Tensor) -> None:
        """Remember a batch's raw scores, evict FIFO beyond `size`, update the column statistics."""
        s = sims.detach().float()
        self.chunks.append(s)
        evicted = False
        if self.unit == "batches":
            while len(self.chunks) > self.size:
                self.chunks.pop(0)
                evicted = True
        else:
            excess = len(self) - self.size
            while excess > 0:
                first = self.chunks[0]
                if first.shape[0] <= excess:
                    self.chunks.pop(0)
                    excess -= first.shape[0]
                else:
                    self.chunks[0] = first[excess:]
                    excess = 0
                evicted = True
        if evicted or self._col_max is None:
            self._col_max, self._col_sum = None, None
            for chunk in self.chunks:
                self._merge(chunk)
        else:
            self._merge(s)

    def _merge(self, chunk: torch.Tensor) -> None:
        a = self.alpha * chunk
        chunk_max = a.max(0).values
        if self._col_max is None:
            self._col_max, self._col_sum = chunk_max, torch.exp(a - chunk_max).sum(0)
            return
        col_max = torch.maximum(self._col_max, chunk_max)
        self._col_sum = self._col_sum * torch.exp(self._col_max - col_max) + torch.exp(a - col_max).sum(0)
        self._col_max = col_max


@register_method("hat_vtr", order=6)
class HATVTR(TTAMethod):
    batch_statistic = (4, "its Reliable Memory takes int(0.3 B) queries by their spread about the batch centre")
    corrected = "HSM memory of the newest K = 100 query rows from the first batch on; Reliable Memory 16 everywhere"
    lr = {"v2t": 3e-4, "t2v": 3e-5}
    OPTIONS = {"alpha": Option(float, 100.0, above=0, doc="HSM column temperature"),
               "beta": Option(float, 10.0, above=0, doc="HSM row temperature"),
               "m": Option(float, 0.5, min=0, max=1, doc="HSM balance of column vs row weighting"),
               "hsm_size": Option(int, None, min=1, doc="HSM memory: int(0.1 G) batch matrices faithful, 100 rows "
                                                        "corrected"),
               "rm_size": Option(int, 16, min=1, doc="Reliable Memory size (the authors' t2v/clip4clip config: 100)"),
               "select_ratio": Option(float, 0.3, above=0, max=1), "t": Option(float, 0.1, above=0),
               "hsm_target": Option(bool, True, doc="HSM at target selection"),
               "hsm_rerank": Option(bool, True, doc="HSM at posterior re-ranking"),
               **{term: Option(bool, True, doc="loss term on/off (ablation)") for term in LOSS_TERMS}}

    def resolve_options(self, o: dict[str, Any]) -> dict[str, Any]:
        if o["hsm_size"] is None:
            o["hsm_size"] = max(1, int(0.1 * len(self.gallery))) if self.faithful else 100
        return o

    def reset_memory(self) -> None:
        o = self.options
        self.hsm = HubnessSuppressionMemory("batches" if self.faithful else "rows", o["hsm_size"],
                                            o["alpha"], o["beta"], o["m"])
        self.reliable = PairMemory(o["rm_size"], keep="largest")
        self.last_terms: dict[str, Any] = {}

    # -- forward ------------------------------------------------------------------------------------------------
    @property
    def gallery_unit(self) -> torch.Tensor:
        """The gallery L2-normalised per text / per frame (computed once)."""
        if getattr(self, "_gallery_unit", None) is None:
            self._gallery_unit = F.normalize(self.gallery.features.float(), dim=-1)
        return self._gallery_unit

    def forward_output(self, batch: QueryBatch) -> ForwardOutput:
        with self.autocast():
            q = self.encode_queries(batch)
            q_unit = F.normalize(q.main, dim=-1)                 # frames [B, T, D] per frame / texts [B, D]
            if self.model.own_score:
                # a head with its own score was trained on its features as encoded (TCD's co-attention reads their
                # scale): it ranks those; the normalised ones feed only the loss terms (docs/faithfulness.md)
                scores = self.score_queries(q, self.gallery.side)
            else:
                scores = self.score_queries(q.with_main(q_unit), self.gallery.side.with_main(self.gallery_unit))
        return ForwardOutput(scores.float(), q_unit.float(), self.gallery_unit)

    # -- adaptation ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def refresh_reliable_memory(self, q: torch.Tensor, g: torch.Tensor) -> None:
        """q, g frame-collapsed [B, D]."""
        n = int(self.options["select_ratio"] * q.shape[0])
        if n <= 0:
            return
        diversity = (q - q.mean(0)).norm(dim=1)
        idx = torch.sort(-diversity, stable=True).indices[:n]
        self.reliable.push(diversity[idx], q[idx], g[idx], pair_entropy(q, g, self.temperature)[idx])

    def loss_terms(self, q: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
        """The five loss terms for queries q ([B, T, D] video or [B, D] text) and their targets g (the other
        modality), against the current Reliable Memory. Disabled terms are left out."""
        o, t = self.options, self.options["t"]
        q2 = q.mean(1) if q.dim() == 3 else q
        g2 = g.mean(1) if g.dim() == 3 else g
        zero = torch.zeros((), device=q.device)
        have_memory = len(self.reliable) > 0
        terms: dict[str, torch.Tensor] = {}
        if o["na"]:
            terms["na"] = (noise_robust_entropy(pair_entropy(q2, g2, self.temperature), self.reliable.entropy.max())[0]
                           if have_memory else zero)
        if o["mguni_inter"]:
            terms["mguni_inter"] = center_uniformity(q2, t)
        if o["mguni_intra"] and q.dim() == 3:
            terms["mguni_intra"] = intra_video_uniformity(q, t)
        if o["mgcm_global"] or o["mgcm_frame"]:
            video, text = (q, g) if q.dim() == 3 else (g, q)
            mem_video, mem_text = ((self.reliable.query, self.reliable.gallery) if q.dim() == 3
                                   else (self.reliable.gallery, self.reliable.query))
            if o["mgcm_global"]:
                terms["mgcm_global"] = ((modality_gap(video.mean(1), text) - modality_gap(mem_video, mem_text)) ** 2
                                        if have_memory else zero)
            if o["mgcm_frame"]:
                terms["mgcm_frame"] = (frame_cross_covariance_loss(video, text, mem_video, mem_text)
                                       if have_memory else zero)
        return terms

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor | None:
        q, g_all = out.query_feat, out.gallery_feat
        sims = out.scores.detach()
        nn = self.hsm.select(sims) if self.options["hsm_target"] else sims.argmax(1)
        g = g_all[nn]
        if step == 0:
            self.refresh_reliable_memory(q.detach().mean(1) if q.dim() == 3 else q.detach(),
                                         g.mean(1) if g.dim() == 3 else g)
        terms = self.loss_terms(q, g)
        self.last_terms = {k: v.detach() for k, v in terms.items()}
        if not terms:
            return None
        return torch.stack(list(terms.values())).sum()

    def score(self, out: ForwardOutput, batch: QueryBatch) -> torch.Tensor:
        sims = out.scores.detach()
        o = self.options
        scores = self.hsm.refine(sims) if o["hsm_rerank"] else sims
        if o["hsm_target"] or o["hsm_rerank"]:
            self.hsm.push(sims)
        return scores


def frame_cross_covariance_loss(video: torch.Tensor, text: torch.Tensor, mem_video: torch.Tensor,
                                mem_text: torch.Tensor) -> torch.Tensor:
    """L_frame = MSE(C_b, C_m), C_b = (1/(B T)) sum_{i,f} n(V_if) n(x_i)^T over video [B, T, D] and text [B, D],
    C_m = (1/M) sum_m n(Vm_m) n(Xm_m)^T over the memory pairs [M, D] (the reference repeats each memory pair T times
    and divides by M T: the same)."""
    b, t, _ = video.shape
    c_batch = torch.einsum("bfd,be->de", F.normalize(video, dim=-1), F.normalize(text, dim=-1)) / (b * t)
    c_mem = F.normalize(mem_video, dim=-1).t() @ F.normalize(mem_text, dim=-1) / mem_video.shape[0]
    return F.mse_loss(c_batch, c_mem)
