import numpy as np
import pytest
import torch

from workloads.metrics import hubness, k_occurrence, ranks, recall_hits, retrieval_metrics, summarise


def test_ranks_by_hand():
    # query 0: gt 0 has the top score -> rank 1
    # query 1: gt 2 is third (0.9 > 0.5 > 0.4) -> rank 3
    # query 2: gt 1 is second -> rank 2
    # query 3: gt 3 is last of 4 -> rank 4
    s = np.array([[0.9, 0.1, 0.2, 0.3],
                  [0.9, 0.5, 0.4, 0.0],
                  [0.8, 0.7, 0.1, 0.2],
                  [0.4, 0.3, 0.2, 0.1]])
    gt = [0, 2, 1, 3]
    assert ranks(s, gt).tolist() == [1, 3, 2, 4]
    m = retrieval_metrics(s, gt)
    assert m["R1"] == 25.0
    assert m["R5"] == 100.0 and m["R10"] == 100.0
    # sorted ranks 1,2,3,4: lower middle for even N (torch.median) = 2
    assert m["MdR"] == 2.0
    assert m["MnR"] == 2.5


def test_recall_at_k_counts_and_torch_input():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(50, 30))
    gt = rng.integers(0, 30, size=50)
    r = ranks(s, gt)
    m = retrieval_metrics(torch.from_numpy(s), torch.from_numpy(gt))
    for k in (1, 5, 10):
        assert m[f"R{k}"] == pytest.approx(100 * np.mean(r <= k))
    # brute force rank: 1 + number of strictly larger scores (no ties in continuous data)
    brute = 1 + (s > s[np.arange(50), gt][:, None]).sum(1)
    assert (r == brute).all()


def test_tie_rules_by_hand():
    # 4 gallery items (at most 16: torch's CPU argsort keeps tied items in index order, so "argsort" ranks by hand)
    s = np.array([[0.5, 0.5, 0.2, 0.1],    # gt 1 tied with item 0
                  [0.3, 0.3, 0.3, 0.3],    # gt 3 tied with all three others
                  [0.9, 0.1, 0.1, 0.1],    # gt 2: item 0 above, tied with items 1 and 3
                  [0.2, 0.7, 0.4, 0.7]])   # gt 1 tied with item 3 (a higher index)
    gt = [1, 3, 2, 1]
    # argsort (faithful): orders [0,1,2,3], [0,1,2,3], [0,1,2,3], [1,3,2,0] -> ranks 2, 4, 3, 1
    assert ranks(s, gt, ties="argsort").tolist() == [2, 4, 3, 1]
    m = retrieval_metrics(s, gt, ties="argsort")
    # R@1 = 1/4; sorted ranks 1,2,3,4 -> MdR 2 (lower middle); MnR = 10/4
    assert m == {"R1": 25.0, "R5": 100.0, "R10": 100.0, "MdR": 2.0, "MnR": 2.5}
    # expected (corrected): rank = g + 1 + t/2, g above, t tied: (0,1) -> 1.5, (0,3) -> 2.5, (1,2) -> 3, (0,1) -> 1.5
    assert ranks(s, gt).tolist() == [1.5, 2.5, 3.0, 1.5]
    m = retrieval_metrics(s, gt, ties="expected")
    # P(rank 1) = 1/2, 1/4, 0 (one item strictly above), 1/2 -> R@1 = 1.25 / 4 = 31.25 %
    # sorted expected ranks 1.5, 1.5, 2.5, 3 -> MdR 1.5; MnR = 8.5 / 4 = 2.125
    assert m == {"R1": 31.25, "R5": 100.0, "R10": 100.0, "MdR": 1.5, "MnR": 2.125}
    # per query shares of R@1 (what a per-batch R@1 averages): 0/1 by argsort, probabilities by expectation
    assert recall_hits(s, gt, 1, ties="argsort").tolist() == [0, 0, 0, 1]
    assert recall_hits(s, gt, 1, ties="expected").tolist() == [0.5, 0.25, 0.0, 0.5]


