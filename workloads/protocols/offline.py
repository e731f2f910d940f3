"""offline (TTAB's setting; docs/protocols.md): the method first adapts over the whole query set (`epochs` passes,
each batch its `steps` updates, scores discarded), then every query is scored by the final model without further
adaptation."""
from __future__ import annotations

from workloads.options import Option
from workloads.protocols.base import Protocol, StreamBatch, StreamSetup
from workloads.protocols.registry import register_protocol


@register_protocol("offline", order=6)
class Offline(Protocol):
    OPTIONS = {"epochs": Option(int, 1, min=1, max=100, doc="adaptation passes over the query set before scoring")}

    def plan(self, setup: StreamSetup) -> list[StreamBatch]:
        online = super().plan(setup)
        adapt = [StreamBatch(b.items, adapt=True, score=False, reset=(e == 0 and b.reset))
                 for e in range(self.options["epochs"]) for b in online]
        return adapt + [StreamBatch(b.items, adapt=False, score=True) for b in online]
