"""SAR (Niu et al. 2023) for retrieval (docs/faithfulness.md: SAR). lr 3e-5 in both directions; AdamW (wd 1e-4) wrapped
in
SAM with rho 0.05 (non-adaptive). Each of the 3 steps per batch is two forward/backward passes:

1. first forward, row entropies H_i of softmax(S_i / 0.02) over the gallery; reliable set A and threshold E0;
   L1 = mean_{i in A} H_i; backward; SAM first step: params += rho * g / (||g||_2 + 1e-12) (global norm);
2. second forward at the perturbed parameters; L2 on A (see below); backward; SAM second step: restore the
   parameters, AdamW step with the perturbed-point gradient; EMA (0.9) of L2 tracked.
The scores returned are the FIRST forward of the last step (before that step's update).

faithful=True (vtr_tta's sar.py):
- `margin` (0.40) is a FRACTION of the batch: k = int(B * 0.40), E0 = k-th smallest H, A = {i : H_i <= E0};
- second pass uses UNSUMMED entropies e_ij = -p_ij log p_ij of the rows in A, masked elementwise by e_ij < E0;
  L2 = mean of the kept elements (= mean_i H_i / G when E0 > 1/e);
- model recovery (reset when EMA < 0.2) is commented out upstream: `model_reset` defaults to False;
- if no element survives the second-pass mask, the reference backpropagates a constant 0: no parameter gets a
  gradient, so SAM's second step neither restores the parameters (they stay at the perturbed point w + e) nor
  steps AdamW, and the EMA is fed 0. We reproduce that (it is not numerically unsafe).
faithful=False (SAR as published and as TCR's copy runs it):
- E0 = margin * ln(G) nats (the original 0.4 ln C), A = {i : H_i < E0};
- second pass: summed row entropies H'_i of the rows in A, kept where H'_i < E0, L2 = their mean;
- model recovery on: when the EMA of L2 drops below `reset_constant` (0.2) the model, optimizer and EMA are reset
  to their state at stream start (checked after every step, as TCR's copy does);
- an empty A (or empty second-pass set) skips the step entirely: parameters restored, no AdamW step, EMA unchanged.

NaN guards (deviations from the reference only where it would crash or corrupt the run):
- k = int(B * 0.40) is 0 for a final batch of < 3 queries, where the reference's topk(0)[-1] raises; we use
  k = max(1, k) (the single lowest-entropy query is reliable).
- the corrected mode's empty selections skip the update (mean of an empty set would be NaN).

Options: margin (0.40), rho (0.05), reset_constant (0.2), model_reset (bool; default = not faithful).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from workloads.methods.base import ForwardOutput, QueryBatch, TTAMethod, elementwise_entropy, softmax_entropy
from workloads.options import Option, OptionError
from workloads.methods.registry import register_method


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimisation (Foret et al. 2021) around a base optimizer (AdamW here): `first_step` climbs to
    w + rho * g / ||g||, `second_step` returns to w and lets the base optimizer step with the gradient found there.
    The parameter groups are shared with the base optimizer; state_dict/load_state_dict are the base optimizer's
    (so `TTAMethod.reset` restores the AdamW moments)."""

    def __init__(self, params, base_optimizer=torch.optim.AdamW, rho: float = 0.05, adaptive: bool = False,
                 **kwargs: Any):
        if rho < 0:
            raise ValueError(f"rho must be non-negative, got {rho}")
        super().__init__(params, dict(rho=rho, adaptive=adaptive, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self._old: dict[nn.Parameter, torch.Tensor] = {}

    @torch.no_grad()
    def grad_norm(self) -> torch.Tensor:
        norms = [((p.abs() if g["adaptive"] else 1.0) * p.grad).norm(p=2)
                 for g in self.param_groups for p in g["params"] if p.grad is not None]
        return torch.stack(norms).norm(p=2)

    @torch.no_grad()
    def first_step(self) -> None:
        norm = self.grad_norm()
        self._old = {}
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self._old[p] = p.detach().clone()
                p.add_((torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p))
        self.zero_grad(set_to_none=True)

    @torch.no_grad()
    def second_step(self, restore_all: bool = False) -> None:
        """Restore w for every parameter that got a gradient at the perturbed point (all of them with
        `restore_all`), then step the base optimizer (which skips parameters without a gradient)."""
        for p, old in self._old.items():
            if restore_all or p.grad is not None:
                p.copy_(old)
        self._old = {}
        self.base_optimizer.step()
        self.zero_grad(set_to_none=True)

    def step(self, closure=None):  # pragma: no cover - SAR drives first_step/second_step itself
        raise RuntimeError("SAM needs two passes: call first_step() and second_step()")

    def state_dict(self):
        return self.base_optimizer.state_dict()

    def load_state_dict(self, state_dict) -> None:
        self.base_optimizer.load_state_dict(state_dict)
        self.param_groups = self.base_optimizer.param_groups


def sar_threshold(entropy: torch.Tensor, margin: float, n_gallery: int, faithful: bool) -> tuple[float, torch.Tensor]:
    """(E0, reliable mask A). faithful: percentile filter, E0 = k-th smallest H with k = max(1, int(B * margin)),
    A = {H <= E0}; corrected: E0 = margin * ln(G), A = {H < E0}."""
    h = entropy.detach()
    if faithful:
        k = max(1, int(len(h) * margin))
        e0 = torch.topk(h, k, largest=False).values[-1]
        return float(e0), h <= e0
    e0 = margin * math.log(n_gallery)
    return e0, h < e0


def sar_second_loss(logits: torch.Tensor, reliable: torch.Tensor, e0: float, faithful: bool) -> torch.Tensor | None:
    """The second-pass loss on the reliable rows, or None when nothing survives. faithful: elementwise
    e_ij = -p_ij log p_ij < E0, mean of the kept elements; corrected: summed H_i < E0, mean."""
    if faithful:
        e = elementwise_entropy(logits)[reliable]
    else:
        e = softmax_entropy(logits)[reliable]
    keep = e < e0
    if not bool(keep.any()):
        return None
    return e[keep].mean()


@register_method("sar", order=3)
class SAR(TTAMethod):
    corrected = "reliable set by 0.4 ln(G) nats, summed second-pass entropies, model recovery on"
    passes = (2, 2)  # SAM: a forward/backward at w, another at the perturbed w + e (docs/protocols.md: budgeted)
    lr = {"v2t": 3e-5, "t2v": 3e-5}
    OPTIONS = {"margin": Option(float, 0.40, above=0, doc="faithful: a fraction of the batch in (0, 1]; corrected: "
                                                           "a factor of ln(G)"),
               "rho": Option(float, 0.05, min=0, doc="SAM neighbourhood size"),
               "reset_constant": Option(float, 0.2, min=0),
               "model_reset": Option(bool, None, doc="default off faithful (disabled in the authors' code), on "
                                                     "corrected")}

    @classmethod
    def check_dependent(cls, o: dict[str, Any], faithful: bool) -> None:
        if faithful and o["margin"] > 1:
            raise OptionError(f"method {cls.name!r}: option 'margin' is a fraction of the batch in faithful mode and "
                              f"must be in (0, 1], got {o['margin']}")

    def resolve_options(self, o: dict[str, Any]) -> dict[str, Any]:
        if o["model_reset"] is None:
            o["model_reset"] = not self.faithful
        return o

    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return SAM(params, torch.optim.AdamW, rho=self.options["rho"], lr=self.learning_rate,
                   weight_decay=self.weight_decay)

    def reset_memory(self) -> None:
        self.ema: float | None = None
        self.resets = 0  # model recoveries so far (corrected mode)

    def _update_ema(self, value: float) -> None:
        self.ema = value if self.ema is None else 0.9 * self.ema + 0.1 * value

    def step(self, batch: QueryBatch, step: int) -> ForwardOutput:
        opt: SAM = self.optimizer  # type: ignore[assignment]
        out = self.forward_output(batch)
        entropy = softmax_entropy(self.logits(out))
        e0, reliable = sar_threshold(entropy, self.options["margin"], out.scores.shape[1], self.faithful)
        if not bool(reliable.any()):  # corrected mode only (faithful always keeps >= 1): skip the step
            return out
        loss1 = entropy[reliable].mean()
        self._check_finite(loss1, "loss", batch, step)
        opt.zero_grad(set_to_none=True)
        loss1.backward()
        opt.first_step()

        out2 = self.forward_output(batch)
        loss2 = sar_second_loss(self.logits(out2), reliable, e0, self.faithful)
        if loss2 is None:
            if self.faithful:  # reference: backward of a constant 0 -> params stay perturbed, EMA fed 0
                self._update_ema(0.0)
                opt.second_step(restore_all=False)
            else:
                opt.second_step(restore_all=True)  # no gradient anywhere: restore w, AdamW skips
            return out
        self._check_finite(loss2, "loss", batch, step)
        self._update_ema(float(loss2.detach()))
        loss2.backward()
        opt.second_step()
        if self.options["model_reset"] and self.ema is not None and self.ema < self.options["reset_constant"]:
            resets = self.resets
            self.reset()  # model, optimizer and EMA back to stream start
            self.resets = resets + 1
        return out
