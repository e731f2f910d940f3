"""reset_each_shift (the default; the HAT-VTR paper's protocol): the model is reset, adapts online on the queries of
one (perturbation, severity) cell, batch after batch, and is scored. With several segments (not planned by a grid:
tests compare it with `continual`), the model is reset at the start of each."""
from __future__ import annotations

from workloads.protocols.base import Protocol, StreamBatch, StreamSetup, chunk
from workloads.protocols.registry import register_protocol


@register_protocol("reset_each_shift", order=0)
class ResetEachShift(Protocol):
    def plan(self, setup: StreamSetup) -> list[StreamBatch]:
        return [StreamBatch(b, reset=(i == 0)) for s in range(setup.segments)
                for i, b in enumerate(chunk(setup.segment_items(s), setup.batch_size))]
