"""Runs a type's sampler over captions: one attempt, or the authors' similarity retry.

The authors' retry (bingqingzhang/vtr_tta, do_text_perturbation.py): up to 100 attempts per caption; an attempt that
is empty (or not a string) becomes the original caption; the first attempt whose sentence-embedding cosine to the
original is >= 0.9 is kept, else the last attempt. One encoder call per attempt, 100 sequential calls at worst.

Here the attempts are produced in blocks (1, 3, 8, 16, 32, 40: the same 100 at most) and every caption still pending
contributes its next block to one batched encoder call per round, across captions. Each caption draws its attempts
from its own stream in the same order as the sequential loop, and the first accepted attempt in order is kept, so
the result is the sequential loop's; the attempts of a block after the accepted one are drawn and thrown away, which
changes nothing since no other caption shares the stream. An attempt identical to the original scores 1.0 without
being encoded (the encoder gives the same cosine up to rounding), and identical texts are encoded once.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from workloads.perturbations.text import _encoder
from workloads.perturbations.text._registry import CaptionStream, TextPerturbation, default_device, ratio

THRESHOLD = 0.9
MAX_ATTEMPTS = 100
BLOCKS = (1, 3, 8, 16, 32, 40)

EMPTY = "empty output kept as original"
EXHAUSTED = "similarity retry exhausted: last attempt kept"
NO_ENCODER = "no sentence encoder: first attempt kept without the similarity check"
STAND_IN_ENCODER = "similarity checked with a stand-in sentence encoder"


@dataclass
class PerturbedCaptions:
    texts: list[str]
    faithful: list[bool]
    fallbacks: dict[str, int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def _valid(attempt: Any) -> bool:
    return isinstance(attempt, str) and attempt != ""


def run(info: TextPerturbation, severity: int, texts: Sequence[str], seeds: Sequence[int],
        assets: Mapping[str, Any], blocks: Sequence[int] = BLOCKS) -> PerturbedCaptions:
    sampler = info.make_sampler(severity, assets)
    streams = [CaptionStream(s) for s in seeds]
    fallbacks: Counter[str] = Counter()
    faithful = [sampler.faithful] * len(texts)
    if not sampler.faithful:
        fallbacks[sampler.reason or "not the reference algorithm or assets"] += len(texts)
    encoder = None
    if info.similarity_retry:
        encoder = _encoder.resolve(assets.get("sentence_encoder"), default_device(assets))
    retry_meta: dict[str, Any] = {"used": False}

    if encoder is None:
        out = []
        for text, stream in zip(texts, streams):
            attempt = sampler.sample(text, stream, 1)[0]
            if not _valid(attempt):
                attempt = text
                fallbacks[EMPTY] += 1
            out.append(attempt)
        if info.similarity_retry:
            faithful = [False] * len(texts)
            fallbacks[NO_ENCODER] += len(texts)
    else:
        out, used, empty, exhausted = _retry(sampler, texts, streams, encoder, blocks)
        fallbacks[EMPTY] += empty
        fallbacks[EXHAUSTED] += exhausted
        if not encoder.faithful:
            faithful = [False] * len(texts)
            fallbacks[STAND_IN_ENCODER] += len(texts)
        retry_meta = {"used": True, "threshold": THRESHOLD, "max_attempts": MAX_ATTEMPTS,
                      "encoder": _encoder.describe(encoder),
                      "attempts": {str(k): v for k, v in sorted(Counter(used).items())}}

    for i, text in enumerate(out):  # the contract: never an empty or blank caption
        if not text.strip():
            out[i] = texts[i]
            fallbacks[EMPTY] += 1
    meta = {"name": info.name, "level": info.level, "severity": severity, "ratio": ratio(severity),
            "source": "generated", "similarity_retry": retry_meta, **sampler.meta}
    return PerturbedCaptions(list(out), faithful, {k: v for k, v in fallbacks.items() if v}, meta)


def _retry(sampler, texts, streams, encoder, blocks):
    n = len(texts)
    base = _encode_unique(encoder, list(dict.fromkeys(texts)), {})
    cache: dict[str, np.ndarray] = {}
    out: list[str | None] = [None] * n
    used = [0] * n
    was_empty = [False] * n
    last: list[tuple[str, bool]] = [(t, False) for t in texts]
    pending = list(range(n))
    for block in _block_sizes(blocks):
        if not pending:
            break
        drawn = {}
        for i in pending:
            attempts = sampler.sample(texts[i], streams[i], block)
            drawn[i] = [(a, False) if _valid(a) else (texts[i], True) for a in attempts]
        new = [a for i in pending for a, _ in drawn[i] if a != texts[i] and a not in cache]
        _encode_unique(encoder, list(dict.fromkeys(new)), cache)
        still = []
        for i in pending:
            for k, (attempt, empty) in enumerate(drawn[i]):
                score = 1.0 if attempt == texts[i] else float(np.dot(cache[attempt], base[texts[i]]))
                if score >= THRESHOLD:
                    out[i], was_empty[i] = attempt, empty
                    used[i] += k + 1
                    break
            else:
                used[i] += len(drawn[i])
                last[i] = drawn[i][-1]
                still.append(i)
        pending = still
    exhausted = len(pending)
    for i in pending:
        out[i], was_empty[i] = last[i]
    return out, used, sum(was_empty), exhausted


def _block_sizes(blocks: Sequence[int]):
    total = 0
    for b in blocks:
        b = min(int(b), MAX_ATTEMPTS - total)
        if b <= 0:
            return
        total += b
        yield b


def _encode_unique(encoder, texts: list[str], cache: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if texts:
        emb = np.asarray(encoder.encode(texts), dtype=np.float32)
        if emb.shape[0] != len(texts):
            raise ValueError(f"sentence encoder returned {emb.shape[0]} rows for {len(texts)} texts")
        # cosine as the authors' util.cos_sim computes it, whatever the encoder's normalisation
        emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        cache.update(zip(texts, emb))
    return cache
