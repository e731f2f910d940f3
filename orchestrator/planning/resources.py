"""How a submission shares the cluster between the trials and the producers of their inputs: trial slots, render
actors, and what a fine-tune or an asset task may ask for while Ray Tune holds its trial actors. Pure functions of
the grid's runtime section and a `Cluster` snapshot (its resources as Ray reports them)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.config.schema import RuntimeSpec


@dataclass(frozen=True)
class Cluster:
    """The connected Ray cluster's size: total CPUs and GPUs, and the CPUs of its largest alive node (a task asking
    for more than one node holds never starts, although the cluster-wide total may be larger). Read from Ray by
    orchestrator/stages/cluster.py `current_cluster` (Ray stays out of this layer: pyproject.toml's contract)."""

    cpus: float
    gpus: float
    largest_node_cpus: int


def concurrent_trials(rt: RuntimeSpec, cluster: Cluster) -> int:
    """Trials the cluster can run at once, possibly none (GPU trials on a cluster without GPUs): its GPUs over
    `gpus_per_trial` (GPU trials) or its CPUs over `cpus_per_trial`, capped by `max_concurrent_trials`."""
    if rt.gpus_per_trial > 0:
        slots = cluster.gpus / rt.gpus_per_trial
    else:
        slots = cluster.cpus / max(rt.cpus_per_trial, 1e-9)
    if rt.max_concurrent_trials:
        slots = min(slots, rt.max_concurrent_trials)
    return int(slots + 1e-9)


def trial_slots(rt: RuntimeSpec, cluster: Cluster) -> float:
    """Trials that can run at once on the cluster (`concurrent_trials`), at least one."""
    return max(1.0, float(concurrent_trials(rt, cluster)))


def render_actors(rt: RuntimeSpec, cluster: Cluster) -> int:
    """Render actors beside the trials: the grid's `runtime.render_actors`, else the CPUs the trial slots leave
    (GPU trials: each GPU slot keeps its `cpus_per_trial`; CPU trials: one trial's CPUs), at least one."""
    if rt.render_actors:
        return rt.render_actors
    keep = concurrent_trials(rt, cluster) * rt.cpus_per_trial if rt.gpus_per_trial > 0 else rt.cpus_per_trial
    return max(1, int(int(cluster.cpus) - keep))


def producer_share(rt: RuntimeSpec, cluster: Cluster) -> tuple[int, float]:
    """(CPUs, GPUs) a task that makes trial inputs (a fine-tune, the per-video assets) may ask for while Ray Tune
    runs: what the largest node holds less one trial slot, so it starts beside a trial actor Tune holds (running, or
    cached for reuse) instead of waiting until Tune gives its actors back (orchestrator/run/tune.py GatedSearcher).
    GPUs: a whole GPU where the cluster has two or more (a held actor has a share of one), else what one slot leaves
    of the single GPU, at least one slot's share. A single-slot cluster runs its trials without actor reuse instead
    (orchestrator/run/submit.py)."""
    cpus = max(1, cluster.largest_node_cpus - int(math.ceil(rt.cpus_per_trial)))
    if rt.gpus_per_trial <= 0:
        return cpus, 0.0
    gpus = 1.0 if cluster.gpus >= 2 else max(rt.gpus_per_trial, min(1.0, cluster.gpus) - rt.gpus_per_trial)
    return 1, round(gpus, 4)


def first_finetune_cpus(rt: RuntimeSpec, cluster: Cluster, first: int, gates_every_trial: bool) -> int:
    """CPUs each of the `first` fine-tunes without a parent being made (a clip4clip, not the X-Pool that starts from
    it) takes, or 0 for the usual share (`producer_share`, the render actors beside it). Only where nothing else can
    use the cluster: CPU trials on one node, and every trial to run waits for one of them (`gates_every_trial`), so
    until they are done nothing else has work but the render sets, which then come first on the node's CPUs, so the
    trials start as the fine-tunes end (orchestrator/run/pipeline.py). They share the node: its CPUs over `first`,
    when that is 2 or more (one torch thread each is the usual share). A CPU fine-tune step of the embedded default
    takes 0.28 s on 2 threads against 0.48 s on one (benchmarks/RESULTS.md, Quickstart)."""
    if rt.gpus_per_trial > 0 or not gates_every_trial or first < 1:
        return 0
    if int(cluster.cpus) != cluster.largest_node_cpus:
        return 0
    share = cluster.largest_node_cpus // first
    return share if share >= 2 else 0