def test_expected_rule_partial_recall_at_5_and_10():
    # one query, 12 items all tied, gt the last: argsort (index order, 12 <= 16) puts it 12th -> R@1/5/10 all 0;
    # expected: uniform position among 12 -> P(<= 1) = 1/12, P(<= 5) = 5/12, P(<= 10) = 10/12, rank 1 + 11/2 = 6.5
    s = np.zeros((1, 12))
    assert retrieval_metrics(s, [11], ties="argsort") == {"R1": 0.0, "R5": 0.0, "R10": 0.0, "MdR": 12.0,
                                                          "MnR": 12.0}
    m = retrieval_metrics(s, [11], ties="expected")
    assert m["R1"] == pytest.approx(100 / 12) and m["R5"] == pytest.approx(500 / 12)
    assert m["R10"] == pytest.approx(1000 / 12) and m["MdR"] == m["MnR"] == 6.5
    # gt 0 of the same row: argsort ranks it 1st (R@1 100), the expectation does not depend on the index
    assert retrieval_metrics(s, [0], ties="argsort")["R1"] == 100.0
    assert retrieval_metrics(s, [0], ties="expected")["R1"] == pytest.approx(100 / 12)


def test_argsort_rule_is_torch_argsort_on_long_rows():
    # beyond 16 items torch's CPU sort is not index order on ties (an all-equal 17-item row starts 8, 16, 15, ...):
    # the faithful rule must follow torch, not the index; here checked against a lookup in torch.argsort itself
    rng = np.random.default_rng(3)
    s = rng.integers(0, 3, size=(40, 50)).astype(np.float32)
    gt = rng.integers(0, 50, size=40)
    order = torch.argsort(torch.from_numpy(s), dim=1, descending=True)
    by_torch = [int((order[i] == gt[i]).nonzero()[0, 0]) + 1 for i in range(40)]
    assert ranks(s, gt, ties="argsort").tolist() == by_torch
    by_index = [1 + int((s[i] > s[i, gt[i]]).sum() + (s[i, :gt[i]] == s[i, gt[i]]).sum()) for i in range(40)]
    assert by_torch != by_index          # the matrix is one where the rules differ


def test_expected_rule_equals_the_average_over_every_tie_break():
    # exact check by enumeration: 3 queries x 6 items with ties and groups (several positives per query); averaging
    # the rank over all 720 orders of breaking ties gives the expectation under uniformly random tie-breaking
    import itertools

    s = np.array([[1, 1, 0, 1, 0, 1], [2, 2, 2, 2, 2, 2], [0, 1, 1, 0, 1, 1]], dtype=float)
    groups = np.array([0, 1, 1, 2, 2, 0])
    gt = np.array([1, 2, 0])
    totals, hits = np.zeros(3), {k: np.zeros(3) for k in (1, 5)}
    perms = list(itertools.permutations(range(6)))
    for perm in perms:
        for q in range(3):
            order = sorted(range(6), key=lambda j: (-s[q, j], perm[j]))
            r = 1 + next(i for i, j in enumerate(order) if groups[j] == gt[q])
            totals[q] += r
            for k in hits:
                hits[k][q] += r <= k
    assert ranks(s, gt, gallery_groups=groups) == pytest.approx(totals / len(perms))
    m = retrieval_metrics(s, gt, gallery_groups=groups)
    for k in hits:
        assert m[f"R{k}"] == pytest.approx(100 * hits[k].mean() / len(perms))


