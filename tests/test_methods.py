"""The TTA methods (docs/faithfulness.md): loss terms against hand-computed values, the hub-suppression formula
worked by hand, every registered method on a micro-model stream (both backbones, both directions), determinism, NaN
guards, faithful vs corrected behaviour, the authors' per-configuration settings and option checking. DeYO,
training-free TCR and TITAN have their own file (tests/test_methods_other_papers.py); the parametrised tests here
cover them too."""
import json
import math

import pytest
import torch

from workloads.backbones import BACKBONES, create_backbone
from workloads.methods import (METHODS, NAMES, ForwardOutput, Gallery, QueryBatch, create_method,
                               run_stream)
from workloads.methods._memory import PairMemory, gap_indicator, noise_robust_entropy
from workloads.methods.eata import eata_select, eata_weighted_entropy
from workloads.methods.hat_vtr import HubnessSuppressionMemory, frame_cross_covariance_loss, hub_suppress
from workloads.methods.read import read_loss
from workloads.methods.reference_configs import REFERENCE_CONFIGS
from workloads.spec import DIRECTIONS
from workloads.methods.sar import SAM, sar_second_loss, sar_threshold

# every registered method that adapts (Source only scores): a newly registered method is tested by default
ADAPTING = tuple(n for n in METHODS.names() if METHODS.lookup(n).adapts)
# methods whose corrected mode (`faithful: false`) is a different method from the faithful one
WITH_CORRECTED_MODE = tuple(n for n in METHODS.names() if METHODS.lookup(n).corrected)
# options that make a method adapt on the micro model's near-uniform predictions (DeYO's default entropy filter,
# 0.5 ln G, keeps nobody there: it would pass the tests below by never updating)
STREAM_OPTIONS = {"deyo": {"deyo_margin": 2.0, "plpd_threshold": -1.0}}
# the methods of the HAT-VTR authors' code (vtr_tta): the others come from other papers' code (DeYO's, TCR's) or
# from a paper alone (TITAN), and have no shipped configuration there
VTR_TTA_METHODS = ("source", "tent", "read", "sar", "eata", "tcr", "hat_vtr")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The micro model is tiny: torch's thread pool only adds contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def H(logits):
    """Entropy of softmax(logits) for a list of floats, by hand."""
    e = [math.exp(x) for x in logits]
    return -sum(x / sum(e) * math.log(x / sum(e)) for x in e)


# ------------------------------------------------------------------------------------------------------------
# micro-model streams
# ------------------------------------------------------------------------------------------------------------

