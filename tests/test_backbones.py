"""Backbone details that every trial depends on."""
import pytest
import torch

from workloads.backbones import create_backbone


@pytest.mark.parametrize("clip_model", ["mlvp-tiny", "ViT-B-32"])
def test_text_encoder_cut_at_the_longest_caption_matches_open_clip(clip_model):
    # encode_text runs only as many positions as the batch's longest caption; open_clip runs the whole context.
    # Features and the gradients of the text tower's LayerNorms must agree.
    torch.manual_seed(0)
    model = create_backbone("clip4clip", clip_model)
    assert model._trim_text
    tokens = model.tokenize(["a red disc", "two small green squares move up and down over a dotted background", ""])
    assert tokens.shape[1] == model.clip.context_length and (tokens[:, 20:] == 0).all()
    ours, ref = model.encode_text(tokens), model.clip.encode_text(tokens)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5)

    ln = model.clip.ln_final.weight
    g_ours = torch.autograd.grad(ours.square().sum(), ln)[0]
    g_ref = torch.autograd.grad(model.clip.encode_text(tokens).square().sum(), ln)[0]
    assert torch.allclose(g_ours, g_ref, atol=1e-4, rtol=1e-4)


def test_each_trial_gets_its_own_weights_and_shares_the_tokenizer():
    # workloads/trial.py load_model: trials of one worker start from the same base model; what one trial adapts must
    # not reach the next, while the tokenizer (never adapted, the bulk of a deep copy) is shared
    from workloads.spec import CLEAN, TrialSpec
    from workloads.trial import TrialContext, _base_model, load_model

    spec = TrialSpec("synthetic", "v2t", "query_shift", CLEAN, 0, "tent", "clip4clip", clip_model="mlvp-micro")
    ctx = TrialContext(render_cache="unused", checkpoint=None)
    base = _base_model(spec.backbone, spec.clip_model, ctx.checkpoint, ctx.clip_only)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    first, second = load_model(spec, ctx), load_model(spec, ctx)
    assert first is not base and first.tokenizer is base.tokenizer is second.tokenizer
    with torch.no_grad():
        for p in first.parameters():
            p.add_(1.0)
    for model in (base, second):
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    tokens = ["a red disc moves left"]
    assert torch.equal(first.tokenize(tokens), base.tokenize(tokens))
    assert not torch.allclose(first.encode_text(first.tokenize(tokens)), second.encode_text(second.tokenize(tokens)))