def test_several_positives_by_hand():
    # 6 gallery items in groups [0,0,1,1,1,2], all tied; the query's group 1 has 3 positives (items 2, 3, 4)
    s = np.ones((1, 6))
    groups = [0, 0, 1, 1, 1, 2]
    # argsort (index order): items 0, 1 first, item 2 third -> rank 3
    assert ranks(s, [1], ties="argsort", gallery_groups=groups).tolist() == [3]
    # expected: g = 0, t = 3 negatives, p = 3 positives -> 1 + 3/4 = 1.75; P(rank 1) = 1 - 3/6 = 1/2
    assert ranks(s, [1], gallery_groups=groups).tolist() == [1.75]
    assert retrieval_metrics(s, [1], gallery_groups=groups)["R1"] == 50.0
    with pytest.raises(ValueError, match="query group 7 has no gallery item"):
        ranks(s, [7], gallery_groups=groups)
    with pytest.raises(ValueError, match="one entry per gallery item"):
        ranks(s, [1], gallery_groups=[0, 1])
    with pytest.raises(ValueError, match="ties must be one of argsort, expected"):
        ranks(s, [1], ties="random")


def test_bad_inputs():
    with pytest.raises(ValueError, match="non-finite"):
        retrieval_metrics(np.array([[np.nan, 1.0]]), [0])
    with pytest.raises(ValueError, match="one entry per query"):
        retrieval_metrics(np.zeros((2, 2)), [0])
    with pytest.raises(ValueError, match="out of range"):
        retrieval_metrics(np.zeros((1, 2)), [5])
    with pytest.raises(ValueError, match=r"\[n_query, n_gallery\]"):
        retrieval_metrics(np.zeros(3), [0])


def test_k_occurrence_constructed_pattern():
    # 4 queries, 5 gallery items, k=2. Scores make every query's top-2 = {0, q+1}:
    # item 0 is a hub (N=4), items 1..4 appear once each.
    s = np.zeros((4, 5))
    s[:, 0] = 1.0
    for q in range(4):
        s[q, q + 1] = 0.5
    nk = k_occurrence(s, k=2)
    assert nk.tolist() == [4, 1, 1, 1, 1]
    assert nk.sum() == 4 * 2


def test_hubness_measures_by_hand():
    # 6 queries, 6 gallery items, k=1: item 0 taken by 4 queries, items 1 and 2 once, items 3..5 never.
    s = np.zeros((6, 6))
    for q, g in enumerate([0, 0, 0, 0, 1, 2]):
        s[q, g] = 1.0
    h = hubness(s, k=1)
    nk = np.array([4, 1, 1, 0, 0, 0], dtype=float)
    mu = nk.mean()  # 1
    m2 = ((nk - mu) ** 2).mean()
    m3 = ((nk - mu) ** 3).mean()
    assert h["skewness"] == pytest.approx(m3 / m2 ** 1.5)
    assert h["atkinson"] == pytest.approx(1 - np.sqrt(nk).mean() ** 2 / mu)
    assert h["robin_hood"] == pytest.approx(0.5 * np.abs(nk - mu).sum() / nk.sum())   # = 0.5
    assert h["antihub_occurrence"] == pytest.approx(3 / 6)
    assert h["antihub_count"] == 3
    # hubs: N_k >= 2k = 2 -> item 0 only; share of the 6 top-1 slots = 4/6
    assert h["hub_occurrence"] == pytest.approx(4 / 6)
    assert h["max_k_occurrence"] == 4
    # the truncated skewness: the third moment of a standard normal truncated at the k-occurrence's zero (scikit-
    # hubness), as scipy.stats.truncnorm gives it
    from scipy.stats import truncnorm

    sd = nk.std(ddof=1)
    assert h["truncated_skewness"] == pytest.approx(
        truncnorm(-mu / sd, (np.iinfo(np.int64).max - mu) / sd).moment(3), rel=1e-12)


@pytest.mark.parametrize("a,b", [(a, b) for a in (-40.0, -12.0, -2.5, -0.3, 0.0) for b in (1e17, np.inf)] +  # hubness
                         [(a, b) for a in (-6.0, -2.5, -0.3, 0.0, 0.7, 3.0) for b in (a + 0.4, a + 2.0, np.inf)])
def test_truncated_normal_third_moment_matches_scipy(a, b):
    # workloads/metrics.py computes it in closed form: importing scipy.stats would cost each trial process ~0.5 s
    from scipy.stats import truncnorm

    from workloads.metrics import _truncnorm_third_moment

    assert _truncnorm_third_moment(a, b) == pytest.approx(float(truncnorm(a, b).moment(3)), rel=1e-12, abs=1e-12)


