"""Foreign checkpoints load exactly: a Hugging Face CLIPModel with ViT-B/32's real dimensions (random weights, built
from its config: nothing is downloaded), saved as the HAT-VTR authors save their fine-tuned models (the X-Pool
training code: {"state_dict": ...} with `clip.*` and `pool_frames.*`) and as a Hugging Face folder, loaded by
`create_backbone`, gives the same image and text features as `CLIPModel.get_image_features` / `get_text_features`,
and the same pooled videos as a port of X-Pool's pooling transformer."""
import csv
import gzip
import json
import math
import re
from pathlib import Path

import ftfy
import pytest
import torch
from torch import nn

from workloads.backbones import WeightsError, create_backbone, detect_format, save_backbone
from workloads.backbones.convert import KNOWN_UNUSED, from_hf_clip, from_xpool_pooling, read_weights

transformers = pytest.importorskip("transformers")  # a test dependency (pyproject [test]); skip only if absent
from transformers import CLIPConfig, CLIPModel, CLIPTokenizer  # noqa: E402

ANNOTATIONS = Path(__file__).parent / "data" / "annotations"
TOL = dict(atol=1e-4, rtol=1e-4)


# -- the authors' X-Pool pooling, ported from its description (layer6ai-labs/xpool modules/transformer.py) -------
class PortedCrossAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, text, video):
        nt, (nv, nf, d) = text.shape[0], video.shape
        q = self.q_proj(text).reshape(nt, self.heads, self.hd).permute(1, 2, 0)           # h, hd, Nt
        k = self.k_proj(video).reshape(nv, nf, self.heads, self.hd).permute(0, 2, 1, 3)  # Nv, h, T, hd
        v = self.v_proj(video).reshape(nv, nf, self.heads, self.hd).permute(0, 2, 3, 1)  # Nv, h, hd, T
        w = torch.softmax((k @ q) / math.sqrt(self.hd), dim=2)                             # Nv, h, T, Nt
        o = (v @ w).permute(0, 3, 1, 2).reshape(nv, nt, d)                                # Nv, Nt, D
        return self.out_proj(o)


class PortedXPool(nn.Module):
    def __init__(self, d=512, heads=1):
        super().__init__()
        self.cross_attn = PortedCrossAttention(d, heads)
        self.linear_proj = nn.Linear(d, d)
        self.layer_norm1, self.layer_norm2, self.layer_norm3 = (nn.LayerNorm(d) for _ in range(3))
        self.dropout = nn.Dropout(0.3)

    def forward(self, text, video):
        text, video = self.layer_norm1(text), self.layer_norm1(video)
        o = self.layer_norm2(self.cross_attn(text, video))
        return self.layer_norm3(o + self.dropout(self.linear_proj(o)))


def jitter_(module: nn.Module, seed: int) -> nn.Module:
    """Random offsets on every parameter: a fresh model's LayerNorms (1, 0) and zero biases would hide a swapped
    or dropped tensor."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return module


def vit_b32_config(**over) -> CLIPConfig:
    # openai/clip-vit-base-patch32: the architecture of the authors' checkpoints (config values, no weights)
    text = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu")
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                  image_size=224, patch_size=32, hidden_act="quick_gelu")
    text.update(over.pop("text", {}))
    vision.update(over.pop("vision", {}))
    return CLIPConfig(text_config=text, vision_config=vision, projection_dim=over.pop("projection_dim", 512), **over)


def hf_features(out):
    """transformers 4 returns the projected features, 5 an output object holding them."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def authors_checkpoint(hf: CLIPModel, pool: nn.Module | None, path: Path, old_transformers=True) -> Path:
    """Saved as the X-Pool trainer saves (epoch, state_dict, optimizer); transformers < 4.31 also saved the
    position_ids buffers, which every released checkpoint therefore holds."""
    state = {f"clip.{k}": v for k, v in hf.state_dict().items()}
    if old_transformers:
        state["clip.text_model.embeddings.position_ids"] = torch.arange(77).unsqueeze(0)
        state["clip.vision_model.embeddings.position_ids"] = torch.arange(50).unsqueeze(0)
    if pool is not None:
        state.update({f"pool_frames.{k}": v for k, v in pool.state_dict().items()})
    optimizer = {"state": {0: {"step": torch.tensor(10.0), "exp_avg": torch.zeros(3)}},
                 "param_groups": [{"lr": 1e-6, "betas": (0.9, 0.999), "weight_decay": 0.2, "params": [0]}]}
    torch.save({"epoch": 4, "state_dict": state, "optimizer": optimizer}, path)
    return path


