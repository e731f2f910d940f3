"""AdaIN style transfer (Huang & Belongie 2017) exactly as naoto0804/pytorch-AdaIN builds it (docs/faithfulness.md:
Style transfer).

The networks are the authors' `nn.Sequential`s, so their published state dicts load unchanged:

- `make_vgg()`: the "normalised" VGG-19 of `vgg_normalised.pth` (53 children, keys `0.weight`, `0.bias`, `2.weight`,
  ... `51.bias`); the encoder is its first 31 children (input -> relu4_1), as the reference truncates it.
- `make_decoder()`: the mirror decoder of `decoder.pth` (29 children; keys `1.weight`, ... `28.bias`).

`load_adain(vgg_path, decoder_path, device)` loads both once per process (an LRU keyed by the resolved paths, their
size and mtime, and the device), so a render actor pays the ~94 MB load once. A vgg state dict already truncated to
the first 31 children is accepted too.

    model = load_adain("vgg_normalised.pth", "decoder.pth")
    style_feat = model.encode(load_style_tensor("painting.jpg"))        # style resized so its shorter side is 512
    frames = model.stylize(frames_uint8, style_feat, alpha=0.6)       # uint8 [T, H, W, 3] -> uint8 [T, H, W, 3]
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

ENCODER_CHILDREN = 31  # input -> relu4_1
STYLE_SHORT_SIDE = 512
ADAIN_EPS = 1e-5


# frame pixels encoded and decoded at once: VGG-19's first block holds ~250 float32 values per pixel (64 channels,
# padded copies, ReLU outputs), so 4 Mpx at once peaked at 3.1 GB (12 frames of 640x360); 1 Mpx is one 720p frame
# (workloads/render_memory.py)
CHUNK_PIXELS = 1 << 20


def _nn():
    import torch.nn as nn  # torch is imported lazily so importing the perturbation registry stays cheap

    return nn


def make_vgg():
    """The full normalised VGG-19 of pytorch-AdaIN's net.py (53 children; relu4_1 is child 30)."""
    nn = _nn()

    def block(cin, cout):
        return [nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(cin, cout, (3, 3)), nn.ReLU()]

    def pool():
        return [nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True)]

    layers = [nn.Conv2d(3, 3, (1, 1))]
    layers += block(3, 64) + block(64, 64) + pool()                                     # relu1_1, relu1_2
    layers += block(64, 128) + block(128, 128) + pool()                                 # relu2_1, relu2_2
    layers += block(128, 256) + block(256, 256) + block(256, 256) + block(256, 256) + pool()  # relu3_1..3_4
    layers += block(256, 512) + block(512, 512) + block(512, 512) + block(512, 512) + pool()  # relu4_1..4_4
    layers += block(512, 512) + block(512, 512) + block(512, 512) + block(512, 512)     # relu5_1..5_4
    return nn.Sequential(*layers)


def make_decoder():
    """pytorch-AdaIN's decoder (29 children): relu4_1 features (512 ch, 1/8 res) -> RGB."""
    nn = _nn()

    def block(cin, cout, relu=True):
        return [nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(cin, cout, (3, 3))] + ([nn.ReLU()] if relu else [])

    def up():
        return [nn.Upsample(scale_factor=2, mode="nearest")]

    layers = block(512, 256) + up()
    layers += block(256, 256) + block(256, 256) + block(256, 256) + block(256, 128) + up()
    layers += block(128, 128) + block(128, 64) + up()
    layers += block(64, 64) + block(64, 3, relu=False)
    return nn.Sequential(*layers)


def make_encoder():
    """The reference's encoder: the first 31 children of the normalised VGG-19 (up to relu4_1)."""
    nn = _nn()
    return nn.Sequential(*list(make_vgg().children())[:ENCODER_CHILDREN])


def calc_mean_std(feat, eps: float = ADAIN_EPS):
    """Per-(sample, channel) mean and std over space; eps is added to the (unbiased) variance, as in the reference."""
    n, c = feat.shape[:2]
    var = feat.reshape(n, c, -1).var(dim=2) + eps
    return feat.reshape(n, c, -1).mean(dim=2).view(n, c, 1, 1), var.sqrt().view(n, c, 1, 1)