class Stream:
    """A micro model's stream of 36 random clips or captions against the other side, encoded as the trial does:
    the backbone's features with their parts (workloads/backbones/model.py), and each clip's side inputs where the
    backbone reads some (OCR windows: a word of its own per clip, in half of its windows)."""

    def __init__(self, backbone, direction, n=36, seed=0):
        torch.manual_seed(seed)
        self.model = create_backbone(backbone, "mlvp-micro")
        self.direction = direction
        g = torch.Generator().manual_seed(seed)
        clips = torch.randint(0, 256, (n, 12, 32, 32, 3), dtype=torch.uint8, generator=g)
        captions = [f"a {c} shape number {i}" for i, c in zip(range(n), ["red", "blue", "green", "pink"] * n)]
        self.side = ({"ocr": [[[f"SIGN{i}"] if w % 2 else [] for w in range(12)] for i in range(n)]}
                     if self.model.video_inputs else None)
        with torch.no_grad():
            if direction == "v2t":
                text = self.model.text_features(self.model.tokenize(captions))
                self.gallery = Gallery(direction, text.main, text.parts)
                self.queries = self.model.preprocess_frames(clips)
            else:
                video = self.model.video_features(self.model.preprocess_frames(clips), self.side)
                self.gallery = Gallery(direction, video.main, video.parts)
                self.queries = self.model.tokenize(captions)
        self.initial = {k: v.clone() for k, v in self.model.state_dict().items()}

    def batches(self, sizes=None):
        """The stream in batches of 16 (or of `sizes`), with the clips' side inputs."""
        sizes = sizes or [16] * (len(self.queries) // 16) + [len(self.queries) % 16]
        out, start = [], 0
        for b, size in enumerate(x for x in sizes if x):
            side = None
            if self.direction == "v2t" and self.side is not None:
                side = {k: v[start:start + size] for k, v in self.side.items()}
            out.append(QueryBatch(b, self.queries[start:start + size], side=side))
            start += size
        return out

    def method(self, name, **kw):
        self.model.load_state_dict(self.initial)
        return create_method(name, self.model, self.direction, self.gallery, **kw)

    def run(self, name, batches=None, **kw):
        m = self.method(name, **kw)
        return m, run_stream(m, batches if batches is not None else self.batches())

    def changed(self):
        return {k for k, v in self.model.state_dict().items() if not torch.equal(v, self.initial[k])}

    def query_ln_names(self):
        prefixes = ("clip.visual.",) if self.direction == "v2t" else ("clip.transformer.", "clip.ln_final")
        lns = {n for n, m in self.model.named_modules()
               if isinstance(m, torch.nn.LayerNorm) and n.startswith(prefixes)}
        return {f"{n}.{p}" for n in lns for p in ("weight", "bias")}


@pytest.fixture(scope="module")
def streams():
    return {(b, d): Stream(b, d) for b in BACKBONES.names() for d in DIRECTIONS}


def toy_method(name, direction="v2t", g=3, **kw):
    """A method on the micro model whose hooks are fed hand-made ForwardOutputs (only the gallery size matters)."""
    torch.manual_seed(0)
    model = create_backbone("clip4clip", "mlvp-micro")
    feats = torch.randn(g, 64) if direction == "v2t" else torch.randn(g, 12, 64)
    return create_method(name, model, direction, Gallery(direction, feats), **kw)


# ------------------------------------------------------------------------------------------------------------
# hub suppression
# ------------------------------------------------------------------------------------------------------------

def test_hub_suppress_2x2_by_hand():
    # A = [[1, 0], [1, 1]], alpha = beta = ln 3, m = 0.5
    # W_col (softmax down each column of ln3*A): col 0 = (e^ln3, e^ln3)/(3+3) = (1/2, 1/2);
    #                                           col 1 = (e^0, e^ln3)/(1+3)   = (1/4, 3/4)
    # W_row (softmax along each row):           row 0 = (3, 1)/4 = (3/4, 1/4);  row 1 = (3, 3)/6 = (1/2, 1/2)
    # A' = 0.5*A*W_col + 0.5*A*W_row:
    #   (0,0) = 0.5*1*1/2 + 0.5*1*3/4 = 0.625    (0,1) = 0 (A = 0)
    #   (1,0) = 0.5*1*1/2 + 0.5*1*1/2 = 0.5      (1,1) = 0.5*1*3/4 + 0.5*1*1/2 = 0.625
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    out = hub_suppress(a, alpha=math.log(3), beta=math.log(3), m=0.5)
    torch.testing.assert_close(out, torch.tensor([[0.625, 0.0], [0.5, 0.625]]))
    # m = 1: only the gallery-centric (column) term; m = 0: only the row term
    torch.testing.assert_close(hub_suppress(a, math.log(3), math.log(3), 1.0), torch.tensor([[0.5, 0.0], [0.5, 0.75]]))
    torch.testing.assert_close(hub_suppress(a, math.log(3), math.log(3), 0.0), torch.tensor([[0.75, 0.0], [0.5, 0.5]]))


def test_hub_suppress_demotes_a_hub_and_is_stable_at_large_scores():
    # gallery item 0 is the top-1 of all three queries (a hub); query 2 prefers item 1 only slightly less
    a = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.75, 0.74]])
    out = hub_suppress(a)  # alpha 100, beta 10, m 0.5
    assert out.argmax(1).tolist()[2] == 1, "the hub loses the query with a close second choice"
    big = hub_suppress(a * 1e3)  # exp(1e5) would overflow without max-subtraction
    assert torch.isfinite(big).all()


@pytest.mark.parametrize("unit", ["batches", "rows"])
def test_hsm_memory_refine_matches_the_stacked_formula_and_evicts_fifo(unit):
    torch.manual_seed(0)
    hsm = HubnessSuppressionMemory(unit, size=2 if unit == "batches" else 3)
    first = torch.rand(2, 5)
    if unit == "batches":  # reference: nothing remembered -> unrefined
        assert torch.equal(hsm.refine(first), first)
    else:                  # paper: S-bar = S_t alone
        torch.testing.assert_close(hsm.refine(first), hub_suppress(first))
    seen = [first]
    hsm.push(first)
    for b in (torch.rand(2, 5), torch.rand(1, 5)):
        stacked = torch.cat([hsm.rows, b])
        torch.testing.assert_close(hsm.refine(b), hub_suppress(stacked)[-b.shape[0]:])
        assert torch.equal(hsm.select(b), hub_suppress(stacked)[-b.shape[0]:].argmax(1))
        hsm.push(b)
        seen.append(b)
    if unit == "batches":  # newest 2 batch matrices: rows of batches 2 and 3
        assert torch.equal(hsm.rows, torch.cat(seen[1:])) and hsm.batch_sizes == [2, 1]
    else:                  # newest 3 query rows
        assert torch.equal(hsm.rows, torch.cat(seen)[-3:])


def test_hsm_incremental_statistics_match_a_full_restack_over_a_long_stream():
    torch.manual_seed(1)
    for unit, size in (("batches", 100), ("rows", 50)):
        hsm = HubnessSuppressionMemory(unit, size)
        for _ in range(12):
            s = torch.rand(16, 40) * 2 - 1
            if len(hsm):
                torch.testing.assert_close(hsm.refine(s), hub_suppress(torch.cat([hsm.rows, s]))[-16:],
                                           atol=1e-6, rtol=1e-5)
            hsm.push(s)
        assert len(hsm) == (192 if unit == "batches" else 50)


