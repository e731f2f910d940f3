"""TTA methods by name: `create_method(name, model, direction, gallery, **options)`.

One module per method, each a small `TTAMethod` subclass sharing the online loop of `workloads.methods.base`.
"""
from __future__ import annotations

from workloads.methods import eata as _eata  # noqa: F401
from workloads.methods import hat_vtr as _hat_vtr  # noqa: F401
from workloads.methods import read as _read  # noqa: F401
from workloads.methods import sar as _sar  # noqa: F401
from workloads.methods import source as _source  # noqa: F401  (registers)
from workloads.methods import tcr as _tcr  # noqa: F401
from workloads.methods import tent as _tent  # noqa: F401
from workloads.methods.base import (  # noqa: F401
    ForwardOutput,
    Gallery,
    NonFiniteError,
    QueryBatch,
    TTAMethod,
    iter_batches,
    run_stream,
)
from workloads.methods.registry import METHODS, register_method  # noqa: F401

# the order of the paper's tables
NAMES: tuple[str, ...] = tuple(n for n in ("source", "tent", "read", "sar", "eata", "tcr", "hat_vtr") if n in METHODS)


def create_method(name: str, model, direction: str, gallery: Gallery, **options) -> TTAMethod:
    return METHODS.lookup(name, NAMES)(model, direction, gallery, **options)
