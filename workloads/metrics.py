"""Retrieval metrics (vtr_tta_study s6.1) and hubness measures (s6.2, scikit-hubness definitions).

Both take a score matrix [n_query, n_gallery] (numpy or torch); larger = more similar.
"""
from __future__ import annotations

import numpy as np


def _as_numpy(scores) -> np.ndarray:
    if hasattr(scores, "detach"):  # torch tensor, without importing torch here
        scores = scores.detach().float().cpu().numpy()
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"scores must be [n_query, n_gallery], got shape {scores.shape}")
    if not np.isfinite(scores).all():
        bad = np.argwhere(~np.isfinite(scores))[0]
        raise ValueError(f"scores contain non-finite values (first at query {bad[0]}, gallery {bad[1]})")
    return scores


def ranks(scores, gt_index) -> np.ndarray:
    """1-based rank of each query's ground-truth gallery item. Ties are broken pessimistically-stable: an item
    with the same score but a lower gallery index ranks ahead (deterministic, unlike torch.argsort)."""
    s = _as_numpy(scores)
    gt = np.asarray(gt_index, dtype=np.int64)
    if gt.shape != (s.shape[0],):
        raise ValueError(f"gt_index must have one entry per query ({s.shape[0]}), got shape {gt.shape}")
    if gt.size and (gt.min() < 0 or gt.max() >= s.shape[1]):
        raise ValueError(f"gt_index out of range [0, {s.shape[1]})")
    gt_score = s[np.arange(len(gt)), gt][:, None]
    cols = np.arange(s.shape[1])[None, :]
    ahead = (s > gt_score) | ((s == gt_score) & (cols < gt[:, None]))
    return ahead.sum(axis=1) + 1


def retrieval_metrics(scores, gt_index) -> dict[str, float]:
    """R@1/5/10 in percent, median rank (lower middle for even N, as torch.median), mean rank."""
    r = ranks(scores, gt_index)
    n = len(r)
    if n == 0:
        raise ValueError("no queries")
    out = {f"R{k}": 100.0 * float((r <= k).sum()) / n for k in (1, 5, 10)}
    out["MdR"] = float(np.sort(r)[(n - 1) // 2])
    out["MnR"] = float(r.mean())
    return out


def k_occurrence(scores, k: int = 10) -> np.ndarray:
    """N_k(g): how many queries have gallery item g in their top-k. Ties broken by lower gallery index
    (stable sort), so the result is deterministic."""
    s = _as_numpy(scores)
    return _k_occurrence(s, k)


def _k_occurrence(s: np.ndarray, k: int) -> np.ndarray:
    if not 1 <= k <= s.shape[1]:
        raise ValueError(f"k must be in [1, n_gallery={s.shape[1]}], got {k}")
    topk = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.bincount(topk.ravel(), minlength=s.shape[1])


def _truncnorm_third_moment(a: float, b: float) -> float:
    from scipy.stats import truncnorm

    return float(truncnorm(a, b).moment(3))


def hubness(scores, k: int = 10) -> dict[str, float]:
    """Hubness of the k-occurrence distribution (s6.2): skewness, truncated-normal skewness, Atkinson index
    (eps 0.5), Robin Hood index, antihub occurrence (share of gallery items never in a top-k), hub occurrence
    (share of top-k slots taken by items with N_k >= 2k); plus the largest k-occurrence and the antihub count,
    which the design notes found more telling than skewness alone."""
    s = _as_numpy(scores)
    n_query = s.shape[0]
    nk = _k_occurrence(s, k).astype(np.float64)
    mu = nk.mean()
    centred = nk - mu
    m2 = float((centred ** 2).mean())
    skew = float((centred ** 3).mean() / m2 ** 1.5) if m2 > 0 else 0.0
    sd = float(nk.std(ddof=1)) if len(nk) > 1 else 0.0
    if sd > 0:
        trunc = _truncnorm_third_moment((0 - mu) / sd, (np.iinfo(np.int64).max - mu) / sd)
    else:
        trunc = 0.0
    atkinson = float(1.0 - np.sqrt(nk).mean() ** 2 / mu) if mu > 0 else 0.0
    robin_hood = float(0.5 * np.abs(centred).sum() / nk.sum()) if nk.sum() > 0 else 0.0
    antihubs = int((nk == 0).sum())
    hub_mask = nk >= 2 * k
    return {
        "skewness": skew,
        "truncated_skewness": trunc,
        "atkinson": atkinson,
        "robin_hood": robin_hood,
        "antihub_occurrence": antihubs / len(nk),
        "hub_occurrence": float(nk[hub_mask].sum() / (k * n_query)) if n_query else 0.0,
        "max_k_occurrence": float(nk.max()),
        "antihub_count": float(antihubs),
    }


def summarise(scores, gt_index, k: int = 10) -> dict[str, float]:
    """Retrieval metrics plus hubness at k (keys prefixed `hub_`), with k recorded."""
    out = retrieval_metrics(scores, gt_index)
    out.update({f"hub_{key}": value for key, value in hubness(scores, k).items()})
    out["hub_k"] = float(k)
    return out


def is_finite_matrix(x) -> bool:
    if hasattr(x, "detach"):
        import torch

        return bool(torch.isfinite(x).all())
    return bool(np.isfinite(np.asarray(x)).all())


__all__ = ["retrieval_metrics", "ranks", "hubness", "k_occurrence", "summarise", "is_finite_matrix"]
