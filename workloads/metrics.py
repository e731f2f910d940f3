"""Retrieval metrics and hubness measures on a score matrix [n_query, n_gallery] (numpy or torch; larger = more
similar). What each reproduces of the authors' code (`tta_main.py`, `calculate_evaluation_metrics`) and what the
corrected mode changes: docs/faithfulness.md, section "Metrics".

Ranks under exact ties (`ties=`, one of TIE_RULES):
- "argsort" (faithful): the gallery sorted by `torch.argsort(scores, dim=1, descending=True)` on the CPU, as the
  authors rank; a query's rank is the 1-based position of its first positive. Which of several tied items comes
  first is whatever torch's CPU sort does: index order for rows of at most 16 items, its quicksort's order for
  longer rows (all-equal 17-item row: 8, 16, 15, ..., 9, 0, 7, ..., 1). So the figure equals the authors' exactly
  (same matrix, same torch CPU sort) but depends on gallery order wherever scores tie.
- "expected" (corrected): the expectation under uniformly random tie-breaking, which does not depend on gallery
  order. With g negatives scored strictly above the best positive, t negatives and p positives tied at its score, the
  first positive's position among the tied items is random: expected rank = g + 1 + t / (p + 1), and
  P(rank <= K) = 1 - prod_{i=0}^{K-g-1} (t - i) / (t + p - i)  (0 when K <= g; 1 when K > g + t), which for one
  positive is min(1, max(0, (K - g) / (t + 1))). R@K is the mean of that probability (so a positive tied with one
  negative at the top counts half towards R@1), MnR the mean expected rank, MdR the lower middle of the expected
  ranks. Without ties both rules give the same integer ranks.

Several positives per query (`gallery_groups`): gallery item j belongs to group gallery_groups[j] and query i's
positives are the items of group gt_index[i]; the query is answered by its best-ranked positive. That is the
standard multi-caption protocol's video-to-text rule (a video scored by the best-ranked of its captions, MSVD
`captions: all`, docs/faithfulness.md: Datasets) and the authors' own v2t rule (the first position of any text with
the query's video id).

Hubness: the scikit-hubness definitions of the k-occurrence measures (docs/faithfulness.md: Metrics); ties in a
top-k are broken by lower gallery index, so the k-occurrence is deterministic.

Embedding diagnostics (docs/faithfulness.md: Diagnostics): TCR's intra-modality uniformity of the query embeddings
and the modality gap between query and gallery embeddings, on L2-normalised rows [n, D].
"""
from __future__ import annotations

import math

import numpy as np

TIE_RULES = ("argsort", "expected")


def tie_rule(faithful: bool) -> str:
    """The tie rule of a trial's mode: the authors' argsort when faithful, the expectation when corrected."""
    return "argsort" if faithful else "expected"


def _as_numpy(scores) -> np.ndarray:
    if hasattr(scores, "detach"):  # torch tensor, without importing torch here
        scores = scores.detach().float().cpu().numpy()
    scores = np.asarray(scores)
    if scores.dtype not in (np.float32, np.float64):
        scores = scores.astype(np.float64)
    if scores.ndim != 2:
        raise ValueError(f"scores must be [n_query, n_gallery], got shape {scores.shape}")
    if not np.isfinite(scores).all():
        bad = np.argwhere(~np.isfinite(scores))[0]
        raise ValueError(f"scores contain non-finite values (first at query {bad[0]}, gallery {bad[1]})")
    return scores


def _positives(s: np.ndarray, gt_index, gallery_groups) -> tuple[np.ndarray, np.ndarray | None]:
    """(gt as int64 [n_query], gallery groups as int64 [n_gallery] or None), checked against the matrix."""
    gt = np.asarray(gt_index, dtype=np.int64)
    if gt.shape != (s.shape[0],):
        raise ValueError(f"gt_index must have one entry per query ({s.shape[0]}), got shape {gt.shape}")
    if gallery_groups is None:
        if gt.size and (gt.min() < 0 or gt.max() >= s.shape[1]):
            raise ValueError(f"gt_index out of range [0, {s.shape[1]})")
        return gt, None
    groups = np.asarray(gallery_groups, dtype=np.int64)
    if groups.shape != (s.shape[1],):
        raise ValueError(f"gallery_groups must have one entry per gallery item ({s.shape[1]}), got shape "
                         f"{groups.shape}")
    missing = np.setdiff1d(gt, groups)
    if missing.size:
        raise ValueError(f"query group {int(missing[0])} has no gallery item (gallery_groups holds no such group)")
    return gt, groups


