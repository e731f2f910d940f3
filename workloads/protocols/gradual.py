"""gradual (docs/protocols.md): for each perturbation in turn, severities 1, 2, ..., top, ..., 2, 1 in one continual
stream (no reset anywhere), as the classification benchmarks' gradual setting; top = the grid's highest severity
(5 in the paper's grids)."""
from __future__ import annotations

from typing import Sequence

from workloads.protocols.base import Protocol
from workloads.protocols.registry import register_protocol


def ramp(top: int) -> list[int]:
    """1..top..1: [1, 2, 3, 4, 5, 4, 3, 2, 1] for top 5."""
    return list(range(1, top + 1)) + list(range(top - 1, 0, -1))


@register_protocol("gradual", order=2)
class Gradual(Protocol):
    multi_segment = True

    @classmethod
    def default_segments(cls, perturbations: Sequence[str], severities: Sequence[int]) -> list[tuple[str, int]]:
        return [(p, s) for p in perturbations for s in ramp(max(severities))]
