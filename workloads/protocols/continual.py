"""continual (CoTTA's setting; docs/protocols.md): one model adapts across a sequence of (perturbation, severity)
segments without ever being reset, each segment scored as it passes. Default sequence: the grid's perturbations in
registry order at its highest severity, as CoTTA orders corruptions."""
from __future__ import annotations

from typing import Sequence

from workloads.protocols.base import Protocol
from workloads.protocols.registry import register_protocol


@register_protocol("continual", order=1)
class Continual(Protocol):
    multi_segment = True

    @classmethod
    def default_segments(cls, perturbations: Sequence[str], severities: Sequence[int]) -> list[tuple[str, int]]:
        top = max(severities)
        return [(p, top) for p in perturbations]