# ------------------------------------------------------------------------------------------------------------
# READ
# ------------------------------------------------------------------------------------------------------------

def test_read_loss_by_hand_and_balance_term_by_mode():
    logits = torch.tensor([[math.log(3), 0.0], [0.0, 0.0]])  # p = (3/4, 1/4), (1/2, 1/2)
    l_ra = (-0.75 * math.log(0.75) - 0.5 * math.log(0.5)) / 2     # gamma = e^-1: pmax (1 - log pmax - 1)
    s = [1.25, 0.75]                                              # sum_i p_i over the gallery
    l_bal = H(s)
    total, ra, bal = read_loss(logits, balance_weight=1.0)
    assert ra.item() == pytest.approx(l_ra, abs=1e-6) and bal.item() == pytest.approx(l_bal, abs=1e-6)
    assert total.item() == pytest.approx(l_ra - l_bal, abs=1e-6)
    # the method: faithful drops the balance term, corrected subtracts it with weight 1
    out = ForwardOutput(logits * 0.02)
    assert toy_method("read", g=2).loss(out, None, 0).item() == pytest.approx(l_ra, abs=1e-5)
    corrected = toy_method("read", g=2, faithful=False)
    assert corrected.options["balance_weight"] == 1.0
    assert corrected.loss(out, None, 0).item() == pytest.approx(l_ra - l_bal, abs=1e-5)


# ------------------------------------------------------------------------------------------------------------
# SAR
# ------------------------------------------------------------------------------------------------------------

def test_sar_percentile_threshold_and_its_k0_guard():
    h = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7])
    e0, reliable = sar_threshold(h, 0.40, n_gallery=1000, faithful=True)   # k = int(5 * 0.4) = 2
    assert e0 == pytest.approx(0.3) and reliable.tolist() == [False, True, False, True, False]
    e0, reliable = sar_threshold(h[:2], 0.40, n_gallery=1000, faithful=True)  # k = int(0.8) = 0 -> guarded to 1
    assert e0 == pytest.approx(0.1) and reliable.tolist() == [False, True]
    e0, reliable = sar_threshold(h, 0.40, n_gallery=10, faithful=False)  # absolute 0.4 ln 10 = 0.921 nats
    assert e0 == pytest.approx(0.4 * math.log(10)) and reliable.all()


def test_sar_second_pass_loss_elementwise_vs_summed():
    logits = torch.tensor([[math.log(3), 0.0], [0.0, 0.0]])  # row 0: p = (3/4, 1/4)
    reliable = torch.tensor([True, False])
    # faithful: e_0j = -p log p = (0.2158, 0.3466); only elements < E0 = 0.3 are kept -> 0.2158
    e = [-0.75 * math.log(0.75), -0.25 * math.log(0.25)]
    assert sar_second_loss(logits, reliable, 0.3, faithful=True).item() == pytest.approx(e[0], abs=1e-6)
    # E0 > 1/e keeps every element: mean = H_0 / G
    assert sar_second_loss(logits, reliable, 0.5, faithful=True).item() == pytest.approx(sum(e) / 2, abs=1e-6)
    # corrected: summed row entropy H_0 = 0.5623 must be < E0
    assert sar_second_loss(logits, reliable, 0.3, faithful=False) is None
    assert sar_second_loss(logits, reliable, 1.0, faithful=False).item() == pytest.approx(sum(e), abs=1e-6)


def test_sam_climbs_then_steps_adamw_from_the_original_point():
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = SAM([p], torch.optim.AdamW, rho=0.05, lr=0.1, weight_decay=0.0)
    (p ** 2).sum().backward()                          # g = 2p = (2, 4), ||g|| = sqrt(20)
    opt.first_step()
    torch.testing.assert_close(p.detach(), torch.tensor([1.0, 2.0]) + 0.05 * torch.tensor([2.0, 4.0]) / math.sqrt(20))
    (p ** 2).sum().backward()
    opt.second_step()                                  # back to w, then one Adam step: -lr * sign(g) (bias-corrected)
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, 1.9]), atol=1e-6, rtol=0)
    # nothing got a gradient at the perturbed point (the reference's constant-zero loss): params stay perturbed
    (p ** 2).sum().backward()
    opt.first_step()
    perturbed = p.detach().clone()
    opt.second_step(restore_all=False)
    assert torch.equal(p.detach(), perturbed)
    # reset restores the AdamW moments too
    assert opt.state_dict()["state"], "AdamW state lives in the shared state_dict"


def test_sar_model_recovery_only_when_corrected(streams):
    s = streams[("clip4clip", "v2t")]
    m, _ = s.run("sar", faithful=False, margin=10.0, reset_constant=1e9)  # EMA always < 1e9 -> reset every step
    assert m.resets == 9 and s.changed() == set()
    m, _ = s.run("sar", faithful=True, reset_constant=1e9)
    assert m.resets == 0 and m.options["model_reset"] is False and s.changed()