def _positive_mask(s: np.ndarray, gt: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    if groups is None:
        mask = np.zeros(s.shape, dtype=bool)
        mask[np.arange(len(gt)), gt] = True
        return mask
    return groups[None, :] == gt[:, None]


def _argsort_ranks(s: np.ndarray, gt: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    import torch

    order = torch.argsort(torch.from_numpy(s), dim=1, descending=True).numpy()
    labels = order if groups is None else groups[order]
    return (np.argmax(labels == gt[:, None], axis=1) + 1).astype(np.float64)


def _tie_counts(s: np.ndarray, gt: np.ndarray, groups: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: g = negatives strictly above the best positive, t = negatives tied with it, p = positives tied
    with it (>= 1)."""
    pos = _positive_mask(s, gt, groups)
    best = np.where(pos, s, -np.inf).max(axis=1)[:, None]
    above, tied = s > best, s == best
    g = (above & ~pos).sum(axis=1)
    t = (tied & ~pos).sum(axis=1)
    p = (tied & pos).sum(axis=1)
    return g, t, p


def _recall_probability(g: np.ndarray, t: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """P(rank <= k) under uniformly random tie-breaking, per query (formula in the module docstring)."""
    m = k - g - 1                                       # tied negatives allowed before the first tied positive
    all_negative_first = np.ones(len(g))
    for i in range(k):                                  # m < k, so i never needs to go further
        step = i <= m
        factor = np.where(step, (t - i) / np.maximum(t + p - i, 1), 1.0)
        all_negative_first *= np.where(step, np.maximum(factor, 0.0), 1.0)
    return np.where(m < 0, 0.0, 1.0 - all_negative_first)


def ranks(scores, gt_index, ties: str = "expected", gallery_groups=None) -> np.ndarray:
    """1-based rank of each query's (best-ranked) positive, float64: integers under "argsort", expected ranks
    (possibly fractional) under "expected"."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {', '.join(TIE_RULES)}, got {ties!r}")
    s = _as_numpy(scores)
    gt, groups = _positives(s, gt_index, gallery_groups)
    if ties == "argsort":
        return _argsort_ranks(s, gt, groups)
    g, t, p = _tie_counts(s, gt, groups)
    return g + 1 + t / (p + 1)


def recall_hits(scores, gt_index, k: int = 1, ties: str = "expected", gallery_groups=None) -> np.ndarray:
    """Per query, its share of R@k: 0 or 1 under "argsort", P(rank <= k) under "expected". The mean of any run of
    rows (a stream batch) is that run's R@k on the same rule as `retrieval_metrics`."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {', '.join(TIE_RULES)}, got {ties!r}")
    s = _as_numpy(scores)
    gt, groups = _positives(s, gt_index, gallery_groups)
    if ties == "argsort":
        return (_argsort_ranks(s, gt, groups) <= k).astype(np.float64)
    return _recall_probability(*_tie_counts(s, gt, groups), k)


def retrieval_metrics(scores, gt_index, ties: str = "expected", gallery_groups=None) -> dict[str, float]:
    """R@1/5/10 in percent, median rank (lower middle for even N, as torch.median), mean rank, under the tie rule
    `ties` (module docstring)."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {', '.join(TIE_RULES)}, got {ties!r}")
    s = _as_numpy(scores)
    gt, groups = _positives(s, gt_index, gallery_groups)
    n = len(gt)
    if n == 0:
        raise ValueError("no queries")
    if ties == "argsort":
        r = _argsort_ranks(s, gt, groups)
        out = {f"R{k}": 100.0 * float((r <= k).sum()) / n for k in (1, 5, 10)}
    else:
        g, t, p = _tie_counts(s, gt, groups)
        r = g + 1 + t / (p + 1)
        out = {f"R{k}": 100.0 * float(_recall_probability(g, t, p, k).mean()) for k in (1, 5, 10)}
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
    """E[X^3] of a standard normal truncated to [a, b] (scipy.stats.truncnorm(a, b).moment(3), to 1e-12 over the
    range hubness uses, tests/test_metrics.py), by the moment recurrence m_k = (k-1) m_(k-2) + (a^(k-1) phi(a) -
    b^(k-1) phi(b)) / Z: importing scipy.stats cost every trial process ~0.5 s for this one number. (Intervals far
    in the lower tail, b < -8, lose digits; hubness truncates at a <= 0 with b unbounded.)"""
    def phi(x: float) -> float:
        return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) if math.isfinite(x) else 0.0

    def tail(x: float) -> float:   # P(X > x), accurate far into either tail
        return 0.5 * math.erfc(x / math.sqrt(2))

    def x2_phi(x: float) -> float:   # x^2 phi(x), 0 where phi is (an infinite bound, or x^2 beyond float range)
        density = phi(x)
        return x * x * density if density else 0.0

    # Z = P(a < X < b) from whichever tails keep its digits
    z = tail(a) - tail(b) if a >= 0 else tail(-b) - tail(-a) if b <= 0 else 1.0 - tail(-a) - tail(b)
    m1 = (phi(a) - phi(b)) / z
    return float(2 * m1 + (x2_phi(a) - x2_phi(b)) / z)


