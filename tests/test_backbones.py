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
