"""mixed_domains (docs/protocols.md): the queries of every segment (by default every cell of the grid) shuffled into
one stream by the trial's seed, adapted on without reset; each segment scored over its own queries."""
from __future__ import annotations

from typing import Sequence

from workloads.protocols.base import Protocol, StreamSetup
from workloads.protocols.registry import register_protocol
from workloads.seeding import rng_for


@register_protocol("mixed_domains", order=3)
class MixedDomains(Protocol):
    multi_segment = True

    @classmethod
    def default_segments(cls, perturbations: Sequence[str], severities: Sequence[int]) -> list[tuple[str, int]]:
        return [(p, s) for p in perturbations for s in sorted(severities)]

    def order(self, setup: StreamSetup) -> list[list[int]]:
        perm = rng_for("mixed_domains", setup.seed).permutation(setup.n * setup.segments)
        return [perm.tolist()]
