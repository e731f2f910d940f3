"""Helpers shared by the methods: TCR's queue / HAT-VTR's Reliable Memory, and the TCR-family loss
terms (docs/faithfulness.md: TCR to HAT-VTR). Pure PyTorch; every tensor stays on the device it arrives on.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads.methods.base import softmax_entropy

# --------------------------------------------------------------------------------------------------------------
# pair memories (TCR queue, HAT-VTR Reliable Memory)
# --------------------------------------------------------------------------------------------------------------

class PairMemory:
    """Query-gallery pairs with a ranking key and the pair's entropy, as the reference keeps them in a list of
    tuples (key, q_i, g_i, E_i). `push` appends the selected rows; once the memory holds >= `capacity` entries it is
    sorted by key (stable, like Python's `sorted`) and truncated to `capacity`: `keep="smallest"` is TCR's
    "min-stack" of the gap indicator, `keep="largest"` HAT-VTR's largest-diversity memory."""

    def __init__(self, capacity: int, keep: str):
        if keep not in ("smallest", "largest"):
            raise ValueError(f"keep must be 'smallest' or 'largest', got {keep!r}")
        self.capacity = int(capacity)
        self.keep = keep
        self.clear()

    def clear(self) -> None:
        self.keys: torch.Tensor | None = None
        self.query: torch.Tensor | None = None
        self.gallery: torch.Tensor | None = None
        self.entropy: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[0])

    @torch.no_grad()
    def push(self, keys: torch.Tensor, query: torch.Tensor, gallery: torch.Tensor, entropy: torch.Tensor) -> None:
        keys, query, gallery, entropy = (x.detach() for x in (keys, query, gallery, entropy))
        if len(self):
            keys = torch.cat([self.keys, keys])
            query = torch.cat([self.query, query])
            gallery = torch.cat([self.gallery, gallery])
            entropy = torch.cat([self.entropy, entropy])
        if keys.shape[0] >= self.capacity:
            # stable sort; for "largest" sort the negated keys ascending so ties keep insertion order, as
            # sorted(..., reverse=True) does
            order = torch.sort(keys if self.keep == "smallest" else -keys, stable=True).indices[:self.capacity]
            keys, query, gallery, entropy = keys[order], query[order], gallery[order], entropy[order]
        self.keys, self.query, self.gallery, self.entropy = keys, query, gallery, entropy


# --------------------------------------------------------------------------------------------------------------
# loss terms (docs/faithfulness.md: TCR, HAT-VTR)
# --------------------------------------------------------------------------------------------------------------

def pair_entropy(query: torch.Tensor, gallery: torch.Tensor, temperature: float) -> torch.Tensor:
    """Row entropies E_i of softmax(q g^T / tau) over the B x B matrix of the batch's queries against their
    nearest-neighbour gallery items (TCR's refined query prediction)."""
    return softmax_entropy(query @ gallery.t() / temperature)


def gap_indicator(query: torch.Tensor, gallery: torch.Tensor) -> torch.Tensor:
    """TCR's source-likeness indicator I_i = 2||q_i - g_i|| - ||q_i - mean q|| - ||g_i - mean g||."""
    return (2 * (query - gallery).norm(dim=1) - (query - query.mean(0)).norm(dim=1)
            - (gallery - gallery.mean(0)).norm(dim=1))


def noise_robust_entropy(entropy: torch.Tensor, threshold: torch.Tensor, eps: float = 1e-3
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """TCR's L_REM / HAT-VTR's L_NA: w_i = clamp(1 - E_i / (E_m + eps), min 0) (detached); mean of w_i * E_i over
    {i : E_i <= E_m}. Returns (loss, number selected as a 0-d tensor).

    Computed as sum(w E [E <= E_m]) / max(1, #selected), which is the reference's mean when the selection is not
    empty and needs no host sync. Guard: when no query has E_i <= E_m the reference takes the mean of an empty tensor
    (NaN), which would turn the LayerNorm parameters into NaN; here the term is an exact zero still attached to the
    graph, so it contributes no gradient and the other terms update as usual. This is the only deviation, and only
    where the reference would corrupt the run."""
    weight = torch.clamp(1.0 - entropy.detach() / (threshold + eps), min=0)
    keep = (entropy.detach() <= threshold).to(entropy.dtype)
    n = keep.sum()
    return (entropy * weight * keep).sum() / n.clamp(min=1), n


def center_uniformity(x: torch.Tensor, t: float) -> torch.Tensor:
    """TCR's L_UNI / HAT-VTR's L_inter: mean_i exp(-t * ||x_i - mean x||) over rows of x [B, D] (t = 0.1 is the
    paper's t = 10 as a divisor)."""
    return torch.exp(-(x - x.mean(0)).norm(dim=1) * t).mean()


def intra_video_uniformity(frames: torch.Tensor, t: float) -> torch.Tensor:
    """HAT-VTR's L_intra on frames [B, T, D]: (1/B) sum_i mean_f exp(-t * ||f_if - mean_f f_if||)."""
    return torch.exp(-(frames - frames.mean(1, keepdim=True)).norm(dim=2) * t).mean(1).mean()


def modality_gap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|| mean(normalize(a)) - mean(normalize(b)) ||_2 over rows (TCR's compute_modality_gap)."""
    return (F.normalize(a, dim=-1).mean(0) - F.normalize(b, dim=-1).mean(0)).norm()
