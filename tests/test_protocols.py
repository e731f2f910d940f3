"""Stream protocols (workloads/protocols, docs/protocols.md): their plans, the online loop running them
(workloads/methods/base.py run_stream) on the micro model, and whole trials (workloads/trial.py) under them."""
import copy
import math

import numpy as np
import pytest
import torch
from scipy import stats

from workloads.backbones import create_backbone
from workloads.methods import METHODS, Gallery, QueryBatch, create_method, iter_batches, run_stream
from workloads.options import OptionError
from workloads.protocols import PROTOCOLS, StreamSetup, check_batch_size, create_protocol, method_cost
from workloads.protocols.base import clusters_runs
from workloads.protocols.correlated import dirichlet_order, kmeans, query_clusters
from workloads.protocols.gradual import ramp


# -- plans ----------------------------------------------------------------------------------------------------------
def test_registry_lists_every_protocol_default_first():
    assert PROTOCOLS.names() == ("reset_each_shift", "continual", "gradual", "mixed_domains", "correlated",
                                 "episodic", "offline", "budgeted")
    assert create_protocol("").name == "reset_each_shift"
    with pytest.raises(OptionError, match="protocol 'offline': option 'epochs'"):
        create_protocol("offline", epochs=0)


def test_reset_each_shift_plan_is_todays_batching():
    plan = create_protocol("reset_each_shift").plan(StreamSetup(n=40, batch_size=16))
    assert [b.items for b in plan] == [tuple(range(0, 16)), tuple(range(16, 32)), tuple(range(32, 40))]
    assert [(b.adapt, b.score, b.reset) for b in plan] == [(True, True, True)] + [(True, True, False)] * 2


