"""TTA methods by name: `create_method(name, model, direction, gallery, **options)`.

One module per method, each a small `TTAMethod` subclass sharing the online loop of `workloads.methods.base` and
registering itself with `@register_method(name, order=...)`. `METHODS` (the registry) is the only list of names;
`NAMES` is its ordered view, in the row order of the paper's tables.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from workloads.methods.registry import METHODS, register_method  # noqa: F401

if TYPE_CHECKING:
    from workloads.methods.base import Gallery, TTAMethod

# the loop's names come from workloads.methods.base on first use: it imports torch (~1 s), which listing or
# checking method names (a grid's validation, `plan`, `status`) must not
_FROM_BASE = ("ForwardOutput", "Gallery", "NonFiniteError", "QueryBatch", "SourceFeatures", "TTAMethod", "iter_batches",
              "run_stream")


def __getattr__(name: str):
    if name == "NAMES":  # derived on each access: a method registered later (a plugin, a test) is listed too
        return METHODS.names()
    if name in _FROM_BASE:
        return getattr(importlib.import_module("workloads.methods.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def create_method(name: str, model, direction: str, gallery: Gallery, **options) -> TTAMethod:
    return METHODS.lookup(name)(model, direction, gallery, **options)
