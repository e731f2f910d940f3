"""How much the tie rule moves R@1, and what each rule costs, on score matrices built from the real test annotations
(tests/data/annotations: MSRVTT 1k-A, MSVD first caption and all captions).

No video model runs here: a query video is stood in for by a bag of words of its caption(s) with a seeded share of
words dropped, and scores are cosines between bags of words, so many scores tie exactly (every duplicate caption in
the gallery, and every pair of bags with the same overlap) — the heavily tied case the rules differ on. Printed per
matrix: the queries whose best positive is tied with a negative, R@1 under the old rule (a tied item with a lower
gallery index first, trial versions <= 2), the authors' `torch.argsort` (faithful) and the expectation under random
tie-breaking (corrected), and the seconds each takes (docs/faithfulness.md: Metrics).

    python benchmarks/tie_rules.py                 # all three matrices
    python benchmarks/tie_rules.py --drop 0.5      # a harder stand-in (more words dropped)
"""
from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import numpy as np

from workloads.datasets import create_dataset
from workloads.metrics import _tie_counts, retrieval_metrics
from workloads.trial import video_groups

ANNOTATIONS = Path(__file__).resolve().parents[1] / "tests" / "data" / "annotations"


def bags(texts: list[str], vocab: dict[str, int]) -> np.ndarray:
    out = np.zeros((len(texts), len(vocab)), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z']+", t.lower()):
            out[i, vocab[w]] += 1
    return out


def old_rule_r1(s: np.ndarray, gt: np.ndarray, groups: np.ndarray | None) -> float:
    """Trial version <= 2: rank = 1 + items above + tied items with a lower index (first positive by index)."""
    labels = np.arange(s.shape[1]) if groups is None else groups
    order = np.argsort(-s, axis=1, kind="stable")
    first = np.argmax(labels[order] == gt[:, None], axis=1) + 1
    return 100.0 * float((first <= 1).mean())


def matrices(drop: float, seed: int):
    rng = np.random.default_rng(seed)
    for name, folder, opts in [("msrvtt", "MSRVTT", {}), ("msvd", "MSVD", {}), ("msvd", "MSVD", {"captions": "all"})]:
        test = create_dataset(name, root=str(ANNOTATIONS / folder), **opts).test_split()
        captions = [p.caption for p in test.pairs]
        vocab = {w: i for i, w in enumerate(sorted({w for c in captions for w in re.findall(r"[a-z']+", c.lower())}))}
        rows, groups = video_groups(test)
        # the query video: its first caption with a seeded share of words dropped (at least one kept)
        queries = []
        for r in rows:
            words = captions[r].split()
            keep = [w for w in words if rng.random() >= drop] or words[:1]
            queries.append(" ".join(keep))
        q, g = bags(queries, vocab), bags(captions, vocab)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        s = q @ g.T                                              # v2t: [videos, captions]
        several = len(rows) < len(test)
        label = f"{name} {opts.get('captions', 'first')} v2t"
        yield label, s, np.arange(len(rows)), (groups if several else None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drop", type=float, default=0.3, help="share of a query caption's words dropped (0.3)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(f"{'matrix':<18} {'shape':>12} {'tied gt':>8} {'old R@1':>8} {'argsort':>8} {'expected':>8}  "
          f"{'s old':>6} {'s argsort':>9} {'s expected':>10}")
    for label, s, gt, groups in matrices(args.drop, args.seed):
        g, t, p = _tie_counts(s, gt, groups)
        tied = int((t > 0).sum())
        t0 = time.perf_counter()
        old = old_rule_r1(s, gt, groups)
        t1 = time.perf_counter()
        faithful = retrieval_metrics(s, gt, ties="argsort", gallery_groups=groups)["R1"]
        t2 = time.perf_counter()
        corrected = retrieval_metrics(s, gt, ties="expected", gallery_groups=groups)["R1"]
        t3 = time.perf_counter()
        print(f"{label:<18} {str(s.shape):>12} {tied:>8} {old:>8.2f} {faithful:>8.2f} {corrected:>8.2f}  "
              f"{t1 - t0:>6.2f} {t2 - t1:>9.2f} {t3 - t2:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
