"""budgeted (Alfarra et al., ICML 2024; docs/protocols.md): the stream arrives at Source's pace; a method k times
slower than Source per batch adapts on every k-th batch only (batches 0, k, 2k, ...) and scores the others with its
current weights, unadapted. k is the method's relative cost (`StreamSetup.cost`), counted from its declared passes
(workloads/protocols/base.py `method_cost`) unless the grid gives `k` (a measured cost)."""
from __future__ import annotations

from workloads.options import Option
from workloads.protocols.base import BACKWARD_COST, Protocol, StreamBatch, StreamSetup
from workloads.protocols.registry import register_protocol


@register_protocol("budgeted", order=7)
class Budgeted(Protocol):
    needs_cost = True
    OPTIONS = {"k": Option(int, None, min=1, doc="the relative cost; default: counted from the method's passes"),
               "backward_cost": Option(float, BACKWARD_COST, min=0, doc="a backward's cost in forwards")}

    def plan(self, setup: StreamSetup) -> list[StreamBatch]:
        k = max(1, int(setup.cost))
        return [StreamBatch(b.items, adapt=(i % k == 0), reset=b.reset) for i, b in enumerate(super().plan(setup))]