# ------------------------------------------------------------------------------------------------------------
# EATA
# ------------------------------------------------------------------------------------------------------------

def test_eata_filters_weighting_and_fallbacks_by_hand():
    h = torch.tensor([0.1, 0.5, 0.3, 0.9])
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.5, 0.5]])
    assert eata_select(h, probs, 0.4, 0.05, None, fallbacks=True).tolist() == [0, 2]  # H < 0.40
    m = torch.tensor([1.0, 0.0])  # cos(m, p_0) = 1 (redundant), cos(m, p_2) = 0 (kept)
    assert eata_select(h, probs, 0.4, 0.05, m, fallbacks=True).tolist() == [2]
    # nobody below E0: faithful keeps the ceil(25% of 4) = 1 lowest entropy; corrected keeps nobody
    high = torch.tensor([0.8, 0.5, 0.6, 0.9])
    assert eata_select(high, probs, 0.4, 0.05, None, fallbacks=True).tolist() == [1]
    assert eata_select(high, probs, 0.4, 0.05, None, fallbacks=False).numel() == 0
    # everyone redundant: faithful keeps ceil(10% of the 2 survivors) = 1 lowest-entropy survivor
    assert eata_select(h, probs, 0.4, 0.05, torch.tensor([0.6, 0.8]), fallbacks=True).tolist() == [0]
    assert eata_select(h, probs, 0.4, 0.05, torch.tensor([0.6, 0.8]), fallbacks=False).numel() == 0
    # weight exp(-(H - E0)): mean(0.1 e^0.3, 0.3 e^0.1)
    w = eata_weighted_entropy(torch.tensor([0.1, 0.3]), 0.4).item()
    assert w == pytest.approx((0.1 * math.exp(0.3) + 0.3 * math.exp(0.1)) / 2, abs=1e-6)


def test_eata_moving_average_probs_and_margin_by_mode():
    m = toy_method("eata", g=2, temperature=1.0, e_margin=1.0)  # absolute 1.0 nats: both rows pass
    logits = torch.tensor([[math.log(3), 0.0], [0.0, math.log(3)]])
    out = ForwardOutput(logits)
    loss = m.loss(out, None, 0)
    h = H([math.log(3), 0.0])
    assert loss.item() == pytest.approx(h * math.exp(-(h - 1.0)), abs=1e-5)
    torch.testing.assert_close(m.model_probs, torch.tensor([0.5, 0.5]))  # init = mean of kept p
    # next step: cos((.5,.5), (.75,.25)) = 0.894 > 0.05 for both -> fallback keeps 1 (ceil 10%), m moves 10% to it
    out2 = ForwardOutput(torch.tensor([[math.log(3), 0.0], [math.log(3), 0.0]]))
    m.loss(out2, None, 1)
    torch.testing.assert_close(m.model_probs, 0.9 * torch.tensor([0.5, 0.5]) + 0.1 * torch.tensor([0.75, 0.25]))
    assert m.e0 == 1.0
    corrected = toy_method("eata", g=1000, faithful=False)
    assert corrected.e0 == pytest.approx(0.4 * math.log(1000))
    # corrected: a step whose filters leave nobody makes no update and leaves m alone
    c2 = toy_method("eata", g=2, faithful=False, temperature=1.0, e_margin=0.1)  # E0 = 0.069 nats
    assert c2.loss(ForwardOutput(torch.zeros(2, 2)), None, 0) is None and c2.model_probs is None


# ------------------------------------------------------------------------------------------------------------
# TCR
# ------------------------------------------------------------------------------------------------------------

def test_pair_memory_min_stack_and_max_stack():
    mem = PairMemory(3, keep="smallest")
    d = torch.zeros(1, 2)
    mem.push(torch.tensor([5.0, 1.0]), d.repeat(2, 1), d.repeat(2, 1), torch.tensor([0.5, 0.1]))
    assert mem.keys.tolist() == [5.0, 1.0]            # below capacity: insertion order
    mem.push(torch.tensor([3.0, 0.0]), d.repeat(2, 1), d.repeat(2, 1), torch.tensor([0.3, 0.0]))
    assert mem.keys.tolist() == [0.0, 1.0, 3.0] and mem.entropy.tolist() == pytest.approx([0.0, 0.1, 0.3])
    mem.push(torch.tensor([2.0]), d, d, torch.tensor([0.2]))
    assert mem.keys.tolist() == [0.0, 1.0, 2.0]
    big = PairMemory(2, keep="largest")
    big.push(torch.tensor([1.0, 3.0, 2.0]), d.repeat(3, 1), d.repeat(3, 1), torch.zeros(3))
    assert big.keys.tolist() == [3.0, 2.0]


def tcr_out(scale=1.0):
    q = torch.tensor([[1.0, 0.0], [0.6, 0.8]]) * scale
    gallery = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    scores = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0]])  # nearest neighbours (0, 1)
    return ForwardOutput(scores, q.requires_grad_(True), gallery)