def test_gradual_order_is_one_to_five_to_one_per_perturbation():
    assert ramp(5) == [1, 2, 3, 4, 5, 4, 3, 2, 1]
    segments = PROTOCOLS["gradual"].default_segments(["gaussian_noise", "shot_noise"], [1, 3, 5])
    assert segments == [("gaussian_noise", s) for s in ramp(5)] + [("shot_noise", s) for s in ramp(5)]
    # the stream visits the segments in that order, never resetting after the first batch
    plan = create_protocol("gradual").plan(StreamSetup(n=20, segments=len(segments), batch_size=16))
    seen = [b.items[0] // 20 for b in plan]
    assert seen == sorted(seen) and sorted(set(seen)) == list(range(len(segments)))
    assert [b.reset for b in plan] == [True] + [False] * (len(plan) - 1)


def test_continual_default_sequence_is_registry_order_at_the_top_severity():
    assert PROTOCOLS["continual"].default_segments(["a", "b", "c"], [1, 5]) == [("a", 5), ("b", 5), ("c", 5)]


def test_mixed_domains_shuffles_every_segment_into_one_stream_by_the_seed():
    setup = StreamSetup(n=30, segments=3, batch_size=16, seed=1)
    plan = create_protocol("mixed_domains").plan(setup)
    items = [i for b in plan for i in b.items]
    assert sorted(items) == list(range(90)) and items != sorted(items)
    assert len({i // 30 for i in plan[0].items}) > 1          # batches mix segments
    again = create_protocol("mixed_domains").plan(setup)
    other = create_protocol("mixed_domains").plan(StreamSetup(n=30, segments=3, batch_size=16, seed=2))
    assert [b.items for b in again] == [b.items for b in plan] != [b.items for b in other]


def test_episodic_resets_before_every_batch_and_offline_adapts_then_scores():
    setup = StreamSetup(n=40, batch_size=16)
    assert all(b.reset for b in create_protocol("episodic").plan(setup))
    plan = create_protocol("offline", epochs=2).plan(setup)
    assert [(b.adapt, b.score) for b in plan] == [(True, False)] * 6 + [(False, True)] * 3
    assert [b.reset for b in plan] == [True] + [False] * 8


@pytest.mark.parametrize("n_batches", [1, 6, 7, 8])
def test_budgeted_with_k3_adapts_on_exactly_ceil_n_over_3_batches(n_batches):
    plan = create_protocol("budgeted").plan(StreamSetup(n=16 * n_batches - 3, batch_size=16, cost=3))
    assert len(plan) == n_batches
    assert [i for i, b in enumerate(plan) if b.adapt] == list(range(0, n_batches, 3))
    assert sum(b.adapt for b in plan) == math.ceil(n_batches / 3) and all(b.score for b in plan)


def test_method_cost_counts_declared_passes():
    cost = {name: method_cost(METHODS[name], steps=3) for name in METHODS.names()}
    # Source one forward; Tent 3 x (1 + 2); SAR two forward/backward passes per step; DeYO an extra forward
    assert cost["source"] == cost["tcr_untrained"] == 1
    assert cost["tent"] == cost["tcr"] == cost["hat_vtr"] == 9
    assert cost["sar"] == 18 and cost["deyo"] == 12
    assert method_cost(METHODS["tent"], steps=1, backward_cost=1.0) == 2


def test_methods_needing_a_batch_statistic_refuse_small_batches_in_one_line():
    check_batch_size(METHODS["tent"], 1)
    check_batch_size(METHODS["tcr"], 4)
    for name in ("tcr", "hat_vtr", "tcr_untrained"):
        with pytest.raises(OptionError, match=f"method '{name}' needs batches of at least 4 queries") as err:
            check_batch_size(METHODS[name], 1)
        assert "\n" not in str(err.value)


# -- correlated order -----------------------------------------------------------------------------------------------
def _labels(k=5, size=40, seed=0):
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(k), size))


def test_correlated_order_with_tiny_alpha_gives_long_single_cluster_runs():
    labels = _labels()
    order = dirichlet_order(labels, alpha=1e-3, slot=40, seed=0)
    assert sorted(order) == list(range(len(labels)))
    runs = clusters_runs(labels[order])
    # 5 clusters of 40: almost every cluster arrives in one piece
    assert len(runs) <= 10 and max(runs) >= 35, runs
    assert len(clusters_runs(labels)) > 100   # the input order was i.i.d.


def _transition_chi2(seq, k):
    t = np.zeros((k, k))
    for a, b in zip(seq[:-1], seq[1:]):
        t[a, b] += 1
    expected = t.sum(1, keepdims=True) * t.sum(0, keepdims=True) / t.sum()
    chi2 = float(((t - expected) ** 2 / expected).sum())
    return chi2, stats.chi2.sf(chi2, (k - 1) ** 2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlated_order_with_huge_alpha_passes_a_test_of_independence(seed):
    labels = _labels(seed=seed)
    _, p_iid = _transition_chi2(labels[dirichlet_order(labels, alpha=1e6, slot=40, seed=seed)], 5)
    assert p_iid > 0.001
    # the same test rejects the cluster-correlated order and a cluster-sorted one
    _, p_small = _transition_chi2(labels[dirichlet_order(labels, alpha=0.01, slot=40, seed=seed)], 5)
    _, p_sorted = _transition_chi2(np.sort(labels), 5)
    assert p_small < 1e-6 and p_sorted < 1e-6


def test_clusters_come_from_kmeans_over_the_ground_truth_items():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 8)) * 10
    gallery = np.repeat(centres, 10, axis=0) + rng.normal(size=(40, 8))
    labels = kmeans(gallery, 4, seed=0)
    # the four well-separated groups are found (up to naming), and a seed gives the same labels
    assert len({tuple(np.flatnonzero(labels == c)) for c in range(4)}) == 4
    assert all(len(set(labels[10 * g:10 * g + 10])) == 1 for g in range(4))
    assert np.array_equal(labels, kmeans(gallery, 4, seed=0))
    gt = [39, 0, 15]
    assert query_clusters(gallery, gt, 4, seed=0).tolist() == labels[gt].tolist()
    plan = create_protocol("correlated", alpha=1e-3, k=4).plan(StreamSetup(n=40, clusters=labels.tolist()))
    assert len(clusters_runs(labels[[i for b in plan for i in b.items]])) <= 8