# -- fixtures ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vit_b32(tmp_path_factory):
    """(HF model, ported X-Pool head, the authors'-layout checkpoint path)."""
    torch.manual_seed(0)
    hf = jitter_(CLIPModel(vit_b32_config()), 1).eval()
    pool = jitter_(PortedXPool(512, heads=1), 2).eval()
    path = authors_checkpoint(hf, pool, tmp_path_factory.mktemp("ckpt") / "model_best.pth")
    return hf, pool, path


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory) -> CLIPTokenizer:
    """HF's CLIPTokenizer offline: vocab.json + merges.txt built from the BPE merges open_clip ships (the same
    49,408-token vocabulary as openai/clip-vit-base-patch32: 256 bytes, their word-final forms, 48,894 merges,
    the two special tokens)."""
    from open_clip.tokenizer import bytes_to_unicode, default_bpe

    lines = gzip.open(default_bpe()).read().decode("utf-8").split("\n")
    merges = lines[1:49152 - 256 - 2 + 1]
    byte_tokens = list(bytes_to_unicode().values())
    vocab = byte_tokens + [b + "</w>" for b in byte_tokens] + ["".join(m.split()) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408
    folder = tmp_path_factory.mktemp("clip_tokenizer")
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 77}))
    return CLIPTokenizer.from_pretrained(str(folder))


def real_captions() -> list[str]:
    caps = [r["sentence"] for r in csv.DictReader(open(ANNOTATIONS / "MSRVTT/MSRVTT_JSFUSION_test.csv"))]
    caps += [json.loads(line)["text"] for line in open(ANNOTATIONS / "ActivityNet/val1_anno.jsonl")]
    msvd = json.loads((ANNOTATIONS / "MSVD/captions_msvd.json").read_text())
    caps += [c for vid in (ANNOTATIONS / "MSVD/test_list.txt").read_text().split() for c in msvd[vid]]
    return caps


def open_clip_ids(tokens: torch.Tensor) -> list[list[int]]:
    # up to and including the end-of-text token (open_clip pads with 0, which is also the id of "!")
    out = []
    for row in tokens.tolist():
        out.append(row[:row.index(49407) + 1])
    return out


# -- tokenizers --------------------------------------------------------------------------------------------------
def test_tokenizers_agree_on_real_captions(hf_tokenizer):
    import open_clip

    caps = real_captions()
    assert len(caps) == 1000 + 4917 + 27763
    ours = open_clip_ids(open_clip.get_tokenizer("ViT-B-32-quickgelu")(caps))
    theirs = hf_tokenizer(caps, truncation=True, max_length=77)["input_ids"]
    differ = [i for i in range(len(caps)) if ours[i] != theirs[i]]
    # open_clip runs ftfy.fix_text first (curly quotes -> straight); HF's tokenizer (and the authors' slow one without
    # ftfy installed) keeps them: those captions, and only those, differ, and agree once fixed the same way
    assert all(ftfy.fix_text(caps[i]) != caps[i] for i in differ), [caps[i][:80] for i in differ]
    assert len(differ) <= 5
    fixed = hf_tokenizer([ftfy.fix_text(caps[i]) for i in differ], truncation=True, max_length=77)["input_ids"]
    assert [ours[i] for i in differ] == fixed
    # lower-casing, punctuation and truncation at 77 (start + 75 tokens + end) are exercised by these files:
    assert any(c != c.lower() for c in caps) and any(c.rstrip().endswith((".", "!", "?")) for c in caps)
    long = [i for i in range(len(caps)) if len(theirs[i]) == 77]
    assert len(long) > 100 and all(ours[i][-1] == 49407 and len(ours[i]) == 77 for i in long)


