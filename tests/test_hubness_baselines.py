"""The hubness-suppression baselines (docs/faithfulness.md: Hubness-suppression baselines): DSL's dual softmax and
QB-Norm's dynamic inverted softmax by hand on small matrices, the querybank's statistics, and the three methods on a
micro-model stream (no update, the querybank from source pairs or off with its reason, HSM + QB-Norm as the
composition its docstring states). The registry-wide tests (every method x backbone x direction) include them."""
import math

import pytest
import torch
import torch.nn.functional as F

from test_methods import Stream, one_thread  # noqa: F401 (one_thread: an autouse fixture)
from workloads.methods import SourceFeatures, run_stream
from workloads.methods.dsl import dual_softmax
from workloads.methods.hat_vtr import HubnessSuppressionMemory
from workloads.methods.qb_norm import BANK_CHUNK, Querybank, bank_scores

BANK = torch.tensor([[0.9, 0.1, 0.0],     # both bank queries retrieve item 0 first: A = {0} at k = 1
                     [0.8, 0.2, 0.1]])    # top-2 of each: {0, 1}
TEST = torch.tensor([[0.7, 0.6, 0.1],     # top-1 item 0: in A
                     [0.2, 0.1, 0.5],     # top-1 item 2: never in A
                     [0.1, 0.5, 0.3]])    # top-1 item 1: in A only at k = 2


@pytest.fixture(scope="module")
def streams():
    return {(b, d): Stream(b, d) for b in ("clip4clip", "xpool") for d in ("v2t", "t2v")}


# -- DSL --------------------------------------------------------------------------------------------------------

def test_dual_softmax_by_hand_demotes_an_item_another_query_claims():
    s = torch.tensor([[0.5, 0.1],
                      [0.3, 0.2]])
    # prior over the batch's queries per column at temperature 0.1: softmax([5, 3]) and softmax([1, 2])
    p0, p1 = 1 / (1 + math.exp(-2)), 1 / (1 + math.exp(1))
    want = torch.tensor([[0.5 * p0 * 2, 0.1 * p1 * 2],
                         [0.3 * (1 - p0) * 2, 0.2 * (1 - p1) * 2]])
    got = dual_softmax(s, 0.1)
    assert torch.allclose(got, want, atol=1e-6)
    assert got[0].argmax() == 0 and got[1].argmax() == 1      # query 1 loses item 0 to query 0, which suits it better
    assert s[1].argmax() == 0                                 # (its raw top-1)


def test_dual_softmax_of_one_query_is_the_scores_and_the_prior_sums_to_one_per_column():
    s = torch.tensor([[0.4, -0.2, 0.9]])
    assert torch.equal(dual_softmax(s), s)
    s = torch.rand(5, 7)
    prior = dual_softmax(s, 0.05) / (s * s.shape[0])
    assert torch.allclose(prior.sum(0), torch.ones(7), atol=1e-6)


# -- QB-Norm ----------------------------------------------------------------------------------------------------

def test_querybank_activation_set_and_normaliser_by_hand():
    qb = Querybank(BANK, beta=1.0, k=1)
    assert qb.active.tolist() == [True, False, False] and qb.size == 2
    z = [math.exp(0.9) + math.exp(0.8), math.exp(0.1) + math.exp(0.2), math.exp(0.0) + math.exp(0.1)]
    assert qb.log_norm.tolist() == pytest.approx([math.log(v) for v in z], abs=1e-6)
    assert Querybank(BANK, beta=1.0, k=2).active.tolist() == [True, True, False]


def test_dynamic_inverted_softmax_changes_only_rows_whose_top1_is_in_the_activation_set():
    z = [math.exp(0.9) + math.exp(0.8), math.exp(0.1) + math.exp(0.2), math.exp(0.0) + math.exp(0.1)]
    out, rows = Querybank(BANK, beta=1.0, k=1).normalise(TEST)
    assert rows.tolist() == [True, False, False]
    assert out[0].tolist() == pytest.approx([math.exp(0.7) / z[0], math.exp(0.6) / z[1], math.exp(0.1) / z[2]],
                                            abs=1e-6)
    assert torch.equal(out[1:], TEST[1:])                      # the others keep their raw scores
    assert TEST[0].argmax() == 0 and out[0].argmax() == 1      # the bank's hub (item 0) is demoted
    out, rows = Querybank(BANK, beta=1.0, k=2).normalise(TEST)
    assert rows.tolist() == [True, False, True]                # item 1 joins the activation set at k = 2
    assert out[2].tolist() == pytest.approx([math.exp(0.1) / z[0], math.exp(0.5) / z[1], math.exp(0.3) / z[2]],
                                            abs=1e-6)
    assert torch.equal(out[1], TEST[1])


