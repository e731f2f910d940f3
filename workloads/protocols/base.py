"""What every stream protocol shares (docs/protocols.md): the batch plan, the set-up it is planned from, and the two
rules about methods that protocols apply (a method's relative cost, its smallest batch).

Queries are numbered flat, segment-major: item `s * n + j` is the trial's query j (in the trial's stream order) as
rendered for segment s. A plan is a list of `StreamBatch`es over those items. Protocols are pure: numpy and the
trial's seed only, no torch, so a plan can be checked (and tested) without a model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from workloads.options import Option, OptionError, check_options

DEFAULT = "reset_each_shift"
# a forward of the query tower is 1 unit of cost; a backward through it costs this many (the usual estimate: the
# gradients with respect to the activations and to the weights, each about one forward; docs/protocols.md: budgeted)
BACKWARD_COST = 2.0


@dataclass(frozen=True)
class StreamBatch:
    """One batch of a stream: `items` (flat query numbers, in batch order); `adapt`: the method adapts on it (its
    `steps` updates) and is scored by the last step's forward, else scored with its current weights unchanged;
    `score`: its scores count (False only in offline's adaptation pass); `reset`: the model, optimizer and every
    method memory go back to their state at set-up before it."""

    items: tuple[int, ...]
    adapt: bool = True
    score: bool = True
    reset: bool = False


@dataclass(frozen=True)
class StreamSetup:
    """What a protocol plans from: `n` queries per segment (the same queries in every segment), `segments` of them,
    the batch size, the trial's seed (the only source of randomness), each query's cluster (`clusters`, length n:
    the correlated order's "class") and the method's relative cost k (budgeted)."""

    n: int
    segments: int = 1
    batch_size: int = 16
    seed: int = 0
    clusters: Sequence[int] | None = None
    cost: int = 1

    def segment_items(self, s: int) -> list[int]:
        return list(range(s * self.n, (s + 1) * self.n))


def chunk(items: Sequence[int], batch_size: int) -> list[tuple[int, ...]]:
    """`items` in consecutive batches of `batch_size` (the last one shorter), as the trial has always batched."""
    return [tuple(items[s:s + batch_size]) for s in range(0, len(items), batch_size)]


class Protocol:
    """A stream protocol. Subclasses set the class attributes and override `order` (the stream's query order) or
    `plan` (the batches and their flags)."""

    name: ClassVar[str] = ""
    # spans several (perturbation, severity) segments in one trial (continual, gradual, mixed_domains)
    multi_segment: ClassVar[bool] = False
    needs_clusters: ClassVar[bool] = False   # StreamSetup.clusters must be given (correlated)
    needs_cost: ClassVar[bool] = False       # StreamSetup.cost is read (budgeted)
    OPTIONS: ClassVar[dict[str, Option]] = {}
    # options every protocol takes: how often the trial records its running R@1 (workloads/trial.py)
    COMMON_OPTIONS: ClassVar[dict[str, Option]] = {
        "every": Option(int, None, min=1, doc="queries between running R@1 points; default: the batch size")}

    def __init__(self, **options: Any):
        self.options = type(self).validate_options(options)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Check option names, kinds and ranges (a grid checks them when it loads)."""
        return check_options(f"protocol {cls.name!r}", options, {**cls.COMMON_OPTIONS, **cls.OPTIONS})

    @classmethod
    def default_segments(cls, perturbations: Sequence[str], severities: Sequence[int]) -> list[tuple[str, int]]:
        """The segment sequence of a multi-segment protocol from a grid's perturbations (registry order) and
        severities; a single-segment protocol has none (each cell is a trial)."""
        return []

    def order(self, setup: StreamSetup) -> list[list[int]]:
        """The items of each stream part in stream order; parts are batched separately (a batch never spans two).
        Default: each segment in the trial's order."""
        return [setup.segment_items(s) for s in range(setup.segments)]

    def plan(self, setup: StreamSetup) -> list[StreamBatch]:
        """The batches. Default: the parts of `order` batched in turn, the model reset once before the stream."""
        batches = [StreamBatch(b) for part in self.order(setup) for b in chunk(part, setup.batch_size)]
        return [StreamBatch(b.items, reset=(i == 0)) for i, b in enumerate(batches)]


def method_cost(method_cls: Any, steps: int, backward_cost: float = BACKWARD_COST) -> int:
    """The relative cost k of one batch of a method against Source (one forward): `steps` x (forwards +
    backward_cost x backwards) per step from the method's declared `passes` (workloads/methods/base.py), rounded
    up; a method that does not adapt makes its declared forwards once per batch."""
    forwards, backwards = method_cls.passes
    units = forwards if not method_cls.adapts else steps * (forwards + backward_cost * backwards)
    return max(1, math.ceil(units - 1e-9))


def check_batch_size(method_cls: Any, batch_size: int) -> None:
    """Refuse, in one line, a batch size below the smallest one whose batch statistic a method needs (its declared
    `batch_statistic`: (smallest batch, what it computes over the batch))."""
    smallest, what = method_cls.batch_statistic
    if batch_size < smallest:
        raise OptionError(f"method {method_cls.name!r} needs batches of at least {smallest} queries ({what}); got "
                          f"batch_size {batch_size}: use {smallest} or more, or leave the method out of this protocol")


def clusters_runs(labels: Sequence[int]) -> list[int]:
    """The lengths of the runs of equal consecutive labels (a stream's order, for tests and docs)."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return []
    cuts = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    return np.diff(np.concatenate([[0], cuts, [labels.size]])).tolist()