# -- features ----------------------------------------------------------------------------------------------------
def test_authors_xpool_checkpoint_gives_their_features(vit_b32, hf_tokenizer):
    hf, pool, path = vit_b32
    assert detect_format(path) == "xpool-codebase"
    model = create_backbone("xpool", "ViT-B-32-quickgelu", pretrained=str(path))

    torch.manual_seed(3)
    pixels = torch.randn(2, 3, 3, 224, 224)  # 2 videos x 3 frames, already normalised
    with torch.no_grad():
        frames_ours = model.encode_frames(pixels)
        frames_hf = hf_features(hf.get_image_features(pixel_values=pixels.flatten(0, 1))).view(2, 3, -1)
    torch.testing.assert_close(frames_ours, frames_hf, **TOL)

    caps = real_captions()
    # short and long captions in one batch (HF pads to the longest, we cut at it; a paragraph is truncated at 77),
    # upper case and punctuation
    batch = [caps[0], max(caps[1000:5917], key=len), caps[1001][:60], "A MAN IS SINGING!!!  on stage...", caps[-1]]
    with torch.no_grad():
        text_ours = model.encode_text(model.tokenize(batch))
        enc = hf_tokenizer(batch, padding=True, truncation=True, max_length=77, return_tensors="pt")
        text_hf = hf_features(hf.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]))
    assert enc["input_ids"].shape[1] == 77
    torch.testing.assert_close(text_ours, text_hf, **TOL)

    with torch.no_grad():
        pooled_ours = model.pool(text_ours, frames_ours)
        pooled_port = pool(text_hf, frames_hf)
    assert pooled_ours.shape == (2, len(batch), 512)
    torch.testing.assert_close(pooled_ours, pooled_port, **TOL)

    # convert-once round trip: our format gives the same model
    out = path.parent / "converted.pt"
    save_backbone(model, out)
    again = create_backbone("xpool", "ViT-B-32-quickgelu", pretrained=str(out))
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k


def test_xpool_head_matches_port_with_several_heads():
    from workloads.backbones.xpool import XPoolPooling

    torch.manual_seed(0)
    for heads in (1, 4):
        port = jitter_(PortedXPool(64, heads), heads).eval()
        ours = XPoolPooling(64, num_heads=heads).eval()
        ours.load_state_dict(from_xpool_pooling({f"pool_frames.{k}": v for k, v in port.state_dict().items()}))
        text, frames = torch.randn(5, 64), torch.randn(3, 12, 64)
        torch.testing.assert_close(ours(text, frames), port(text, frames), atol=1e-5, rtol=1e-5)


def test_hf_folder_converts_to_the_same_weights(vit_b32, tmp_path):
    hf, _, path = vit_b32
    reference = read_weights(path).clip_state
    folder = tmp_path / "clip-vit-base-patch32"  # as save_pretrained writes it: config.json + model.safetensors
    hf.save_pretrained(folder)
    assert (folder / "model.safetensors").is_file() and detect_format(folder) == "hf-clip"
    weights = read_weights(folder)
    assert weights.quick_gelu is True and set(weights.clip_state) == set(reference)
    assert all(torch.equal(weights.clip_state[k], reference[k]) for k in reference)


# -- small models for the format and error checks ---------------------------------------------------------------
TINY = {"embed_dim": 32, "quick_gelu": True,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An open_clip config 'test-tiny-quickgelu' and the matching random HF model, saved in the authors' layout."""
    import open_clip

    folder = tmp_path_factory.mktemp("configs")
    (folder / "test-tiny-quickgelu.json").write_text(json.dumps(TINY))
    (folder / "test-tiny.json").write_text(json.dumps({**TINY, "quick_gelu": False}))
    open_clip.add_model_config(folder)
    torch.manual_seed(0)
    cfg = vit_b32_config(text=dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2),
                         vision=dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=2, image_size=32, patch_size=16), projection_dim=32)
    hf = jitter_(CLIPModel(cfg), 5).eval()
    pool = jitter_(PortedXPool(32), 6).eval()
    return hf, pool, tmp_path_factory.mktemp("tiny")


