import numpy as np
import pytest
import torch

from workloads.metrics import hubness, k_occurrence, ranks, retrieval_metrics, summarise


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


def test_ties_are_deterministic_and_pessimistic_for_lower_index():
    s = np.ones((2, 3))
    # every item ties: the gt ranks behind all items with a lower gallery index
    assert ranks(s, [0, 2]).tolist() == [1, 3]


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
    # scipy's truncnorm moment gives the truncated skewness; it must be finite and positive here
    assert np.isfinite(h["truncated_skewness"])


def test_uniform_occurrence_has_no_hubness():
    s = np.eye(8)
    h = hubness(s, k=1)
    assert h["skewness"] == 0 and h["robin_hood"] == 0 and h["antihub_occurrence"] == 0
    assert h["atkinson"] == pytest.approx(0)


def test_summarise_combines_and_records_k():
    out = summarise(np.eye(4), np.arange(4), k=2)
    assert out["R1"] == 100 and out["hub_k"] == 2 and "hub_skewness" in out
