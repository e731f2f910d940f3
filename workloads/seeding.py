"""Deterministic seeds and content digests.

The reference generates perturbations unseeded (docs/faithfulness.md: Common pipeline); we derive every random stream
from a hash of what
it belongs to, so the same (dataset, video, perturbation, severity, grid seed) always renders the same bytes, on any
machine and in any worker order.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np


def stable_seed(*parts: Any) -> int:
    """A 63-bit seed from any JSON-able parts; independent of Python's hash randomisation."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1


def rng_for(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(stable_seed(*parts))


def digest(obj: Any, length: int = 16) -> str:
    """Hex digest of a JSON-able object (dict keys sorted), used for cache keys and trial keys."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def file_digest(path, length: int = 16, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()[:length]


def path_version(path) -> str:
    """Cheap content version of an asset path: a file's digest, or a folder's listing (relative names, sizes and
    modification times of every file below it; reading a whole image set or video pool would cost minutes)."""
    from pathlib import Path

    p = Path(path).expanduser()
    if p.is_file():
        return file_digest(p)
    items = sorted((str(f.relative_to(p)), f.stat().st_size, int(f.stat().st_mtime))
                   for f in p.rglob("*") if f.is_file())
    return digest(items)