def test_tcr_loss_terms_by_hand():
    m = toy_method("tcr", temperature=1.0, select_ratio=0.5)  # n = int(0.5 * 2) = 1 pair per update
    # indicator: ||q0-g0|| = 0, ||q1-g1|| = sqrt(.4); ||q_i - (.8,.4)|| = sqrt(.2); ||g_i - (.5,.5)|| = sqrt(.5)
    i0 = 0 - math.sqrt(0.2) - math.sqrt(0.5)
    i1 = 2 * math.sqrt(0.4) - math.sqrt(0.2) - math.sqrt(0.5)
    torch.testing.assert_close(gap_indicator(tcr_out().query_feat.detach(), torch.eye(2)), torch.tensor([i0, i1]))
    loss = m.loss(tcr_out(), None, 0)
    # queue = the pair with the smaller indicator: (q0, g0), E = H(softmax(q0 . (g0, g1))) = H((1, 0))
    assert m.queue.keys.tolist() == pytest.approx([i0]) and m.queue.entropy.item() == pytest.approx(H([1, 0]))
    e_m = H([1, 0])
    # L_REM: E_0 = H((1, 0)) <= E_m, E_1 = H((.6, .8)) = 0.688 > E_m -> only row 0, weight 1 - E_0/(E_m + 1e-3)
    rem = (1 - e_m / (e_m + 1e-3)) * e_m
    uni = math.exp(-0.1 * math.sqrt(0.2))                     # both rows at sqrt(.2) from the centre
    emg = (math.sqrt(0.3 ** 2 + 0.1 ** 2) - 0.0) ** 2         # batch gap |(.8,.4)-(.5,.5)|, queue gap 0
    t = m.last_terms
    assert t["rem"].item() == pytest.approx(rem, abs=1e-6) and t["n_rem"].item() == 1
    assert t["uni"].item() == pytest.approx(uni, abs=1e-6) and t["emg"].item() == pytest.approx(emg, abs=1e-6)
    assert loss.item() == pytest.approx(rem + uni + emg, abs=1e-5)
    # steps 1-2 do not touch the queue
    m.loss(tcr_out(), None, 1)
    assert len(m.queue) == 1


def test_tcr_queue_updates_only_in_the_first_batches_at_step_0():
    m = toy_method("tcr", temperature=1.0, select_ratio=0.5, update_batches=2, queue_size=16)
    for b in range(4):
        for s in range(3):
            m.loss(tcr_out(), QueryBatch(b, torch.zeros(2)), s)
    assert len(m.queue) == 2 and m.batches_seen == 4


def test_tcr_faithful_uses_unnormalised_features_corrected_normalises():
    faithful = toy_method("tcr", temperature=1.0, select_ratio=0.5)
    corrected = toy_method("tcr", temperature=1.0, select_ratio=0.5, faithful=False)
    faithful.loss(tcr_out(3.0), None, 0)
    corrected.loss(tcr_out(3.0), None, 0)
    assert faithful.last_terms["uni"].item() == pytest.approx(math.exp(-0.1 * 3 * math.sqrt(0.2)), abs=1e-6)
    assert corrected.last_terms["uni"].item() == pytest.approx(math.exp(-0.1 * math.sqrt(0.2)), abs=1e-6)


def test_tcr_empty_selection_is_a_zero_term_not_nan():
    m = toy_method("tcr", temperature=1.0, select_ratio=0.5)
    m.queue.push(torch.tensor([0.0]), torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([0.0]))  # E_m = 0
    m.batches_seen = 99  # past the update window: the queue stays as set
    out = tcr_out()
    loss = m.loss(out, None, 0)
    assert m.last_terms["n_rem"].item() == 0 and m.last_terms["rem"].item() == 0.0
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(out.query_feat.grad).all()
    # and the helper itself
    e = torch.tensor([1.0, 2.0], requires_grad=True)
    val, n = noise_robust_entropy(e, torch.tensor(0.5))
    val.backward()
    assert val.item() == 0.0 and n.item() == 0 and e.grad.tolist() == [0.0, 0.0]


# ------------------------------------------------------------------------------------------------------------
# HAT-VTR losses
# ------------------------------------------------------------------------------------------------------------

FRAMES = torch.tensor([[[1.0, 0.0], [0.0, 1.0]],   # video 0: frames (1,0), (0,1) -> mean (.5,.5)
                       [[1.0, 0.0], [1.0, 0.0]]])  # video 1: frames (1,0), (1,0) -> mean (1, 0)
TEXTS = torch.tensor([[1.0, 0.0], [0.0, 1.0]])