def test_querybank_in_chunks_equals_the_whole_bank_and_cannot_overflow():
    g = torch.Generator().manual_seed(0)
    bank = torch.rand(BANK_CHUNK + 300, 8, generator=g) * 2 - 1
    qb = Querybank(bank, beta=20.0, k=1)
    assert torch.allclose(qb.log_norm, torch.logsumexp(20.0 * bank, dim=0), atol=1e-4)
    assert qb.active.tolist() == torch.zeros(8, dtype=torch.bool).index_fill(0, bank.argmax(1), True).tolist()
    big = Querybank(bank * 10, beta=20.0)                      # exp(20 * 10) is beyond float32: the log form is not
    out, _ = big.normalise(torch.rand(4, 8, generator=g) * 10)
    assert torch.isfinite(out).all()


def test_bank_scores_are_cosines_of_global_embeddings():
    g = torch.Generator().manual_seed(1)
    text, video = torch.randn(5, 6, generator=g), torch.randn(5, 6, generator=g)
    source = SourceFeatures(F.normalize(text, dim=-1), F.normalize(video, dim=-1))
    frames = torch.randn(3, 4, 6, generator=g)                 # a t2v gallery: frames [G, T, D]
    want = F.normalize(text, dim=-1) @ F.normalize(frames.mean(1), dim=-1).t()
    assert torch.allclose(bank_scores(source, frames, "t2v"), want, atol=1e-6)
    texts = torch.randn(3, 6, generator=g) * 4                 # a v2t gallery: raw texts [G, D]
    want = F.normalize(video, dim=-1) @ F.normalize(texts, dim=-1).t()
    assert torch.allclose(bank_scores(source, texts, "v2t"), want, atol=1e-6)


# -- the methods on the loop ------------------------------------------------------------------------------------

def source_of(s, n=40, seed=0):
    """Encoded 'source pairs' for a micro stream: random unit vectors of the embedding's size."""
    g = torch.Generator().manual_seed(seed)
    d = s.gallery.features.shape[-1]
    return SourceFeatures(F.normalize(torch.randn(n, d, generator=g), dim=-1),
                          F.normalize(torch.randn(n, d, generator=g), dim=-1))


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_dsl_rescores_each_batch_of_the_sources_scores_without_updating(streams, direction):
    s = streams[("clip4clip", direction)]
    _, raw = s.run("source")
    m, got = s.run("dsl", prior_temperature=0.05)
    assert not m.params and not s.changed()
    sizes = [len(b) for b in s.batches()]
    want = torch.cat([dual_softmax(chunk, 0.05) for chunk in raw.split(sizes)])
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(got, raw)


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_qb_norm_without_a_querybank_scores_as_source_and_says_why(streams, direction):
    s = streams[("clip4clip", direction)]
    _, raw = s.run("source")
    m, got = s.run("qb_norm")
    assert torch.equal(got, raw)
    assert m.fallbacks == ["qb_norm: querybank off (no source pairs given); the scores are not normalised"]
    m = s.method("qb_norm")
    m.attach_source(None, "a zero-shot checkpoint has no source train split")
    assert torch.equal(run_stream(m, s.batches()), raw)
    assert m.fallbacks == ["qb_norm: querybank off (a zero-shot checkpoint has no source train split); the scores "
                           "are not normalised"]
    assert m.stream_stats(None) == {"qb_norm_bank_size": 0.0, "qb_norm_normalised_share": 0.0}


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_qb_norm_normalises_against_the_source_querybank(streams, direction):
    s = streams[("clip4clip", direction)]
    _, raw = s.run("source")
    m = s.method("qb_norm", bank_size=8, beta=10.0)
    assert m.source_pairs() == 8 and s.method("qb_norm").source_pairs() >= 10 ** 9   # 0: the whole split
    source = source_of(s, n=8)
    m.attach_source(source)
    assert m.fallbacks == []                                   # CLIP4Clip: the bank's cosine is its own score
    got = run_stream(m, s.batches())
    qb = Querybank(bank_scores(source, s.gallery.features, direction), 10.0, 1)
    want, rows = qb.normalise(raw)
    assert 0 < int(rows.sum()) < len(rows)                     # some rows normalised, some kept
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert m.stream_stats(None) == {"qb_norm_bank_size": 8.0,
                                    "qb_norm_normalised_share": pytest.approx(float(rows.float().mean()))}


def test_qb_norm_flags_its_bank_scores_as_a_stand_in_on_xpool(streams):
    s = streams[("xpool", "t2v")]
    m = s.method("qb_norm")
    m.attach_source(source_of(s))
    assert m.fallbacks == ["qb_norm: querybank scored by the cosine of global embeddings (a stand-in for this "
                           "backbone's own score)"]


