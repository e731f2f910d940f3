"""correlated (docs/protocols.md: correlated): a non-i.i.d. query order, the classification benchmarks' class-
correlated stream made for retrieval, which has no class labels.

A query's "class" is the cluster of its ground-truth gallery item: k-means (`kmeans`, seeded) over the source
model's L2-normalised gallery embeddings, so queries whose answers look alike arrive together, as images of one
class do. The order: the stream is cut into slots of `slot` queries (default: ceil(n / k), a cluster's mean size);
each slot draws cluster weights w ~ Dirichlet(alpha, ..., alpha) and fills its places one by one, picking a cluster
c with probability proportional to w_c times the queries of c not yet placed, then one of those at random. A tiny
alpha puts almost all weight on one cluster per slot: long single-cluster runs. A huge alpha makes w uniform, so each
pick is proportional to what remains: a uniformly random permutation, i.e. an i.i.d. order.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from workloads.options import Option
from workloads.protocols.base import Protocol, StreamSetup
from workloads.protocols.registry import register_protocol
from workloads.seeding import rng_for


def kmeans(x: np.ndarray, k: int, seed: int, iters: int = 50) -> np.ndarray:
    """Cluster labels [N] of the rows of x [N, D] into min(k, N) clusters: k-means++ seeding from `seed`, then
    Lloyd's iterations until no label changes (at most `iters`). An emptied cluster keeps its old centre."""
    x = np.asarray(x, dtype=np.float64)
    k = min(int(k), len(x))
    rng = rng_for("kmeans", seed)
    centres = [x[rng.integers(len(x))]]
    for _ in range(1, k):
        d = np.min(((x[:, None, :] - np.asarray(centres)[None]) ** 2).sum(-1), axis=1)
        total = d.sum()
        centres.append(x[rng.choice(len(x), p=d / total)] if total > 0 else x[rng.integers(len(x))])
    c = np.asarray(centres)
    labels = np.full(len(x), -1)
    for _ in range(iters):
        new = ((x[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
        if np.array_equal(new, labels):
            break
        labels = new
        for j in range(k):
            if (labels == j).any():
                c[j] = x[labels == j].mean(0)
    return labels


def query_clusters(gallery_z: np.ndarray, gt_items: Sequence[int], k: int, seed: int) -> np.ndarray:
    """Each query's cluster: k-means over the gallery embeddings, read at the query's ground-truth item."""
    return kmeans(gallery_z, k, seed)[np.asarray(gt_items, dtype=np.int64)]


def dirichlet_order(labels: Sequence[int], alpha: float, slot: int, seed: int) -> list[int]:
    """A permutation of range(len(labels)) (see the module's docstring). Weights are drawn as log-Gamma variates
    (log Gamma(alpha + 1) + log(U) / alpha), so a tiny alpha does not underflow to all-zero weights."""
    labels = np.asarray(labels, dtype=np.int64)
    rng = rng_for("correlated", seed)
    names = np.unique(labels)
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in names]
    order: list[int] = []
    while len(order) < len(labels):
        log_w = np.log(rng.gamma(alpha + 1.0, size=len(names))) + np.log(rng.uniform(size=len(names))) / alpha
        for _ in range(min(slot, len(labels) - len(order))):
            left = np.array([len(p) for p in pools], dtype=np.float64)
            logit = np.where(left > 0, log_w + np.log(np.maximum(left, 1)), -np.inf)
            p = np.exp(logit - logit.max())
            c = rng.choice(len(names), p=p / p.sum())
            order.append(int(pools[c].pop()))
    return order


@register_protocol("correlated", order=4)
class Correlated(Protocol):
    needs_clusters = True
    OPTIONS = {"alpha": Option(float, 0.1, above=0, doc="Dirichlet concentration: small = long runs, large = i.i.d."),
               "k": Option(int, 10, min=1, doc="clusters of the gallery (the queries' classes)"),
               "slot": Option(int, None, min=1, doc="queries per Dirichlet draw; default ceil(n / k)")}

    def order(self, setup: StreamSetup) -> list[list[int]]:
        if setup.clusters is None or len(setup.clusters) != setup.n:
            raise ValueError(f"the correlated order needs each of the {setup.n} queries' cluster")
        slot = self.options["slot"] or math.ceil(setup.n / max(1, len(set(setup.clusters))))
        order = dirichlet_order(setup.clusters, self.options["alpha"], slot, setup.seed)
        return [[s * setup.n + j for j in order] for s in range(setup.segments)]