def hat_expected():
    e_na = H([1, 0])                                     # video 1 (mean (1,0)) vs texts: logits (1, 0)
    na = (1 - e_na / (0.6 + 1e-3)) * e_na                # E_m = 0.6: video 0 (H = ln 2 = .693) is dropped
    inter = math.exp(-0.1 * math.sqrt(0.125))            # means (.5,.5), (1,0) both sqrt(.125) from (.75,.25)
    intra = (math.exp(-0.1 * math.sqrt(0.5)) + 1.0) / 2  # video 0 frames sqrt(.5) from their mean, video 1: 0
    # global: mean n(vbar) = ((.7071+1)/2, .7071/2), mean n(text) = (.5, .5); memory gap |(1,0)-(0,1)| = sqrt 2
    gb = math.hypot((math.sqrt(0.5) + 1) / 2 - 0.5, math.sqrt(0.5) / 2 - 0.5)
    glob = (gb - math.sqrt(2)) ** 2
    # frame: C_b = 1/4 [(1,0)(1,0)^T + (0,1)(1,0)^T + 2 (1,0)(0,1)^T] = [[.25, .5], [.25, 0]];
    #        C_m = (1,0)(0,1)^T = [[0, 1], [0, 0]];  MSE = (.0625 + .25 + .0625 + 0) / 4
    frame = (0.25 ** 2 + 0.5 ** 2 + 0.25 ** 2) / 4
    return dict(na=na, mguni_inter=inter, mguni_intra=intra, mgcm_global=glob, mgcm_frame=frame)


def test_hat_vtr_loss_terms_by_hand_v2t():
    m = toy_method("hat_vtr", temperature=1.0)
    m.reliable.push(torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.tensor([0.6]))
    terms = m.loss_terms(FRAMES, TEXTS)
    want = hat_expected()
    assert set(terms) == set(want)
    for k, v in want.items():
        assert terms[k].item() == pytest.approx(v, abs=1e-6), k
    frame = frame_cross_covariance_loss(FRAMES, TEXTS, torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))
    assert frame.item() == pytest.approx(want["mgcm_frame"], abs=1e-7)


def test_hat_vtr_loss_terms_by_hand_t2v_and_ablation_switches():
    m = toy_method("hat_vtr", direction="t2v", temperature=1.0, mgcm_frame=False, na=False)
    # t2v: queries are texts, the memory holds (text, video) and the video side is the NN gallery
    m.reliable.push(torch.tensor([1.0]), torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([0.6]))
    terms = m.loss_terms(TEXTS, FRAMES)
    want = hat_expected()
    assert set(terms) == {"mguni_inter", "mgcm_global"}  # no intra term for text queries; two switched off
    assert terms["mgcm_global"].item() == pytest.approx(want["mgcm_global"], abs=1e-6)
    assert terms["mguni_inter"].item() == pytest.approx(1.0 * math.exp(-0.1 * math.sqrt(0.5)), abs=1e-6)


def test_hat_vtr_reliable_memory_keeps_the_most_diverse():
    m = toy_method("hat_vtr", temperature=1.0, select_ratio=0.5, rm_size=2)
    q = torch.tensor([[0.0, 0.0], [4.0, 0.0], [1.0, 0.0], [3.0, 0.0]])  # mean (2,0): diversities 2, 2, 1, 1
    g = torch.eye(2).repeat(2, 1)
    m.refresh_reliable_memory(q, g)  # n = 2 largest: rows 0 and 1 (stable order on the tie)
    assert m.reliable.keys.tolist() == [2.0, 2.0] and m.reliable.query.tolist() == [[0.0, 0.0], [4.0, 0.0]]


def test_hat_vtr_empty_reliable_memory_and_empty_na_selection_give_zero_terms():
    m = toy_method("hat_vtr", temperature=1.0)
    terms = m.loss_terms(FRAMES.clone().requires_grad_(True), TEXTS)
    assert terms["na"].item() == 0 and terms["mgcm_global"].item() == 0 and terms["mgcm_frame"].item() == 0
    m.reliable.push(torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.tensor([0.0]))
    frames = FRAMES.clone().requires_grad_(True)
    total = sum(m.loss_terms(frames, TEXTS).values())
    total.backward()
    assert torch.isfinite(total) and torch.isfinite(frames.grad).all()


# ------------------------------------------------------------------------------------------------------------
# streams on the micro model
# ------------------------------------------------------------------------------------------------------------

# every registered method x backbone x direction (DomainBed's test_models.py idea): a new entry is tested by default
@pytest.mark.parametrize("backbone", BACKBONES.names())
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", ADAPTING)
def test_each_method_adapts_only_query_tower_layernorms(streams, name, backbone, direction):
    s = streams[(backbone, direction)]
    for faithful in (True, False):
        m, scores = s.run(name, faithful=faithful, **STREAM_OPTIONS.get(name, {}))
        assert scores.shape == (36, 36) and torch.isfinite(scores).all(), (name, faithful)
        changed = s.changed()
        assert changed <= s.query_ln_names(), (name, faithful, changed - s.query_ln_names())
        if faithful:  # every faithful method updates on every step
            assert changed == s.query_ln_names(), (name, changed ^ s.query_ln_names())


