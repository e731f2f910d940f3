"""The published in-domain clean numbers (workloads/paper.py IN_DOMAIN): one row per published (backbone, dataset,
direction), each with its protocol and its source, and the lookup `check` uses for the 20 in-domain cases."""
import pytest

from workloads import paper
from workloads.backbones.registry import BACKBONES
from workloads.datasets.base import DATASETS


def test_every_row_is_an_in_domain_vit_b32_result_with_its_protocol_and_source():
    assert paper.IN_DOMAIN, "no published in-domain row"
    for row in paper.IN_DOMAIN:
        assert row.setting == "in_domain" and row.source == row.dataset, row
        assert row.backbone in BACKBONES and row.dataset in DATASETS and row.direction in ("t2v", "v2t"), row
        assert "ViT-B/32" in row.table or "README" in row.table, row  # the backbone the tool loads
        assert "quoted in" in row.table or "README" in row.table or "Papers with Code" in row.table, row
        recalls = [v for v in (row.r1, row.r5, row.r10) if v is not None]
        assert recalls == sorted(recalls) and all(0 < v <= 100 for v in recalls), row
        queries, gallery = paper.protocol(row)
        assert queries > 0 and gallery > 0, row   # MSVD t2v: 27,763 caption queries rank 670 videos
    # one row per case, except MSRVTT t2v of X-Pool: one per training split (9k, 7k)
    keys = [(r.backbone, r.dataset, r.direction, r.train_split) for r in paper.IN_DOMAIN]
    assert len(keys) == len(set(keys))


def test_lookup_answers_all_20_in_domain_cases():
    assert len(paper.IN_DOMAIN_CASES) == 20 and len(set(paper.IN_DOMAIN_CASES)) == 20
    assert {d for _, d, _ in paper.IN_DOMAIN_CASES} == set(paper.DATASETS) <= set(DATASETS)
    found = {case: paper.in_domain_result(*case) for case in paper.IN_DOMAIN_CASES}
    for case, row in found.items():
        assert row is None or (row.backbone, row.dataset, row.direction) == case
    # every published row is reachable from its case (MSRVTT-7k through train_split)
    reached = {id(r) for r in found.values() if r is not None}
    reached.add(id(paper.in_domain_result("xpool", "msrvtt", "t2v", train_split="7k")))
    assert reached == {id(r) for r in paper.IN_DOMAIN}
    # the module docstring's coverage: 12 cases have a number, the other 8 are absent (not guessed)
    assert sum(r is not None for r in found.values()) == 12
    assert found[("clip4clip", "lsmdc", "t2v")] is None and found[("xpool", "didemo", "t2v")] is None


def test_lookup_picks_the_training_split_and_protocol():
    nine = paper.in_domain_result("xpool", "msrvtt", "t2v")
    seven = paper.in_domain_result("xpool", "msrvtt", "t2v", train_split="7k")
    assert (nine.train_split, nine.r1) == ("9k", 46.9) and (seven.train_split, seven.r1) == ("7k", 43.9)
    # MSVD's published numbers score every test caption: t2v 27,763 queries; v2t 670 videos against 27,763 captions,
    # so a split with the authors' first caption only (670 x 670) is never compared with them
    t2v, v2t = (paper.in_domain_result("clip4clip", "msvd", d) for d in ("t2v", "v2t"))
    assert paper.protocol(t2v) == (27763, 670) and paper.protocol(v2t) == (670, 27763)
    assert paper.protocol(paper.in_domain_result("xpool", "lsmdc", "t2v")) == (paper.N_QUERIES["lsmdc"],) * 2
    with pytest.raises(ValueError, match="direction"):
        paper.in_domain_result("xpool", "msrvtt", "both")