# -- the loop under a protocol (micro model) --------------------------------------------------------------------
@pytest.fixture(scope="module")
def micro():
    """A micro CLIP4Clip, a v2t gallery of 40 captions, and two query segments of the same 40 clips: as they are
    (A) and with strong noise (B)."""
    torch.manual_seed(0)
    model = create_backbone("clip4clip", "mlvp-micro")
    g = torch.Generator().manual_seed(0)
    clips = torch.randint(0, 256, (40, 12, 32, 32, 3), dtype=torch.uint8, generator=g)
    noisy = (clips.float() + 80 * torch.randn(clips.shape, generator=g)).clamp(0, 255).to(torch.uint8)
    captions = [f"a {c} shape number {i}" for i, c in zip(range(40), ["red", "blue", "green", "pink"] * 10)]
    with torch.no_grad():
        gallery = Gallery("v2t", model.encode_text(model.tokenize(captions)))
        segments = [model.preprocess_frames(clips), model.preprocess_frames(noisy)]
    return model, gallery, segments


def batches_of(plan, segments, n=40):
    return [QueryBatch(i, torch.stack([segments[item // n][item % n] for item in b.items]))
            for i, b in enumerate(plan)]


def fresh(micro, name="tent", **options):
    model, gallery, _ = micro
    return create_method(name, copy.deepcopy(model), "v2t", gallery, lr=1e-3, **options)


def test_continual_equals_running_a_then_b_on_the_same_method_without_reset(micro):
    _, _, segments = micro
    setup = StreamSetup(n=40, segments=2, batch_size=16)
    plan = create_protocol("continual").plan(setup)
    got = run_stream(fresh(micro), batches_of(plan, segments), plan=plan)
    m = fresh(micro)
    m.reset()
    want = torch.cat([m.adapt_and_score(b).float() for seg in segments for b in iter_batches(seg, 16)])
    assert torch.equal(got, want)
    # and it is not reset_each_shift: segment B starts from A's adapted weights
    plan_r = create_protocol("reset_each_shift").plan(setup)
    reset = run_stream(fresh(micro), batches_of(plan_r, segments), plan=plan_r)
    assert torch.equal(reset[:40], got[:40]) and not torch.allclose(reset[40:], got[40:])


def test_reset_each_shift_plan_equals_the_plain_stream_bit_for_bit(micro):
    _, _, segments = micro
    plan = create_protocol("reset_each_shift").plan(StreamSetup(n=40, batch_size=16))
    for name in ("tent", "sar", "hat_vtr"):
        with_plan = run_stream(fresh(micro, name), batches_of(plan, segments), plan=plan)
        plain = run_stream(fresh(micro, name), iter_batches(segments[0], 16))
        assert torch.equal(with_plan, plain), name


def test_episodic_equals_a_fresh_method_per_batch(micro):
    _, _, segments = micro
    plan = create_protocol("episodic").plan(StreamSetup(n=40, batch_size=16))
    m = fresh(micro, "hat_vtr")
    got = run_stream(m, batches_of(plan, segments), plan=plan)
    want = torch.cat([fresh(micro, "hat_vtr").adapt_and_score(b).float() for b in iter_batches(segments[0], 16)])
    assert torch.equal(got, want)
    assert len(torch.cat(m.query_embeddings)) == 40            # a reset keeps the embeddings of earlier batches
    online = run_stream(fresh(micro, "hat_vtr"), iter_batches(segments[0], 16))
    assert not torch.allclose(online[16:], got[16:])


def test_budgeted_adapts_on_every_kth_batch_and_scores_the_others_with_current_weights(micro):
    _, _, segments = micro
    plan = create_protocol("budgeted").plan(StreamSetup(n=40, batch_size=4, cost=3))   # 10 batches
    m = fresh(micro)
    adapted, states = [], []
    original = m.adapt_and_score

    def counting(batch):
        adapted.append(batch.index)
        return original(batch)

    m.adapt_and_score = counting
    run_stream(m, batches_of(plan, segments), plan=plan,
               progress=lambda i, n: states.append([p.detach().clone() for p in m.params]))
    assert adapted == [0, 3, 6, 9] and len(adapted) == math.ceil(10 / 3)
    # weights change only on adapting batches
    for i in range(1, 10):
        same = all(torch.equal(a, b) for a, b in zip(states[i - 1], states[i]))
        assert same == (i not in adapted), i


def test_offline_scores_every_query_with_the_final_weights(micro):
    _, _, segments = micro
    plan = create_protocol("offline").plan(StreamSetup(n=40, batch_size=16))
    m = fresh(micro)
    got = run_stream(m, batches_of(plan, segments), plan=plan)
    assert got.shape == (40, 40) and len(torch.cat(m.query_embeddings)) == 40
    with torch.no_grad():
        final = torch.cat([m.forward_output(b).scores for b in iter_batches(segments[0], 16)])
    assert torch.equal(got, final)
    online = run_stream(fresh(micro), iter_batches(segments[0], 16))
    assert not torch.allclose(online, got)


@pytest.mark.parametrize("name,options", [("source", {}), ("tent", {}), ("eata", {}), ("read", {}), ("sar", {}),
                                          ("tcr", {}), ("hat_vtr", {}),
                                          ("deyo", {"deyo_margin": 100.0, "filter_plpd": False})])
def test_declared_passes_equal_the_counted_forwards_and_backwards(micro, name, options):
    _, _, segments = micro
    m = fresh(micro, name, **options)
    counts = {"forward": 0, "backward": 0}
    encode = m.encode_queries

    def counting(batch):
        counts["forward"] += 1
        return encode(batch)

    m.encode_queries = counting
    if m.params:
        m.params[0].register_hook(lambda g: counts.__setitem__("backward", counts["backward"] + 1))
    run_stream(m, iter_batches(segments[1], 16))
    forwards, backwards = type(m).passes
    per_batch = 1 if not m.adapts else m.steps
    assert counts == {"forward": 3 * per_batch * forwards, "backward": 3 * per_batch * backwards}


# -- whole trials (workloads/trial.py) on the micro synthetic dataset ------------------------------------------------
TRIAL_GRID = {
    "name": "protocols",
    "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip"],
    "methods": ["source", "tent"],
    "query_shift": {"datasets": ["synthetic"], "directions": ["v2t", "t2v"], "perturbations": ["gaussian_noise"],
                    "severities": [5]},
}


@pytest.fixture(scope="module")
def trials(tmp_path_factory, shared_cache):
    """The grid's plan, rendered, and a context to run its trials (and protocol variants of them) in."""
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.planning.render_sets import render_keys
    from workloads.render_cache import RenderCache, render_video
    from workloads.trial import TrialContext

    tmp = tmp_path_factory.mktemp("protocols")
    plan = build_plan(parse_grid(TRIAL_GRID, "protocols.yaml"), Paths.make(tmp / "results", shared_cache))
    cache = RenderCache(tmp / "render")
    ds = plan.datasets["synthetic"]
    for pair in ds.test.pairs:
        assert all(s["status"] == "ok" for s in render_video(pair.video_path, render_keys(plan, "synthetic",
                                                                                          pair.video_id), cache))
    ctx = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root, dataset_options=ds.options,
                       gallery_cache=str(tmp / "gallery"), scores_dir=str(tmp / "scores"))
    return {(t.direction, t.method, t.cell): t for t in plan.trials}, ctx


def _ok(result):
    assert result.status == "ok", result.traceback
    return result


@pytest.mark.parametrize("method", ["source", "tent"])
def test_reset_each_shift_trial_equals_the_unchanged_stream_bit_for_bit(trials, method):
    """The default trial against the stream rebuilt from the unchanged primitives (the plain batches, run_stream
    without a plan, the trial's metrics); naming the default protocol changes neither the key nor the result."""
    from workloads.datasets import create_dataset
    from workloads.metrics import recall_hits, summarise, tie_rule
    from workloads.render_cache import RenderCache
    from workloads.spec import TrialSpec
    from workloads.trial import _clip_batches, encode_gallery, load_model, query_cells, run, video_groups

    specs, ctx = trials
    spec = specs[("v2t", method, "gaussian_noise-5")]
    got = _ok(run(spec, ctx))
    named = TrialSpec.from_dict({**spec.to_dict(), "protocol": "reset_each_shift"})
    assert named.key == spec.key and named.protocol == ""

    torch.manual_seed(spec.seed)
    test = create_dataset(spec.dataset, root=ctx.dataset_root, **ctx.dataset_options).test_split()
    cache = RenderCache(ctx.render_cache)
    model = load_model(spec, ctx)
    rows, _ = video_groups(test)
    cells = query_cells(spec, len(test))
    gallery = encode_gallery(spec, model, cache, test, list(range(len(test))), ctx)
    m = create_method(spec.method, model, "v2t", gallery, steps=spec.steps, faithful=spec.faithful)
    scores = run_stream(m, _clip_batches(spec, model, cache, test, rows, cells))
    gt = np.arange(len(rows))
    want = summarise(scores, gt, k=spec.hub_k, ties=tie_rule(spec.faithful))
    assert {k: got.metrics[k] for k in want} == want
    hits = recall_hits(scores, gt, 1, ties=tie_rule(spec.faithful))
    assert got.query_R1 == [round(float(h), 4) for h in hits]
    assert got.batch_R1 == [round(100.0 * float(hits[s:s + 16].mean()), 4) for s in range(0, 40, 16)]
    assert np.array_equal(np.load(got.scores_path), scores.numpy().astype(np.float16))
    assert got.protocol == {"name": "reset_each_shift", "options": {}, "batches": 3, "adapted": 3, "scored": 3}
    assert got.running_R1[-1] == [40.0, round(got.metrics["R1"], 4)] and got.segments == []


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_a_continual_trial_scores_each_segment_as_it_passes(trials, direction):
    """Segments clean then gaussian_noise-5 (t2v: clean twice, its only rendered cell) in one stream: the first
    segment is the reset-each-shift trial of that cell bit for bit (same start, same queries); the second starts
    from the first's adapted weights, so it differs from its own reset-each-shift trial."""
    import dataclasses

    from workloads.trial import run

    specs, ctx = trials
    second = "gaussian_noise-5" if direction == "v2t" else "clean"
    # a high learning rate, so that the weights the first segment leaves move the second's scores visibly
    a, b = (dataclasses.replace(specs[(direction, "tent", cell)], options='{"lr": 0.01}') for cell in ("clean", second))
    cont = dataclasses.replace(a, perturbation="continual", severity=0, protocol="continual",
                               segments=f'[["clean", 0], ["{b.perturbation}", {b.severity}]]',
                               render_assets="")
    assert cont.key != a.key and cont.cell == "continual" and "continual" in cont.label
    got, ra, rb = _ok(run(cont, ctx)), _ok(run(a, ctx)), _ok(run(b, ctx))
    assert got.n_queries == 80 and [s["cell"] for s in got.segments] == ["clean", second]
    first, after = got.segments
    assert {k: first[k] for k in ra.metrics if k in first} == {k: ra.metrics[k] for k in ra.metrics if k in first}
    assert got.query_R1[:40] == ra.query_R1
    scores, scores_a, scores_b = (np.load(r.scores_path) for r in (got, ra, rb))
    assert np.array_equal(scores[:40], scores_a) and not np.allclose(scores[40:], scores_b, atol=1e-2)
    assert after["R1"] == pytest.approx(100 * np.mean(got.query_R1[40:]))
    assert got.metrics["R1"] == pytest.approx((first["R1"] + after["R1"]) / 2)
    assert got.protocol["adapted"] == got.protocol["batches"] == 6 and got.running_R1[-1][0] == 80.0


def test_budgeted_correlated_and_episodic_trials_record_what_they_ran(trials):
    import dataclasses

    from workloads.trial import run

    specs, ctx = trials
    spec = specs[("v2t", "tent", "gaussian_noise-5")]
    budget = _ok(run(dataclasses.replace(spec, protocol="budgeted"), ctx))
    # Tent at 3 steps costs 9 forwards a batch: of 3 batches it adapts on the first only
    assert budget.protocol["k"] == 9 and budget.protocol["adapted"] == 1 and budget.protocol["scored"] == 3
    assert budget.key != spec.key
    # Source does not adapt: under the correlated order its scores are the plain stream's, permuted; each query's
    # R@1 comes back in test-split order, while the batches hold other queries
    source = specs[("v2t", "source", "gaussian_noise-5")]
    plain = _ok(run(source, ctx))
    small = _ok(run(dataclasses.replace(source, protocol="correlated", protocol_options='{"alpha": 0.001, "k": 4}'),
                    ctx))
    assert small.protocol["options"]["alpha"] == 0.001 and small.n_queries == 40
    every = _ok(run(dataclasses.replace(source, protocol="episodic", protocol_options='{"every": 10}'), ctx))
    assert [q for q, _ in every.running_R1] == [10.0, 20.0, 30.0, 40.0]
    assert small.query_R1 == plain.query_R1 and small.metrics["R1"] == plain.metrics["R1"]
    # the scores in test-split order: equal to float16 rounding, not to the bit: a query's features are computed in a
    # batch of other queries here, and a batched matmul's last bits can follow the batch's shape and the process's
    # thread count (the full suite, with earlier tests in the same worker, showed a difference a clean run does not)
    assert np.allclose(np.load(small.scores_path), np.load(plain.scores_path), rtol=2 ** -10, atol=2 ** -10)
    assert small.batch_R1 != plain.batch_R1
    refused = run(dataclasses.replace(spec, method="tcr", protocol="episodic", batch_size=2), ctx)
    assert refused.status == "failed" and "needs batches of at least 4 queries" in refused.error


# -- the grid axis (orchestrator/config, orchestrator/planning) ------------------------------------------------------
def _plan(tmp_path, shared_cache, protocols=None, methods=("source", "tent"), severities=(1, 5)):
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    grid = {**TRIAL_GRID, "methods": list(methods),
            "query_shift": {**TRIAL_GRID["query_shift"], "directions": ["v2t"],
                            "perturbations": ["impulse_noise", "gaussian_noise"], "severities": list(severities),
                            **({"protocols": protocols} if protocols is not None else {})}}
    return build_plan(parse_grid(grid, "protocols.yaml"), Paths.make(tmp_path / "results", shared_cache))


def test_protocols_multiply_the_trials_and_leave_the_defaults_keys_alone(tmp_path, shared_cache):
    from orchestrator.planning.needs import trial_needs
    from orchestrator.report.rows import planned_rows

    plain = _plan(tmp_path, shared_cache)
    assert {t.protocol for t in plain.trials} == {""}
    plan = _plan(tmp_path, shared_cache, ["reset_each_shift", {"name": "episodic", "batch_size": 4},
                                          {"name": "correlated", "options": {"alpha": 0.01}}, "continual", "gradual"])
    by = {}
    for t in plan.trials:
        by.setdefault(t.protocol, []).append(t)
    # the default's trials are today's, key for key; each single-cell protocol once per cell
    assert {t.key for t in by[""]} == {t.key for t in plain.trials}
    assert len(by["episodic"]) == len(by["correlated"]) == len(plain.trials) == 2 * 5
    assert {t.batch_size for t in by["episodic"]} == {4} and by["correlated"][0].protocol_kwargs == {"alpha": 0.01}
    # one stream per backbone and method: continual over the types in registry order at the top severity, gradual
    # 1..5..1 per type (here the grid's top severity is 5)
    (cont, _), (grad, _) = by["continual"], by["gradual"]
    assert cont.cell == "continual" and cont.segment_cells == [("gaussian_noise", 5), ("impulse_noise", 5)]
    assert [s for _, s in grad.segment_cells] == ramp(5) * 2
    assert set(grad.segment_cells) <= set(plan.renders["synthetic"])      # every segment is rendered
    assert {n for n in trial_needs(plan, grad) if n.startswith("render:")} == {
        f"render:synthetic/{p}/{s}" for p, s in set(grad.segment_cells)}
    rows = planned_rows(plan.trials, [])
    assert set(rows["protocol_label"]) == {"reset_each_shift", "episodic", "correlated", "continual", "gradual"}


@pytest.mark.parametrize("protocols,message", [
    (["episodc"], "query_shift.protocols[0].name: unknown protocol 'episodc' (did you mean 'episodic'?)"),
    ([{"name": "offline", "options": {"epochs": 0}}], "query_shift.protocols[0].options: protocol 'offline': option "
                                                      "'epochs' must be an integer >= 1 and <= 100, got 0"),
    ([{"name": "episodic", "batch_size": 8}], "query_shift.protocols[0].batch_size"),
    ([{"name": "episodic", "segments": [["gaussian_noise", 5]]}], "runs one cell per trial"),
    ([{"name": "continual", "segments": [["gaussian_nose", 5]]}], "unknown video perturbation 'gaussian_nose'"),
    ([{"name": "episodic", "batch_size": 1}], "query_shift.protocols[0].batch_size: method 'tcr' needs batches of "
                                              "at least 4 queries"),
])
def test_a_bad_protocol_entry_is_refused_in_one_line(tmp_path, shared_cache, protocols, message):
    from orchestrator.config.errors import GridError

    with pytest.raises(GridError) as err:
        _plan(tmp_path, shared_cache, protocols, methods=("source", "tcr"))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_planned_continual_trial_runs_over_its_rendered_segments(tmp_path, shared_cache):
    from orchestrator.planning.render_sets import render_keys
    from workloads.render_cache import RenderCache, render_video
    from workloads.trial import TrialContext, run

    plan = _plan(tmp_path, shared_cache, ["continual"], severities=(5,))
    cont = next(t for t in plan.trials if t.method == "tent" and t.protocol == "continual")
    cache = RenderCache(tmp_path / "render")
    ds = plan.datasets["synthetic"]
    for pair in ds.test.pairs:
        render_video(pair.video_path, render_keys(plan, "synthetic", pair.video_id), cache)
    ctx = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root, dataset_options=ds.options)
    result = _ok(run(cont, ctx))
    assert [s["cell"] for s in result.segments] == ["gaussian_noise-5", "impulse_noise-5"]
    assert result.n_queries == 80 and result.protocol["name"] == "continual"


def test_mixed_domains_scores_each_segment_over_its_own_queries(trials):
    """Source does not adapt, so a mixed-domains stream (both segments' queries shuffled together) must score each
    segment exactly as a continual one does: a wrong mapping of the shuffled scores back to their segments fails."""
    import dataclasses

    from workloads.trial import run

    specs, ctx = trials
    base = specs[("v2t", "source", "clean")]
    segments = '[["clean", 0], ["gaussian_noise", 5]]'
    runs = {name: _ok(run(dataclasses.replace(base, perturbation=name, severity=0, protocol=name, segments=segments),
                          ctx)) for name in ("continual", "mixed_domains")}
    cont, mixed = runs["continual"], runs["mixed_domains"]
    assert mixed.segments == cont.segments and mixed.query_R1 == cont.query_R1
    assert mixed.segments[0]["R1"] != mixed.segments[1]["R1"] or mixed.segments[0]["MnR"] != mixed.segments[1]["MnR"]
    assert mixed.batch_R1 != cont.batch_R1 and mixed.running_R1[-1] == cont.running_R1[-1]