def test_faithful_mode_takes_the_authors_shipped_config_of_each_method_direction_and_backbone(streams):
    """Walks the table of the authors' 28 TTA configs: a faithful method built for that (direction, backbone) runs
    with the shipped settings; the corrected mode keeps the paper's (the method's own per-direction rate, RM 16)."""
    assert len(REFERENCE_CONFIGS) == 28
    assert {m for m, _, _ in REFERENCE_CONFIGS} == set(VTR_TTA_METHODS) <= set(METHODS.names())
    for name in set(METHODS.names()) - set(VTR_TTA_METHODS):   # no shipped setting: the method's own rate
        m = streams[("clip4clip", "v2t")].method(name)
        assert m.learning_rate == type(m).lr["v2t"], name
    for (name, direction, backbone), (config_file, settings) in REFERENCE_CONFIGS.items():
        s = streams[(backbone, direction)]
        assert config_file.endswith(".json") and f"/{direction}/{backbone}_" in config_file
        faithful, corrected = s.method(name), s.method(name, faithful=False)
        assert faithful.learning_rate == settings["lr"], (name, direction, backbone)
        assert corrected.learning_rate == type(corrected).lr[direction]
        for key, value in settings.items():
            if key != "lr":
                assert faithful.options[key] == value and corrected.options[key] != value, (name, key)
        assert faithful.temperature == 0.02 and faithful.steps == 3
        if faithful.optimizer is not None:
            assert faithful.optimizer.param_groups[0]["weight_decay"] == 1e-4
            assert faithful.optimizer.param_groups[0]["lr"] == settings["lr"]
    # the one per-backbone setting: HAT-VTR's Reliable Memory in t2v (100 for CLIP4Clip, 16 for X-Pool)
    assert streams[("clip4clip", "t2v")].method("hat_vtr").options["rm_size"] == 100
    assert streams[("xpool", "t2v")].method("hat_vtr").options["rm_size"] == 16
    # an explicit option wins over the shipped setting
    assert streams[("clip4clip", "t2v")].method("hat_vtr", rm_size=8, lr=1e-3).options["rm_size"] == 8


def test_optimizers(streams):
    s = streams[("xpool", "v2t")]
    sar = s.method("sar")
    assert isinstance(sar.optimizer, SAM) and isinstance(sar.optimizer.base_optimizer, torch.optim.AdamW)
    assert sar.optimizer.param_groups[0]["rho"] == 0.05
    assert isinstance(s.method("tcr").optimizer, torch.optim.AdamW)


def test_determinism_two_runs_identical(streams):
    s = streams[("xpool", "v2t")]
    for name in ADAPTING:
        torch.manual_seed(0)
        _, a = s.run(name, **STREAM_OPTIONS.get(name, {}))
        torch.manual_seed(0)
        _, b = s.run(name, **STREAM_OPTIONS.get(name, {}))
        assert torch.equal(a, b), name


def test_faithful_and_corrected_differ(streams):
    s = streams[("clip4clip", "v2t")]
    for name in WITH_CORRECTED_MODE:
        _, a = s.run(name, faithful=True)
        _, b = s.run(name, faithful=False)
        assert not torch.allclose(a, b, atol=1e-6), name


def test_hat_vtr_hsm_first_batch_and_memory_size_by_mode(streams):
    s = streams[("clip4clip", "t2v")]
    # faithful: batch 0 is never re-ranked, so switching re-ranking off changes only batches 1-2
    m, on = s.run("hat_vtr")
    _, off = s.run("hat_vtr", hsm_rerank=False)
    assert torch.equal(on[:16], off[:16]) and not torch.allclose(on[16:], off[16:])
    assert m.options["hsm_size"] == 3 and m.hsm.unit == "batches"  # max(1, int(0.1 * 36))
    assert m.hsm.batch_sizes == [16, 16, 4] and len(m.hsm) == 36
    # corrected: the first batch is re-ranked too; memory = the newest 100 query rows
    c, on = s.run("hat_vtr", faithful=False, hsm_size=20)
    _, off = s.run("hat_vtr", faithful=False, hsm_size=20, hsm_rerank=False)
    assert not torch.allclose(on[:16], off[:16])
    assert c.hsm.unit == "rows" and len(c.hsm) == 20
    assert s.method("hat_vtr", faithful=False).options["hsm_size"] == 100
    # HSM on the model's device
    assert c.hsm.rows.device == s.gallery.features.device


def test_hat_vtr_all_loss_terms_off_scores_without_updating(streams):
    s = streams[("clip4clip", "v2t")]
    off = {t: False for t in ("na", "mguni_inter", "mguni_intra", "mgcm_global", "mgcm_frame")}
    _, scores = s.run("hat_vtr", **off)
    assert s.changed() == set() and torch.isfinite(scores).all()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("backbone", BACKBONES.names())