def test_hubness_does_not_import_scipy_stats():
    import subprocess
    import sys

    code = ("import sys, numpy as np; from workloads.metrics import summarise; "
            "summarise(np.random.default_rng(0).random((30, 30)), list(range(30))); "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_uniform_occurrence_has_no_hubness():
    s = np.eye(8)
    h = hubness(s, k=1)
    assert h["skewness"] == 0 and h["robin_hood"] == 0 and h["antihub_occurrence"] == 0
    assert h["atkinson"] == pytest.approx(0)


def test_summarise_combines_and_records_k():
    out = summarise(np.eye(4), np.arange(4), k=2)
    assert out["R1"] == 100 and out["hub_k"] == 2 and "hub_skewness" in out


# -- TCR's embedding diagnostics (docs/faithfulness.md: Diagnostics) ----------------------------------------------
def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_uniformity_and_modality_gap_extremes():
    from workloads.metrics import modality_gap, uniformity

    u = np.array([[0.6, 0.8, 0.0]])
    same = np.repeat(u, 5, axis=0)
    assert uniformity(same) == 0.0 and modality_gap(same, same) == 0.0            # identical inputs
    assert uniformity(same * np.arange(1, 6)[:, None]) == pytest.approx(0.0)     # rows are normalised first
    pairs = np.concatenate([np.eye(3), -np.eye(3)])                              # antipodal pairs: centre 0
    assert uniformity(pairs) == pytest.approx(1.0)
    assert modality_gap(same, -same) == pytest.approx(2.0)                       # opposite directions
    # by hand: rows (1, 0) and (0, 1): centre (.5, .5), each at sqrt(.5); gap to (1, 0): |(-.5, .5)|
    assert uniformity(np.eye(2)) == pytest.approx(np.sqrt(0.5))
    assert modality_gap(np.eye(2), np.array([[1.0, 0.0]])) == pytest.approx(np.sqrt(0.5))
    assert uniformity(torch.eye(2)) == pytest.approx(np.sqrt(0.5))               # tensors too
    for bad in (np.zeros((0, 3)), np.zeros((2, 3)), np.array([[np.nan, 1.0]])):
        with pytest.raises(ValueError):
            uniformity(bad)


def test_scaling_queries_about_their_centre_raises_uniformity_and_moving_them_lowers_the_gap():
    from workloads.metrics import DIAGNOSTIC_METRICS, embedding_diagnostics, modality_gap, uniformity

    rng = np.random.default_rng(0)
    q = _unit(np.array([1.0, 0, 0, 0]) + 0.3 * rng.standard_normal((50, 4)))      # a compact query cloud
    g = _unit(np.array([0.3, 1.0, 0, 0]) + 0.5 * rng.standard_normal((80, 4)))    # the gallery elsewhere
    centre = q.mean(0)
    before_u, before_g = uniformity(q), modality_gap(q, g)
    for lam in (1.5, 2.0, 3.0):   # TCR Eq. 12, then re-normalised as TCR does
        assert uniformity(_unit(centre + lam * (q - centre))) > before_u
    assert uniformity(_unit(centre + 0.5 * (q - centre))) < before_u          # lambda < 1 lowers it
    for lam in (0.25, 0.5, 0.75):  # TCR Eq. 13 towards the gallery centre, re-normalised
        assert modality_gap(_unit(q - lam * (centre - g.mean(0))), g) < before_g
    d = embedding_diagnostics(q, g, "shifted")
    assert d == {"uniformity_shifted": before_u, "modality_gap_shifted": before_g}
    assert set(DIAGNOSTIC_METRICS) == {f"{m}_{s}" for m in ("uniformity", "modality_gap")
                                       for s in ("clean", "shifted", "adapted")}
    with pytest.raises(ValueError, match="stage must be one of clean, shifted, adapted"):
        embedding_diagnostics(q, g, "after")
