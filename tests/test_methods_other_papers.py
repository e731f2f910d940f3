"""The methods from the other seed papers (docs/faithfulness.md: DeYO, Training-free TCR, TITAN): their pieces by
hand, and their behaviour on a micro-model stream. The registry-wide tests (every method x backbone x direction,
determinism, NaN guards) are in tests/test_methods.py and include them."""
import math

import pytest
import torch
import torch.nn.functional as F

from test_methods import Stream, one_thread  # noqa: F401 (one_thread: an autouse fixture)
from workloads.backbones import BACKBONES
from workloads.methods import QueryBatch, SourceFeatures, iter_batches, run_stream
from workloads.methods._memory import modality_gap
from workloads.methods.deyo import deyo_select, deyo_weighted_entropy, patch_shuffle, token_shuffle
from workloads.methods.tcr_untrained import rectify_queries
from workloads.methods.titan import (BiasCorrectionHead, balanced_bce, counterfactual_captions, kmeans,
                                     rematch_labels)
from workloads.metrics import uniformity
from workloads.spec import DIRECTIONS


@pytest.fixture(scope="module")
def streams():
    return {(b, d): Stream(b, d) for b in BACKBONES.names() for d in DIRECTIONS}


# ------------------------------------------------------------------------------------------------------------
# DeYO
# ------------------------------------------------------------------------------------------------------------