def test_hat_vtr_forward_alone_ranks_as_source_on_a_backbone_with_its_own_score(backbone, direction):
    """HAT-VTR with no update and no HSM is its forward alone. A backbone with its own score ranks the features as
    encoded (TCD's co-attention reads their scale: per-frame-normalised frames cost it 54 R@1 points on the
    scene-text domain), so it equals Source there; CLIP4Clip and X-Pool keep the authors' normalised forward."""
    s = Stream(backbone, direction, n=20)
    if backbone == "tcd":   # a trained head: the zero-initialised value projections make a fresh one scale-blind
        torch.manual_seed(1)
        for co in (s.model.pooling.video_to_ocr, s.model.pooling.ocr_to_video):
            torch.nn.init.normal_(co.v.weight, std=0.2)
        s.initial = {k: v.clone() for k, v in s.model.state_dict().items()}
    source, hat_vtr = s.method("source"), s.method("hat_vtr")
    with torch.no_grad():   # one grad mode for both: HVP-Net's token clustering turns kernel rounding into ties
        pairs = [(source.forward_output(b).scores, hat_vtr.forward_output(b).scores) for b in s.batches()]
    same = all(torch.allclose(a, b, atol=1e-5) for a, b in pairs)
    if s.model.own_score:
        assert same
    elif backbone == "clip4clip":   # the mean of normalised frames, not of raw ones (X-Pool's LayerNorm is scale-blind)
        assert not same


def test_nan_guards_on_tiny_batches(streams):
    """A first batch of 2 queries (int(0.3*2) = 0: TCR's queue / HAT-VTR's memory stay empty, where the reference
    crashes) and a last batch of 2 (SAR's k = int(0.8) = 0) run without NaN."""
    for key in (("clip4clip", "v2t"), ("xpool", "t2v")):
        s = streams[key]
        batches = s.batches([2, 16, 16, 2])
        for name in ADAPTING:
            for faithful in (True, False):
                m, scores = s.run(name, batches=batches, faithful=faithful, **STREAM_OPTIONS.get(name, {}))
                assert scores.shape == (36, 36) and torch.isfinite(scores).all(), (key, name, faithful)
                assert all(torch.isfinite(p).all() for p in m.params)


def test_eata_corrected_skips_updates_when_nothing_is_reliable(streams):
    s = streams[("clip4clip", "v2t")]
    m, _ = s.run("eata", faithful=False, e_margin=1e-3)  # E0 = 0.0036 nats: nobody is that confident
    assert m.updates == 0 and s.changed() == set()
    m, _ = s.run("eata", e_margin=1e-3)                  # faithful: the 25% fallback always adapts
    assert m.updates == 9 and s.changed()


# ------------------------------------------------------------------------------------------------------------
# registry and options
# ------------------------------------------------------------------------------------------------------------

def test_registry_order():
    assert NAMES == ("source", "tent", "read", "sar", "eata", "deyo", "tcr", "tcr_untrained", "hat_vtr", "titan",
                     "dsl", "qb_norm", "hsm_qb_norm")


def test_options_are_checked(streams):
    s = streams[("clip4clip", "v2t")]
    with pytest.raises(ValueError, match=r"method 'eata': unknown option\(s\) 'margin'; allowed: d_margin, e_margin, "
                                         r"lr, temperature, weight_decay"):
        s.method("eata", margin=0.4)
    with pytest.raises(ValueError, match="allowed: alpha, beta, hsm_rerank, hsm_size, hsm_target, lr, m, "
                                         "mgcm_frame, mgcm_global, mguni_inter, mguni_intra, na, rm_size, "
                                         "select_ratio, t, temperature, weight_decay"):
        s.method("hat_vtr", hsm=True)
    with pytest.raises(ValueError, match="must be true/false"):
        s.method("hat_vtr", na=1)
    with pytest.raises(ValueError, match="must be an integer"):
        s.method("tcr", queue_size=2.5)
    with pytest.raises(ValueError, match=r"option 'gamma' must be a number > 0, got \[0.3\]"):
        s.method("read", gamma=[0.3])
    with pytest.raises(ValueError, match=r"'margin' is a fraction of the batch in faithful mode and must be in "
                                         r"\(0, 1\]"):
        s.method("sar", margin=1.5)
    assert s.method("sar", margin=1.5, faithful=False).options["margin"] == 1.5  # corrected: a factor of ln(G)
    with pytest.raises(ValueError, match=r"option 'select_ratio' must be a number > 0 and <= 1, got 0"):
        s.method("tcr", select_ratio=0)
    with pytest.raises(ValueError, match="unknown option"):
        s.method("read", faithfull=False)
    # JSON round-trips (ints for floats, integral floats for ints, null for the default) are accepted
    m = s.method("hat_vtr", **json.loads('{"alpha": 50, "rm_size": 8.0, "hsm_size": null, "na": false}'))
    assert m.options["alpha"] == 50.0 and m.options["rm_size"] == 8 and m.options["hsm_size"] == 3
    for name in METHODS.names():  # resolved options stay JSON-able scalars
        opts = s.method(name).options
        assert json.loads(json.dumps(opts)) == opts and all(not isinstance(v, (list, dict)) for v in opts.values())
