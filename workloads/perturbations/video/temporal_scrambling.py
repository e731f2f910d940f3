"""Temporal scrambling (docs/faithfulness.md: Temporal scrambling): trim, chunk, reorder and sample frame INDICES of
the full clip; pixels are untouched.

trim ratio = [0.60, 0.70, 0.80, 0.90, 0.95] of the clip's frames, split between head and tail by U{0..n_trim}.
The middle range is split into n_chunks = min(T, len_mid) contiguous chunks (np.array_split). Reordering: severity 1
swaps one random adjacent pair; 2-4 swap min(severity, n_chunks // 2) random disjoint pairs; 5 is a full random
permutation. Then T positions linspace(0, len_mid - 1, T, dtype=int) index the scrambled list (if len_mid < T: T
random draws with replacement). If trimming leaves nothing: T copies of the last frame.
"""
from __future__ import annotations

import numpy as np

from workloads.perturbations.video._registry import ClipContext, register

TRIM = (0.60, 0.70, 0.80, 0.90, 0.95)


def scrambled_indices(n: int, num_frames: int, severity: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    n_trim = int(n * TRIM[severity - 1])
    head = int(rng.integers(0, n_trim + 1))
    start, end = head, n - (n_trim - head)
    info: dict = {"trim_ratio": TRIM[severity - 1], "start": start, "end": end}
    if start >= end:
        info["chunk_order"] = []
        return np.full(num_frames, n - 1, dtype=np.int64), info
    middle = np.arange(start, end)
    n_chunks = min(num_frames, len(middle))
    chunks = np.array_split(middle, n_chunks)
    order = list(range(n_chunks))
    if severity == 1:
        if n_chunks > 1:
            i = int(rng.integers(0, n_chunks - 1))
            order[i], order[i + 1] = order[i + 1], order[i]
    elif severity < 5:
        if n_chunks > 1:
            used: set[int] = set()
            for _ in range(min(severity, n_chunks // 2)):
                free = [i for i in range(n_chunks) if i not in used]
                if len(free) < 2:
                    break
                a, b = (int(v) for v in rng.choice(free, size=2, replace=False))
                order[a], order[b] = order[b], order[a]
                used.update((a, b))
    else:
        order = [int(v) for v in rng.permutation(n_chunks)]
    scrambled = np.concatenate([chunks[i] for i in order])
    if len(middle) < num_frames:
        picked = rng.choice(scrambled, size=num_frames, replace=True)
    else:
        picked = scrambled[np.linspace(0, len(middle) - 1, num=num_frames, dtype=int)]
    info["chunk_order"] = order
    return picked.astype(np.int64), info


def _scrambled_frames(n: int, indices: np.ndarray, severity: int, seed: int) -> set[int]:
    """The frames a rendering reads: the same draw as temporal_scrambling's, whose stream is default_rng(seed)
    (workloads/perturbations/video/__init__.py: _render_one) and whose first use is scrambled_indices."""
    return {int(i) for i in scrambled_indices(n, len(indices), severity, np.random.default_rng(seed))[0]}


@register("temporal_scrambling", order=11, level="high", full_video=True, frames=_scrambled_frames)
def temporal_scrambling(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """Trim head/tail, scramble chunks of the middle, sample T frames from it."""
    idx, info = scrambled_indices(len(ctx.video), ctx.num_frames, severity, rng)
    meta = {"faithful": True, "frame_indices": [int(i) for i in idx], **info}
    return ctx.video[idx], meta
