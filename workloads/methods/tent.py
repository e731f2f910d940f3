"""Tent (Wang et al. 2021) for retrieval (docs/faithfulness.md: Tent): minimise the mean row entropy of softmax(S /
0.02) over the whole
gallery, for every query of the batch (no filtering). lr 3e-5 in both directions."""
import torch

from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod, softmax_entropy
from workloads.methods.registry import register_method


@register_method("tent", order=1)
class Tent(TTAMethod):
    lr = {"v2t": 3e-5, "t2v": 3e-5}

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor:
        return softmax_entropy(self.logits(out)).mean()