def hubness(scores, k: int = 10) -> dict[str, float]:
    """Hubness of the k-occurrence distribution (scikit-hubness definitions, docs/faithfulness.md: Metrics):
    skewness, truncated-normal skewness, Atkinson index (eps 0.5), Robin Hood index, antihub occurrence (share of
    gallery items never in a top-k), hub occurrence (share of top-k slots taken by items with N_k >= 2k); plus the
    largest k-occurrence and the antihub count, more telling than skewness alone on small galleries
    (docs/notes/2026-11-results-history.md §2)."""
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


def summarise(scores, gt_index, k: int = 10, ties: str = "expected", gallery_groups=None) -> dict[str, float]:
    """Retrieval metrics (under the tie rule `ties`, positives by `gallery_groups`) plus hubness at k (keys prefixed
    `hub_`), with k recorded."""
    out = retrieval_metrics(scores, gt_index, ties=ties, gallery_groups=gallery_groups)
    out.update({f"hub_{key}": value for key, value in hubness(scores, k).items()})
    out["hub_k"] = float(k)
    return out


def _unit_rows(z) -> np.ndarray:
    if hasattr(z, "detach"):  # torch tensor, without importing torch here
        z = z.detach().float().cpu().numpy()
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] == 0:
        raise ValueError(f"embeddings must be [n >= 1, D], got shape {z.shape}")
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    if not (np.isfinite(z).all() and (norm > 0).all()):
        raise ValueError("embeddings must be finite and non-zero")
    return z / norm


def uniformity(z) -> float:
    """TCR's intra-modality uniformity (Li et al. 2025, Appendix A, Eq. 14): the mean distance of the L2-normalised
    rows of z [n, D] from their centre, (1/n) sum_i ||z_i - mean z||. In [0, 1]: 0 when every row points the same
    way (identical inputs), 1 when the rows come in antipodal pairs (their centre is the origin and each row is at
    distance 1 from it; mean distance <= sqrt(1 - ||mean z||^2) <= 1 for unit rows). Higher = queries more spread
    out, easier to tell apart."""
    u = _unit_rows(z)
    return float(np.linalg.norm(u - u.mean(0), axis=1).mean())


def modality_gap(z_query, z_gallery) -> float:
    """TCR's inter-modality gap (Li et al. 2025, Appendix A, Eq. 15): the distance between the centres of the
    L2-normalised query rows [n, D] and gallery rows [m, D], ||mean z_q - mean z_g||. In [0, 2]: 0 when the two
    centres coincide (identical inputs), 2 when every query is u and every gallery item -u."""
    return float(np.linalg.norm(_unit_rows(z_query).mean(0) - _unit_rows(z_gallery).mean(0)))


# the diagnostics a trial reports (workloads/trial.py): uniformity of the query embeddings and their gap to the
# gallery, on the clean queries, the shifted queries before adaptation and the queries as the method scored them
DIAGNOSTIC_STAGES = ("clean", "shifted", "adapted")
DIAGNOSTIC_METRICS = tuple(f"{m}_{stage}" for m in ("uniformity", "modality_gap") for stage in DIAGNOSTIC_STAGES)


def embedding_diagnostics(z_query, z_gallery, stage: str) -> dict[str, float]:
    """{uniformity_<stage>, modality_gap_<stage>} for one set of query embeddings against the gallery's."""
    if stage not in DIAGNOSTIC_STAGES:
        raise ValueError(f"stage must be one of {', '.join(DIAGNOSTIC_STAGES)}, got {stage!r}")
    return {f"uniformity_{stage}": uniformity(z_query), f"modality_gap_{stage}": modality_gap(z_query, z_gallery)}


def is_finite_matrix(x) -> bool:
    if hasattr(x, "detach"):
        import torch

        return bool(torch.isfinite(x).all())
    return bool(np.isfinite(np.asarray(x)).all())


__all__ = ["TIE_RULES", "tie_rule", "recall_hits", "retrieval_metrics", "ranks", "hubness", "k_occurrence",
           "summarise", "is_finite_matrix", "uniformity", "modality_gap", "embedding_diagnostics",
           "DIAGNOSTIC_STAGES", "DIAGNOSTIC_METRICS"]
