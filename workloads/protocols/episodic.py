"""episodic (docs/protocols.md): the model and every method memory are reset before each batch, so each batch is
adapted on from the source model alone (the classification benchmarks' episodic setting, MEMO's)."""
from __future__ import annotations

from workloads.protocols.base import Protocol, StreamBatch, StreamSetup
from workloads.protocols.registry import register_protocol


@register_protocol("episodic", order=5)
class Episodic(Protocol):
    def plan(self, setup: StreamSetup) -> list[StreamBatch]:
        return [StreamBatch(b.items, reset=True) for b in super().plan(setup)]
