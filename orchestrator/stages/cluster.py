"""The connected Ray cluster's size as the planning layer's `Cluster` (orchestrator/planning/resources.py), read from
Ray's public state calls: for the stages and the run layer, which share the cluster between trials and producers."""
from __future__ import annotations

from orchestrator.planning.resources import Cluster


def current_cluster() -> Cluster:
    """Total CPUs and GPUs of the connected cluster, and the CPUs of its largest alive node."""
    import ray  # heavy (~1 s); only the stages that run on Ray ask

    total = ray.cluster_resources()
    sizes = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    return Cluster(float(total.get("CPU", 1)), float(total.get("GPU", 0)), max(1, int(max(sizes, default=1))))
