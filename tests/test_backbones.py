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


_CONFIGS_WITHOUT_OPEN_CLIP = """
import json, sys
from workloads.backbones import CHECKPOINT_FORMAT, model_config
names = json.loads(sys.argv[1])
configs = {n: model_config(n) for n in names}
print(json.dumps({"configs": configs, "imported": sorted(m for m in ("open_clip", "torch") if m in sys.modules),
                  "format": CHECKPOINT_FORMAT}))
"""


def test_model_configs_are_read_without_importing_open_clip_and_equal_its_own():
    """`plan` and `status` read a model's config (its image size) from the JSON files open_clip and this project
    ship, without importing open_clip or torch (seconds per command); every config equals open_clip's answer."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import open_clip

    from workloads.backbones import CONFIG_DIR, _register_configs
    from workloads.backbones.convert import MLVP

    _register_configs()
    # the shipped configs (a test may have added one at run time to this process's open_clip: tests/test_convert.py)
    shipped = [Path(open_clip.__file__).parent / "model_configs", CONFIG_DIR]
    names = sorted({p.stem for folder in shipped for p in folder.glob("*.json")}) + ["no-such-model"]
    assert {"mlvp-tiny", "mlvp-micro", "ViT-B-32-quickgelu"} <= set(names)
    out = subprocess.run([sys.executable, "-c", _CONFIGS_WITHOUT_OPEN_CLIP, json.dumps(names)], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parents[1])
    got = json.loads(out.stdout)
    assert got["imported"] == []
    assert got["format"] == MLVP
    for name in names:
        assert got["configs"][name] == open_clip.get_model_config(name), name
