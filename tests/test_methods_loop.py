"""The shared online TTA loop (docs/faithfulness.md: The online loop) on the micro model: what it adapts, when it
scores."""
import pytest
import torch
import torch.nn.functional as F

from workloads.backbones import create_backbone
from workloads.methods import METHODS, NAMES, Gallery, NonFiniteError, create_method, iter_batches, run_stream
from workloads.methods.base import TTAMethod


def stream(backbone: str, direction: str, n: int = 40, seed: int = 0):
    torch.manual_seed(seed)
    model = create_backbone(backbone, "mlvp-micro")
    g = torch.Generator().manual_seed(seed)
    clips = torch.randint(0, 256, (n, 12, 32, 32, 3), dtype=torch.uint8, generator=g)
    captions = [f"a {c} shape number {i}" for i, c in zip(range(n), ["red", "blue", "green", "pink"] * n)]
    with torch.no_grad():
        if direction == "v2t":
            gallery = model.encode_text(model.tokenize(captions))
            queries = model.preprocess_frames(clips)
        else:
            gallery = model.encode_frames(model.preprocess_frames(clips))
            queries = model.tokenize(captions)
    return model, Gallery(direction, gallery), queries


def query_ln_names(model, direction):
    prefixes = ("clip.visual.",) if direction == "v2t" else ("clip.transformer.", "clip.ln_final")
    ln_modules = {n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm) and n.startswith(prefixes)}
    return {f"{n}.{p}" for n in ln_modules for p in ("weight", "bias")}


@pytest.mark.parametrize("backbone", ["clip4clip", "xpool"])
@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_tent_changes_only_query_tower_layernorms(backbone, direction):
    model, gallery, queries = stream(backbone, direction)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scores = run_stream(create_method("tent", model, direction, gallery, lr=1e-3), iter_batches(queries, 16))
    assert scores.shape == (40, 40) and torch.isfinite(scores).all()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    expected = query_ln_names(model, direction)
    assert changed == expected, f"unexpected: {changed ^ expected}"
    # X-Pool's own LayerNorms and every projection stay frozen
    assert not any(k.startswith("pooling.") for k in changed)


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_source_changes_nothing_and_matches_plain_scoring(direction):
    model, gallery, queries = stream("clip4clip", direction)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scores = run_stream(create_method("source", model, direction, gallery), iter_batches(queries, 16))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    # Source = one forward with unnormalised mean pooling, cosine
    with torch.no_grad():
        if direction == "v2t":
            pooled = model.encode_frames(queries).mean(1)
            ref = F.normalize(pooled, dim=-1) @ F.normalize(gallery.features, dim=-1).t()
        else:
            text = model.encode_text(queries)
            ref = F.normalize(text, dim=-1) @ F.normalize(gallery.features.mean(1), dim=-1).t()
    torch.testing.assert_close(scores, ref, atol=1e-5, rtol=1e-5)


class Recorder(TTAMethod):
    """Tent's loss, recording the scores of every forward and the parameter state at each step."""

    name = "recorder"

    def __init__(self, *a, **k):
        self.seen = []
        super().__init__(*a, **k)

    def loss(self, out, batch, step):
        self.seen.append((batch.index, step, out.scores.detach().clone(),
                          [p.detach().clone() for p in self.params]))
        return -(self.logits(out).softmax(1) * self.logits(out).log_softmax(1)).sum(1).mean()