def adaptive_instance_normalization(content_feat, style_feat):
    """AdaIN(c, s) = (c - mu(c)) / sigma(c) * sigma(s) + mu(s); `style_feat` may have batch 1 (broadcast)."""
    if content_feat.shape[1] != style_feat.shape[1]:
        raise ValueError(f"channel mismatch: content {tuple(content_feat.shape)} vs style {tuple(style_feat.shape)}")
    s_mean, s_std = calc_mean_std(style_feat)
    c_mean, c_std = calc_mean_std(content_feat)
    return (content_feat - c_mean) / c_std * s_std + s_mean


def _load_state_dict(path: str, what: str) -> dict:
    import torch

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"AdaIN {what} weights not found: {path}")
    try:
        sd = torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"cannot load AdaIN {what} weights from {path}: {type(err).__name__}: {err}") from err
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict):
        raise ValueError(f"AdaIN {what} weights at {path} are not a state dict (got {type(sd).__name__})")
    return sd


def _load_into(module, sd: dict, path: str, what: str) -> None:
    try:
        module.load_state_dict(sd, strict=True)
    except RuntimeError as err:
        expected = sorted(module.state_dict().keys(), key=lambda k: (int(k.split(".")[0]), k))
        raise ValueError(
            f"{path} does not match pytorch-AdaIN's {what} (expected keys like {expected[:4]}...; "
            f"got {sorted(sd.keys())[:4]}...): {err}") from err