def test_patch_shuffle_permutes_each_frames_patches():
    x = torch.arange(2 * 3 * 1 * 8 * 8, dtype=torch.float32).view(2, 3, 1, 8, 8)   # [B, T, C, H, W]
    out = patch_shuffle(x, patch_len=2, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape

    def patches(img):   # the four 4x4 patches of one 8x8 frame, as sorted tuples
        return sorted(tuple(img[0, r:r + 4, c:c + 4].flatten().tolist()) for r in (0, 4) for c in (0, 4))

    moved = 0
    for b in range(2):
        for t in range(3):
            assert patches(out[b, t]) == patches(x[b, t])      # the same patches, each kept whole
            moved += not torch.equal(out[b, t], x[b, t])
    assert moved >= 4   # 6 frames, each permuted on its own (identity has probability 1/24 per frame)
    again = patch_shuffle(x, patch_len=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    assert torch.equal(patch_shuffle(x, patch_len=1), x)      # one patch: nothing to shuffle
    odd = torch.rand(2, 3, 10, 10)                             # 10 px: resized to 8, shuffled, back to 10
    assert patch_shuffle(odd, patch_len=4).shape == odd.shape


def test_token_shuffle_keeps_start_end_and_padding():
    tokens = torch.tensor([[49406, 10, 11, 12, 13, 49407, 0, 0],
                           [49406, 20, 49407, 0, 0, 0, 0, 0]])
    out = token_shuffle(tokens, generator=torch.Generator().manual_seed(1))
    assert out[:, 0].tolist() == [49406, 49406] and out[0, 5] == 49407 and out[0, 6:].tolist() == [0, 0]
    assert sorted(out[0, 1:5].tolist()) == [10, 11, 12, 13] and out[0, 1:5].tolist() != [10, 11, 12, 13]
    assert torch.equal(out[1], tokens[1])                     # one word: nothing to shuffle


def test_deyo_filters_and_weights_by_hand():
    # 3 queries over G = 4: entropies 0.2, 0.9, 1.3; threshold 0.5 ln 4 = 0.693 keeps query 0 only
    entropy = torch.tensor([0.2, 0.9, 1.3])
    probs = torch.tensor([[0.9, 0.05, 0.03, 0.02], [0.5, 0.3, 0.1, 0.1], [0.3, 0.3, 0.2, 0.2]])
    prime = torch.tensor([[0.6, 0.2, 0.1, 0.1], [0.5, 0.3, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    asked = []

    def probs_prime(ids):
        asked.append(ids.tolist())
        return prime[ids]

    ids, plpd = deyo_select(entropy, probs, probs_prime, 0.5 * math.log(4), 0.2)
    assert asked == [[0]]                                 # only the entropy-filtered queries are transformed
    assert ids.tolist() == [0] and plpd.tolist() == pytest.approx([0.3])   # 0.9 - 0.6 > 0.2
    ids, _ = deyo_select(entropy, probs, probs_prime, 0.5 * math.log(4), 0.35)
    assert ids.numel() == 0                               # PLPD 0.3 <= 0.35: nobody left
    ids, plpd = deyo_select(entropy, probs, probs_prime, 0.0, 0.2, filter_ent=False, filter_plpd=False,
                            max_entropy=math.log(4))
    assert ids.tolist() == [0, 1, 2] and plpd.tolist() == pytest.approx([0.3, 0.0, 0.05])
    # weights exp(-(H - e0)) + exp(PLPD), e0 = 0.4 ln 4
    e0 = 0.4 * math.log(4)
    h, p = torch.tensor([0.2, 0.9]), torch.tensor([0.3, 0.1])
    want = (0.2 * (math.exp(-(0.2 - e0)) + math.exp(0.3)) + 0.9 * (math.exp(-(0.9 - e0)) + math.exp(0.1))) / 2
    assert deyo_weighted_entropy(h, p, e0).item() == pytest.approx(want, rel=1e-6)
    assert deyo_weighted_entropy(h, p, e0, reweight_ent=False).item() == pytest.approx(
        (0.2 * math.exp(0.3) + 0.9 * math.exp(0.1)) / 2, rel=1e-6)
    assert deyo_weighted_entropy(h, p, e0, False, False).item() == pytest.approx(0.55)


def test_deyo_defaults_keep_nobody_on_near_uniform_predictions(streams):
    s = streams[("clip4clip", "v2t")]
    m, _ = s.run("deyo")
    assert m.updates == 0 and s.changed() == set() and m.selected == [0] * 9   # 3 batches x 3 steps
    m, _ = s.run("deyo", deyo_margin=2.0, plpd_threshold=-1.0)
    assert m.updates == 9 and set(m.selected) == {16, 4}       # everybody: batches of 16, 16, 4
    assert m.stream_stats([0]) == {"deyo_updates_share": 1.0, "deyo_selected_per_step": 12.0}


# ------------------------------------------------------------------------------------------------------------
# training-free TCR
# ------------------------------------------------------------------------------------------------------------

def test_rectify_queries_scales_about_the_centre_and_sets_the_gap():
    z = F.normalize(torch.tensor([[1.0, 0.2, 0.0], [0.8, -0.1, 0.3], [0.9, 0.0, -0.2]]), dim=-1)
    g = F.normalize(torch.tensor([[0.1, 1.0, 0.0], [0.0, 0.9, 0.4], [0.2, 0.8, -0.1]]), dim=-1)
    moved, c, shift = rectify_queries(z, g, 2.0, None)
    torch.testing.assert_close(c, z.mean(0))
    torch.testing.assert_close(moved - c, 2 * (z - c))       # Eq. 12: twice as far from the centre
    assert torch.equal(shift, torch.zeros(3))
    target = torch.tensor(0.3)
    moved, c, shift = rectify_queries(z, g, 2.0, target)
    # Eq. 13 moves the centre along (mean g - c) until its distance to mean g is the target gap
    assert (moved.mean(0) - g.mean(0)).norm().item() == pytest.approx(0.3 * modality_gap(z, g).item()
                                                                        / (c - g.mean(0)).norm().item(), rel=1e-5)
    # with unit rows the batch gap is exactly ||c - mean g||: the rectified gap is the target
    assert (moved.mean(0) - g.mean(0)).norm().item() == pytest.approx(0.3, rel=1e-5)


@pytest.mark.parametrize("backbone", ["clip4clip", "xpool"])
@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_tcr_untrained_changes_no_weight_and_is_source_at_scale_1_without_queue(streams, backbone, direction):
    s = streams[(backbone, direction)]
    _, source = s.run("source")
    m, same = s.run("tcr_untrained", scale=1.0, update_batches=0)
    assert s.changed() == set() and len(m.queue) == 0
    torch.testing.assert_close(same, source, atol=1e-5, rtol=1e-5)
    m, moved = s.run("tcr_untrained")
    assert s.changed() == set() and not torch.allclose(moved, source, atol=1e-4)
    assert len(m.queue) == 9 and m.batches_seen == 3          # int(0.3 B) pairs of batches of 16, 16, 4: 4 + 4 + 1
    # more uniform than the queries Source scored (Eq. 12 with lambda 2)
    source_method = s.method("source")
    run_stream(source_method, iter_batches(s.queries, 16))
    assert uniformity(torch.cat(m.query_embeddings)) > uniformity(torch.cat(source_method.query_embeddings))


def test_tcr_untrained_clip4clip_scores_are_the_moved_embeddings_cosine(streams):
    s = streams[("clip4clip", "v2t")]
    m, scores = s.run("tcr_untrained")
    # independently: the moved unit embedding of each query against the normalised gallery texts
    g = F.normalize(s.gallery.features, dim=-1)
    z = torch.cat(m.query_embeddings)
    torch.testing.assert_close(scores, z @ g.t(), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------------------
# TITAN
# ------------------------------------------------------------------------------------------------------------

def test_rematch_labels_by_hand():
    # item 0 is every query's argmax (a hub)
    s = torch.tensor([[0.9, 0.8], [0.95, 0.1], [0.99, 0.5]])
    # query 0: R_qv (1, 2); its rank in column 0 (0.9, 0.95, 0.99): 3, in column 1 (0.8, 0.1, 0.5): 1 -> M (4, 3)
    # query 1: R_qv (1, 2); column 0: 2, column 1: 3 -> M (3, 5); query 2: column 0: 1, column 1: 2 -> M (2, 4)
    assert rematch_labels(s, s, None, 1.0).tolist() == [1, 0, 0]
    assert rematch_labels(s, s, None, 0.0).tolist() == [0, 0, 0]           # alpha 0: plain argmax
    # a remembered row scoring item 1 at 0.85 pushes query 0 to rank 2 there: M (4, 4) -> tie to the lower index
    memory = torch.tensor([[0.5, 0.85]]).t().sort(dim=1).values             # [G, R] sorted columns
    assert rematch_labels(s, s, memory, 1.0).tolist() == [0, 0, 0]
    # a counterfactual row is ranked against the batch and the memory, not against itself
    cf = torch.tensor([[0.6, 0.79]])
    # R_qv (2, 1); column 0: 4 (below 0.9, 0.95, 0.99), column 1: 3 (0.8, 0.85 above) -> M (6, 4)
    assert rematch_labels(cf, s, memory, 1.0).tolist() == [1]


def test_counterfactual_captions_mask_a_hubs_frequent_content_words():
    history = {7: ["a red circle moves left", "a red square moves up", "a blue circle stays still"]}
    content = {"red", "circle", "moves", "left", "square", "up", "blue", "stays", "still"}
    got = counterfactual_captions(["a red circle moves left", "a green cross"], [7, 3], {7}, history, 0.5,
                                  content.__contains__)
    # in > 1.5 of the hub's 3 captions: red (2), circle (2), moves (2); "a" is not a content word
    assert got == [(0, "a left")]
    assert counterfactual_captions(["red circle moves"], [7], {7}, history, 0.5, content.__contains__) == []


def test_kmeans_and_the_head_pieces():
    x = torch.cat([torch.randn(20, 3) * 0.05 + torch.tensor([1.0, 0, 0]),
                   torch.randn(20, 3) * 0.05 + torch.tensor([0, 1.0, 0])])
    c = kmeans(x, 2)
    assert sorted(c.argmax(1).tolist()) == [0, 1] and torch.equal(c, kmeans(x, 2))
    assert torch.equal(kmeans(x[:1], 4), x[:1])
    head = BiasCorrectionHead(3, torch.tensor([[0.0, 0.0, 1.0]]))
    t, v = torch.randn(5, 3), torch.randn(5, 3)
    # one confounder: the attention is 1, so the debiased video is v + W3 c (Eq. 10-11), at the head's sqrt(D) scale
    torch.testing.assert_close(head.debiased_video(t, v), head.scale * v + head.w3(head.scale * head.confounders))
    assert head.logit(t, v).shape == (5,)
    assert torch.isfinite(head.mutual_information_loss(t, v, torch.randn(4, 3)))
    # class-balanced BCE: one positive against three negatives weighs like one against one
    logits, y = torch.tensor([2.0, -1.0, -1.0, -1.0]), torch.tensor([1.0, 0.0, 0.0, 0.0])
    want = 0.5 * F.softplus(torch.tensor(-2.0)) + 0.5 * F.softplus(torch.tensor(-1.0))
    assert balanced_bce(logits, y).item() == pytest.approx(want.item())


def paired_source(s, n=64, seed=0):
    """Source pairs the head can learn: text = its video's feature plus noise."""
    g = torch.Generator().manual_seed(seed)
    video = F.normalize(torch.randn(n, s.gallery.features.shape[-1], generator=g), dim=-1)
    return SourceFeatures(F.normalize(video + 0.3 * torch.randn(video.shape, generator=g), dim=-1), video)


def texts_batches(s):
    captions = [f"a {c} shape number {i}" for i, c in zip(range(36), ["red", "blue", "green", "pink"] * 36)]
    return [QueryBatch(b, s.queries[i:i + 16], tuple(captions[i:i + 16])) for b, i in enumerate(range(0, 36, 16))]


def test_titan_without_source_says_its_head_is_off_and_v2t_is_flagged(streams):
    m, _ = streams[("clip4clip", "v2t")].run("titan")
    assert not m.head_active and m.paper_derived
    assert "titan: bias-correction head off (no source pairs given)" in m.fallbacks
    assert any("symmetric variant" in f for f in m.fallbacks)
    assert any(f.startswith("titan: counterfactual queries off (v2t") for f in m.fallbacks)
    m.attach_source(None, "a zero-shot checkpoint has no source train split")
    assert "titan: bias-correction head off (a zero-shot checkpoint has no source train split)" in m.fallbacks
    assert sum(f.startswith("titan: bias-correction head off") for f in m.fallbacks) == 1


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_titan_head_learns_on_the_source_and_reorders_only_the_top_eta(streams, direction):
    s = streams[("xpool", direction)]
    m = s.method("titan", source_steps=60, eta=3)
    m.attach_source(paired_source(s))
    assert m.head_active and m.source_loss < 0.6     # class-balanced BCE of a constant guess: ln 2 = 0.693
    assert "titan: bias-correction head off (no source pairs given)" not in m.fallbacks
    trained = {k: v.clone() for k, v in m.head.state_dict().items()}
    scores = run_stream(m, iter_batches(s.queries, 16))
    assert torch.isfinite(scores).all()
    assert any(not torch.equal(v, trained[k]) for k, v in m.head.state_dict().items())   # test-time updates
    # re-scoring a forward: only the top-eta items move, and they keep the row's top-eta scores
    out = m.forward_output(QueryBatch(0, s.queries[:16]))
    raw = out.scores.detach()
    new = m.rescore(out)
    top = raw.topk(3, dim=1).indices
    outside = torch.ones_like(raw, dtype=torch.bool).scatter(1, top, False)
    assert torch.equal(new[outside], raw[outside])
    torch.testing.assert_close(new.topk(3, dim=1).values, raw.topk(3, dim=1).values)
    assert set(new.topk(3, dim=1).indices.flatten().tolist()) == set(top.flatten().tolist())
    # reset restores the source-trained head
    m.reset()
    assert all(torch.equal(v, trained[k]) for k, v in m.head.state_dict().items())


def test_titan_rematch_switch_memory_and_counterfactual_queries(streams):
    s = streams[("clip4clip", "t2v")]
    m = s.method("titan", beta=0, theta=0.3, memory_size=20)
    run_stream(m, texts_batches(s))
    assert sum(r.shape[0] for r in m.rows) == 20            # the newest 20 score rows
    assert m.counterfactual_count > 0                        # every item is a hub at beta 0
    assert any("WordNet" in f for f in m.fallbacks)
    stats = m.stream_stats(torch.arange(36))
    assert set(stats) == {"titan_counterfactual_queries", "titan_pseudo_label_acc", "titan_argmax_label_acc"}
    off = s.method("titan", rematch=False, counterfactual=False)
    run_stream(off, texts_batches(s))
    assert off.counterfactual_count == 0
    assert all(torch.equal(a, b) for a, b in zip(off.pseudo_labels, off.argmax_labels))
    on = s.method("titan", counterfactual=False)
    run_stream(on, texts_batches(s))
    assert any(not torch.equal(a, b) for a, b in zip(on.pseudo_labels, on.argmax_labels))   # re-matching moves some
    # without caption strings (a stream of tokens only) there is nothing to mask
    plain = s.method("titan", beta=0)
    run_stream(plain, iter_batches(s.queries, 16))
    assert plain.counterfactual_count == 0


def test_titan_source_stage_notes_in_the_plan(tmp_path):
    """The plan says where TITAN's bias-correction head cannot learn (orchestrator/planning/plan.py
    `source_stage_notes`, from the registration's `source_stage`): a zero-shot model has no source train split; a
    generated dataset always has one; a cross-dataset cell reads its source's."""
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    grid = parse_grid({"name": "t", "datasets": {"synthetic": {}, "synthetic_b": {}}, "backbones": ["clip4clip"],
                       "methods": ["source", "titan"], "models": {"zero_shot_pretrain": {"dataset": "synthetic_c"}},
                       "query_shift": {"datasets": ["synthetic"]},
                       "query_gallery_shift": {"cross_dataset": {"pairs": [["synthetic_b", "synthetic"]]},
                                               "zero_shot": {"datasets": ["synthetic"]}}}, "t.yaml")
    notes = build_plan(grid, Paths.make(tmp_path)).notes
    assert notes == ["titan on synthetic: its bias-correction head is off (a zero-shot checkpoint has no source "
                     "train split); the rest of the method runs"]