def test_scores_come_from_the_last_step_forward_and_adaptation_is_continual():
    model, gallery, queries = stream("clip4clip", "v2t")
    m = Recorder(model, "v2t", gallery, lr=1e-2, steps=3)
    scores = run_stream(m, iter_batches(queries, 16))
    # 3 batches (16, 16, 8) x 3 steps
    assert [(b, s) for b, s, _, _ in m.seen] == [(b, s) for b in range(3) for s in range(3)]
    # batch b's returned scores = the forward of its step 2 (after 2 updates, before the 3rd)
    starts = [0, 16, 32]
    for b in range(3):
        step2 = m.seen[3 * b + 2][2]
        torch.testing.assert_close(scores[starts[b]:starts[b] + len(step2)], step2)
        # and differ from step 0's forward (parameters moved within the batch)
        assert not torch.allclose(m.seen[3 * b][2], step2)
    # continual: batch 1 starts where batch 0's third update left the parameters (no reset between batches)
    params_b1_s0 = m.seen[3][3]
    params_b0_s2 = m.seen[2][3]
    assert any(not torch.equal(a, b) for a, b in zip(params_b1_s0, params_b0_s2)), "third update must land"
    # reset restores the initial parameters
    first = m.seen[0][3]
    m.reset()
    assert all(torch.equal(a, b.detach()) for a, b in zip(first, m.params))


def test_non_finite_loss_fails_loudly_with_batch_and_step():
    model, gallery, queries = stream("clip4clip", "v2t")

    class NanLoss(TTAMethod):
        name = "nan_loss"

        def loss(self, out, batch, step):
            return out.scores.mean() * (float("nan") if batch.index == 1 else 1.0)

    with pytest.raises(NonFiniteError, match="non-finite loss at batch 1, step 0") as info:
        run_stream(NanLoss(model, "v2t", gallery), iter_batches(queries, 16))
    assert info.value.batch_index == 1


def test_non_finite_parameters_fail_loudly_with_the_batch_index():
    model, gallery, queries = stream("clip4clip", "v2t")

    class Poisoned(TTAMethod):
        name = "poisoned"

        def loss(self, out, batch, step):
            return out.scores.mean()

        def step(self, batch, step):
            out = super().step(batch, step)
            if batch.index == 2 and step == 2:
                with torch.no_grad():
                    self.params[0].fill_(float("inf"))
            return out

    with pytest.raises(NonFiniteError, match="non-finite LayerNorm parameters at batch 2"):
        run_stream(Poisoned(model, "v2t", gallery), iter_batches(queries, 16))


def test_optimizer_is_adamw_on_layernorm_params_only():
    model, gallery, _ = stream("xpool", "t2v")
    m = create_method("tent", model, "t2v", gallery)
    assert isinstance(m.optimizer, torch.optim.AdamW)
    group = m.optimizer.param_groups[0]
    assert group["weight_decay"] == 1e-4 and group["lr"] == 3e-5
    assert len(group["params"]) == len(query_ln_names(model, "t2v"))


def test_registry_and_errors():
    assert NAMES[:2] == ("source", "tent") and set(NAMES) <= set(METHODS)
    model, gallery, _ = stream("clip4clip", "v2t", n=4)
    with pytest.raises(ValueError, match="unknown method 'tnet'; known methods: source, tent"):
        create_method("tnet", model, "v2t", gallery)
    with pytest.raises(ValueError, match=r"method 'tent': unknown option\(s\) 'margin'"):
        create_method("tent", model, "v2t", gallery, margin=0.4)
    # grid-time validation: common constructor options are fine for every method, others by the method's table
    METHODS["tent"].validate_options({"lr": 1e-4})
    METHODS["hat_vtr"].validate_options({"hsm_rerank": False, "lr": 1e-4})
    with pytest.raises(ValueError, match="must be true/false"):
        METHODS["hat_vtr"].validate_options({"hsm_rerank": "no"})
    with pytest.raises(ValueError, match="gallery was encoded for v2t"):
        create_method("tent", model, "t2v", gallery)
    with pytest.raises(ValueError, match="empty query stream"):
        run_stream(create_method("source", model, "v2t", gallery), iter([]))


def test_non_finite_error_survives_pickling_across_workers():
    import pickle

    err = pickle.loads(pickle.dumps(NonFiniteError("scores", 7, 2)))
    assert err.batch_index == 7 and err.step == 2 and "batch 7, step 2" in str(err)