class AdaIN:
    """A loaded encoder/decoder pair on one device, in eval mode, used under `torch.inference_mode`."""

    def __init__(self, encoder, decoder, device: str = "cpu", source: dict[str, Any] | None = None):
        self.device = str(device)
        self.encoder = encoder.to(self.device).eval()
        self.decoder = decoder.to(self.device).eval()
        for p in list(self.encoder.parameters()) + list(self.decoder.parameters()):
            p.requires_grad_(False)
        self.source = dict(source or {})

    def encode(self, images):
        """float [N, 3, H, W] in [0, 1] (torch or numpy) -> relu4_1 features [N, 512, ceil(H/8), ceil(W/8)]."""
        import torch

        with torch.inference_mode():
            return self.encoder(torch.as_tensor(images, dtype=torch.float32).to(self.device))

    def decode(self, feat):
        import torch

        with torch.inference_mode():
            return self.decoder(feat)

    def stylize_features(self, content_feat, style_feat, alpha: float):
        """f = alpha * AdaIN(c, s) + (1 - alpha) * c (the reference's order of operations)."""
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        import torch

        with torch.inference_mode():
            t = adaptive_instance_normalization(content_feat, style_feat)
            return t * alpha + content_feat * (1 - alpha)

    def content_features(self, frames: np.ndarray, chunk: int | None = None) -> list:
        """Encode uint8 [T, H, W, 3] frames (ToTensor only, as the reference) in memory-bounded chunks of
        CHUNK_PIXELS."""
        frames = np.asarray(frames)
        t, h, w, _ = frames.shape
        chunk = chunk or max(1, CHUNK_PIXELS // max(1, h * w))
        out = []
        for i in range(0, t, chunk):
            x = np.ascontiguousarray(frames[i:i + chunk].transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
            out.append(self.encode(x))
        return out

    def stylize(self, frames: np.ndarray, style_feat, alpha: float, content_feats: list | None = None) -> np.ndarray:
        """uint8 [T, H, W, 3] -> uint8 [T, H, W, 3]: out = clip(dec(f), 0, 1), truncated to uint8 like the reference.

        The decoder returns 8 * ceil(H / 8) x 8 * ceil(W / 8) (the encoder pools with ceil_mode); the top-left H x W
        is kept, which is where the input pixels sit."""
        import torch

        frames = np.asarray(frames)
        t, h, w, _ = frames.shape
        feats = content_feats if content_feats is not None else self.content_features(frames)
        style_feat = torch.as_tensor(style_feat).to(self.device)
        outs = []
        for cf in feats:
            y = self.decode(self.stylize_features(cf, style_feat, alpha))
            y = y[:, :, :h, :w].clamp(0.0, 1.0).permute(0, 2, 3, 1).float().cpu().numpy()
            outs.append((y * 255).astype(np.uint8))
        out = np.concatenate(outs, axis=0)
        if out.shape != (t, h, w, 3):  # inputs smaller than the network's receptive padding allow
            raise ValueError(f"AdaIN produced {out.shape} for frames {frames.shape}")
        return out


def _file_key(path: str | os.PathLike) -> tuple:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"AdaIN weights not found: {path}")
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load_cached(vgg_key: tuple, decoder_key: tuple, device: str) -> AdaIN:
    vgg_path, dec_path = vgg_key[0], decoder_key[0]
    vgg_sd = _load_state_dict(vgg_path, "vgg (vgg_normalised.pth)")
    dec_sd = _load_state_dict(dec_path, "decoder (decoder.pth)")
    nn = _nn()
    vgg = make_vgg()
    n_children = len(list(vgg.children()))
    max_index = max((int(k.split(".")[0]) for k in vgg_sd if k.split(".")[0].isdigit()), default=-1)
    if 0 <= max_index < ENCODER_CHILDREN:  # a state dict of the truncated encoder only
        encoder = make_encoder()
        _load_into(encoder, vgg_sd, vgg_path, "encoder (first 31 children of vgg_normalised)")
    else:
        _load_into(vgg, vgg_sd, vgg_path, f"normalised VGG-19 ({n_children} children)")
        encoder = nn.Sequential(*list(vgg.children())[:ENCODER_CHILDREN])
    decoder = make_decoder()
    _load_into(decoder, dec_sd, dec_path, "decoder")
    return AdaIN(encoder, decoder, device, source={"vgg": vgg_path, "decoder": dec_path})


def load_adain(vgg_path: str | os.PathLike, decoder_path: str | os.PathLike, device: str = "cpu") -> AdaIN:
    """Load (once per process and file version) the AdaIN encoder and decoder from the authors' state dicts.
    A missing or malformed file is an error naming the path."""
    if not Path(vgg_path).is_file():
        raise FileNotFoundError(f"AdaIN vgg weights (asset adain_vgg) not found: {vgg_path}")
    if not Path(decoder_path).is_file():
        raise FileNotFoundError(f"AdaIN decoder weights (asset adain_decoder) not found: {decoder_path}")
    return _load_cached(_file_key(vgg_path), _file_key(decoder_path), str(device))


def clear_cache() -> None:
    _load_cached.cache_clear()


def load_style_tensor(path: str | os.PathLike, short_side: int = STYLE_SHORT_SIDE):
    """A style image as float [1, 3, h, w] in [0, 1], resized so its shorter side is `short_side` with
    torchvision's Resize on the PIL image (bilinear, antialiased), as the reference's style transform."""
    from PIL import Image
    import torchvision.transforms.functional as TF

    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        img = img.convert("RGB")
        if short_side:
            img = TF.resize(img, short_side)
        return TF.to_tensor(img).unsqueeze(0)


def style_tensor_from_array(image: np.ndarray, short_side: int = STYLE_SHORT_SIDE):
    """Same as `load_style_tensor` for an in-memory uint8 RGB image [h, w, 3]."""
    from PIL import Image
    import torchvision.transforms.functional as TF

    img = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), mode="RGB")
    if short_side:
        img = TF.resize(img, short_side)
    return TF.to_tensor(img).unsqueeze(0)


__all__ = ["AdaIN", "make_vgg", "make_encoder", "make_decoder", "calc_mean_std", "adaptive_instance_normalization",
           "load_adain", "load_style_tensor", "style_tensor_from_array", "clear_cache", "ENCODER_CHILDREN"]