def test_hf_bin_folder_and_open_clip_files(tiny, tmp_path):
    import open_clip

    hf, _, _ = tiny
    folder = tmp_path / "hf_bin"  # the older Hugging Face layout: config.json + pytorch_model.bin
    folder.mkdir()
    hf.config.to_json_file(folder / "config.json")
    torch.save(hf.state_dict(), folder / "pytorch_model.bin")
    model = create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(folder))
    assert isinstance(model.clip, open_clip.CLIP)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.clip.encode_image(pixels),
                                   hf_features(hf.get_image_features(pixel_values=pixels)), atol=1e-5, rtol=1e-5)
    # an open_clip state dict file, bare and as open_clip's training checkpoint (state_dict, module. prefix)
    sd = model.clip.state_dict()
    torch.save(sd, tmp_path / "open_clip.pt")
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in sd.items()}}, tmp_path / "epoch_1.pt")
    for name in ("open_clip.pt", "epoch_1.pt"):
        assert detect_format(tmp_path / name) == "open_clip"
        again = create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(tmp_path / name))
        assert all(torch.equal(again.clip.state_dict()[k], v) for k, v in sd.items())
    # a gelu-tagged HF folder needs the exact-GELU config
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["hidden_act"] = cfg["vision_config"]["hidden_act"] = "gelu"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightsError, match="use clip_model 'test-tiny'"):
        create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(folder))


def test_tiny_features_and_openai_torchscript(tiny):
    hf, pool, folder = tiny
    path = authors_checkpoint(hf, pool, folder / "xpool.pth", old_transformers=False)
    model = create_backbone("xpool", "test-tiny-quickgelu", pretrained=str(path))
    pixels = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.clip.encode_image(pixels),
                                   hf_features(hf.get_image_features(pixel_values=pixels)), atol=1e-5, rtol=1e-5)

    # OpenAI's release format: a TorchScript archive whose state dict has open_clip's layout (fp16) plus
    # input_resolution / context_length / vocab_size
    class Archive(nn.Module):
        def __init__(self, clip):
            super().__init__()
            for name, child in clip.named_children():
                setattr(self, name, child)
            for name, p in clip.named_parameters(recurse=False):
                self.register_parameter(name, p)
            for name, value in (("input_resolution", 32), ("context_length", 77), ("vocab_size", 49408)):
                self.register_buffer(name, torch.tensor(value))

        def forward(self, x):
            return x * self.logit_scale

    import copy

    clip = copy.deepcopy(model.clip).half()
    archive = torch.jit.trace(Archive(clip), torch.ones(1, dtype=torch.half))
    torch.jit.save(archive, folder / "ViT-tiny.pt")
    assert detect_format(folder / "ViT-tiny.pt") == "openai-torchscript"
    loaded = create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(folder / "ViT-tiny.pt"))
    for k, v in clip.state_dict().items():
        assert torch.equal(loaded.clip.state_dict()[k], v.float()), k
    assert sorted(read_weights(folder / "ViT-tiny.pt").dropped) == ["context_length", "input_resolution",
                                                                    "vocab_size"]


