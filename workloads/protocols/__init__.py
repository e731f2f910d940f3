"""Stream protocols of query-shift trials (docs/protocols.md): how a trial's queries become a stream of batches.

A protocol turns the trial's queries, in one or several (perturbation, severity) segments, into a list of
`StreamBatch`es: which queries each batch holds, whether the method adapts on it or only scores it with its
current weights, whether its scores count, and whether the model and every method memory are reset before it.
`workloads.methods.base.run_stream` runs such a list; workloads/trial.py scores it per segment.

One module per protocol, each registering itself with `@register_protocol(name, order=...)`; `PROTOCOLS` is the only
list of names. `DEFAULT` (reset_each_shift) is today's stream: a trial's key names a protocol only when it is another
(workloads/spec.py).
"""
from __future__ import annotations

from workloads.protocols.base import (  # noqa: F401
    DEFAULT,
    Protocol,
    StreamBatch,
    StreamSetup,
    check_batch_size,
    method_cost,
)
from workloads.protocols.registry import PROTOCOLS, register_protocol  # noqa: F401


def create_protocol(name: str, **options) -> Protocol:
    """The protocol `name` ("" = the default) with its options checked."""
    return PROTOCOLS.lookup(name or DEFAULT)(**options)