@pytest.mark.parametrize("faithful", [True, False])
def test_hsm_qb_norm_is_the_hsm_rerank_then_the_dynamic_inverted_softmax(streams, faithful):
    s = streams[("clip4clip", "t2v")]
    _, raw = s.run("source")
    source = source_of(s)
    m = s.method("hsm_qb_norm", faithful=faithful)
    m.attach_source(source)
    got = run_stream(m, s.batches())
    assert not s.changed() and m.paper_derived
    hsm = HubnessSuppressionMemory("batches" if faithful else "rows", int(0.1 * len(s.gallery)) if faithful else 100)
    qb = Querybank(bank_scores(source, s.gallery.features, "t2v"), 20.0, 1)
    want = []
    for chunk in raw.split([len(b) for b in s.batches()]):
        refined = hsm.refine(chunk)
        hsm.push(chunk)
        want.append(qb.normalise(refined)[0])
    assert torch.allclose(got, torch.cat(want), rtol=1e-5, atol=1e-6)
    # faithful: the first batch is not re-ranked (HAT-VTR's empty memory), corrected: it is
    first = len(s.batches()[0])
    qb_raw_first = qb.normalise(raw[:first])[0]
    assert torch.allclose(got[:first], qb_raw_first, rtol=1e-5, atol=1e-6) == faithful
    # without a querybank: the HSM alone
    alone = s.method("hsm_qb_norm", faithful=faithful)
    hsm.clear()
    want = []
    for chunk in raw.split([len(b) for b in s.batches()]):
        want.append(hsm.refine(chunk))
        hsm.push(chunk)
    assert torch.allclose(run_stream(alone, s.batches()), torch.cat(want), atol=1e-6)
    assert alone.fallbacks == ["hsm_qb_norm: querybank off (no source pairs given); the scores are not normalised"]


def test_hubness_baselines_record_faithful_as_declared():
    from workloads.methods import METHODS

    assert not METHODS.lookup("dsl").paper_derived and not METHODS.lookup("qb_norm").paper_derived
    assert METHODS.lookup("hsm_qb_norm").paper_derived          # the combination is ours: method_faithful false
    assert not any(METHODS.lookup(n).adapts for n in ("dsl", "qb_norm", "hsm_qb_norm"))
    assert METHODS.static_info("qb_norm") == METHODS.static_info("hsm_qb_norm") == {"source_stage": "querybank"}


def test_querybank_off_is_one_plan_line_per_method_and_dataset(tmp_path):
    """A zero-shot checkpoint has no source train split: the plan says so once per method row and dataset
    (orchestrator/planning/plan.py `source_stage_notes`, from the registration's `source_stage`)."""
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    grid = parse_grid({"name": "t", "datasets": {"synthetic": {}}, "backbones": ["clip4clip"],
                       "methods": ["source", "dsl", "qb_norm", "hsm_qb_norm"],
                       "models": {"zero_shot_pretrain": {"dataset": "synthetic_c"}},
                       "query_shift": {"datasets": ["synthetic"]},
                       "query_gallery_shift": {"zero_shot": {"datasets": ["synthetic"]}}}, "t.yaml")
    notes = build_plan(grid, Paths.make(tmp_path)).notes
    assert notes == [f"{m} on synthetic: its querybank is off (a zero-shot checkpoint has no source train split); "
                     "the rest of the method runs" for m in ("qb_norm", "hsm_qb_norm")]


@pytest.mark.slow
def test_the_three_run_as_trials_with_the_querybank_from_the_source_train_split(tmp_path, shared_cache):
    """Through `submit` on the micro grid: the querybank comes from the synthetic train split by the trial's source
    path (workloads/trial.py `encode_source`), on CLIP4Clip with no stand-in; HSM + QB-Norm records
    method_faithful: false, DSL and QB-Norm the grid's flag."""
    import pyarrow.parquet as pq

    from conftest import write_micro_grid
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import submit

    grid_file = write_micro_grid(tmp_path / "hub.yaml", name="hub", backbones="[clip4clip]",
                                 methods="[source, dsl, qb_norm, hsm_qb_norm]", directions="[v2t, t2v]",
                                 perturbations="[gaussian_noise]", severities="[5]")
    report = submit(str(grid_file), SubmitOptions(results_dir=str(tmp_path / "results"), cache_dir=str(shared_cache),
                                                  num_cpus=2, dashboard=False))
    assert report.failed == 0 and report.ok == 4 * 3          # v2t clean + gaussian, t2v clean
    t = pq.read_table(tmp_path / "results" / "hub" / "trials.parquet").to_pandas()
    for method in ("qb_norm", "hsm_qb_norm"):
        rows = t[t.method == method]
        assert (rows[f"{method}_bank_size"] > 0).all() and (rows["fallbacks"] == "").all()
        assert ((rows[f"{method}_normalised_share"] >= 0) & (rows[f"{method}_normalised_share"] <= 1)).all()
    assert not t[t.method == "hsm_qb_norm"]["method_faithful"].any()
    assert t[t.method.isin(["source", "dsl", "qb_norm"])]["method_faithful"].all()
    source = t[t.method == "source"].set_index(["direction", "perturbation"])
    for method in ("dsl", "qb_norm"):    # a re-scoring moves the ranking somewhere
        other = t[t.method == method].set_index(["direction", "perturbation"])
        assert (other["hub_skewness"] != source["hub_skewness"]).any(), method