def test_key_reports_and_refusals(tiny):
    hf, pool, folder = tiny
    good = authors_checkpoint(hf, pool, folder / "good.pth")
    weights = read_weights(good)
    assert weights.dropped == ["clip.text_model.embeddings.position_ids", "clip.vision_model.embeddings.position_ids"]
    assert all(any(re.fullmatch(p, k.split("clip.")[-1]) for p in KNOWN_UNUSED) for k in weights.dropped)

    # OpenAI weights need QuickGELU: naming the exact-GELU config is refused with the one to use
    with pytest.raises(WeightsError, match="use clip_model 'test-tiny-quickgelu'"):
        create_backbone("xpool", "test-tiny", pretrained=str(good))
    # an X-Pool checkpoint is not a mean-pooling model (unless only its CLIP is wanted)
    with pytest.raises(WeightsError, match="holds an X-Pool model"):
        create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(good))
    create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(good), clip_only=True)

    def broken(name, edit):
        ckpt = torch.load(good, weights_only=True)
        edit(ckpt["state_dict"])
        torch.save(ckpt, folder / name)
        return str(folder / name)

    extra = broken("extra.pth", lambda s: s.__setitem__("clip.text_model.extra_head.weight", torch.zeros(2)))
    with pytest.raises(WeightsError, match=r"1 unexpected key\(s\): text_model.extra_head.weight"):
        create_backbone("xpool", "test-tiny-quickgelu", pretrained=extra)
    stray = broken("stray.pth", lambda s: s.__setitem__("temperature", torch.zeros(())))
    with pytest.raises(WeightsError, match=r"unexpected key\(s\): temperature"):
        create_backbone("xpool", "test-tiny-quickgelu", pretrained=stray)
    no_ln = broken("no_ln.pth", lambda s: s.pop("pool_frames.layer_norm3.bias"))
    with pytest.raises(WeightsError, match=r"1 missing key\(s\): layer_norm3.bias"):
        create_backbone("xpool", "test-tiny-quickgelu", pretrained=no_ln)
    no_q = broken("no_q.pth", lambda s: s.pop("clip.vision_model.encoder.layers.1.self_attn.q_proj.weight"))
    with pytest.raises(WeightsError, match=r"missing key\(s\): vision_model.encoder.layers.1.self_attn.q_proj.weight"):
        create_backbone("xpool", "test-tiny-quickgelu", pretrained=no_q)
    no_pool = broken("c4c.pth", lambda s: [s.pop(k) for k in list(s) if k.startswith("pool_frames.")])
    with pytest.raises(WeightsError, match="holds a mean-pooling model"):
        create_backbone("xpool", "test-tiny-quickgelu", pretrained=no_pool)
    # wrong architecture: sizes named against the config
    with pytest.raises(WeightsError, match=r"vision width 64 \(config: 768\).*patch size 16 \(config: 32\)"):
        create_backbone("xpool", "ViT-B-32-quickgelu", pretrained=str(good))
    junk = folder / "junk.pt"
    torch.save({"encoder.weight": torch.zeros(2)}, junk)
    with pytest.raises(WeightsError, match="unknown weights layout"):
        create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(junk))
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        create_backbone("clip4clip", "test-tiny-quickgelu", pretrained=str(folder / "absent.pt"))


def test_from_hf_clip_rejects_unknown_keys_and_checks_the_config():
    state = {"text_model.encoder.layers.0.self_attn.q_proj.weight": torch.zeros(4, 4),
             "text_model.encoder.layers.0.self_attn.rotary.weight": torch.zeros(4)}
    with pytest.raises(WeightsError, match="missing key.*k_proj.*unexpected key.*rotary"):
        from_hf_clip(state)


def test_convert_checkpoint_command(tiny, capsys):
    from orchestrator.cli.main import main

    hf, pool, folder = tiny
    src = authors_checkpoint(hf, pool, folder / "cli.pth")
    out = folder / "converted" / "xpool.pt"
    assert main(["convert-checkpoint", str(src), str(out), "--clip-model", "test-tiny-quickgelu",
                 "--backbone", "xpool"]) == 0
    printed = capsys.readouterr().out
    assert "xpool-codebase" in printed and "dropped known-unused" in printed and str(out) in printed
    assert detect_format(out) == "mlvp-backbone/1"
    model = create_backbone("xpool", "test-tiny-quickgelu", pretrained=str(out))
    torch.testing.assert_close(model.pooling.layer_norm3.bias, pool.layer_norm3.bias)
    # a refused conversion exits 2 with the reason on one line
    assert main(["convert-checkpoint", str(src), str(out), "--clip-model", "test-tiny", "--backbone", "xpool"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "test-tiny-quickgelu" in err
