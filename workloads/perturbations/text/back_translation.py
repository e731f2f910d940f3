"""back_translation: English -> German -> English, as nlpaug 1.1.11's `BackTranslationAug` does it for the authors
(from facebook/wmt19-en-de to facebook/wmt19-de-en, max_length 300, each model's own generation settings, one
caption per call, special tokens dropped). No similarity retry.

Assets: `back_translation_models` = (en->de folder, de->en folder), FSMT folders of those two models (or any seq2seq
pair loadable with transformers' Auto classes); `device` (default: cuda when available). Translation is deterministic
(beam search), so a caption's output does not depend on its seed.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from workloads.perturbations.text import _models
from workloads.perturbations.text._encoder import is_stand_in
from workloads.perturbations.text._registry import CaptionStream, Sampler, default_device, register

MAX_LENGTH = 300  # nlpaug BackTranslationAug's default
USAGE = ("back_translation needs a model pair (asset back_translation_models=(en->de folder, de->en folder), e.g. "
         "facebook/wmt19-en-de and facebook/wmt19-de-en) or a precomputed JSON (asset precomputed=...)")


def model_pair(assets: Mapping[str, Any]) -> tuple[str, str] | None:
    pair = assets.get("back_translation_models")
    if pair is None:
        return None
    if isinstance(pair, (str, os.PathLike)) or len(pair) != 2:
        raise ValueError(f"back_translation_models must be (en->de folder, de->en folder), got {pair!r}")
    return str(pair[0]), str(pair[1])


def _missing(assets: Mapping[str, Any]) -> str | None:
    try:
        pair = model_pair(assets)
    except ValueError as e:
        return str(e)
    if pair is None:
        return USAGE
    for role, folder in zip(("en->de", "de->en"), pair):
        if not _models.is_model_folder(folder):
            return f"back_translation_models {role} {folder!r} is not a model folder (no config.json)"
    return None


def _check_direction(model, role: str, folder: str) -> None:
    langs = list(getattr(model.config, "langs", None) or [])
    want = role.split("->")
    if langs and langs != want:
        raise ValueError(f"back_translation_models {role} folder {folder!r} translates {'->'.join(langs)}")


def translate(text: str, tokenizer, model, device: str) -> str:
    import torch

    batch = tokenizer([text], padding=True, truncation=True, return_tensors="pt").to(device)
    with torch.inference_mode():
        ids = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             max_length=MAX_LENGTH)
    return tokenizer.batch_decode(ids, skip_special_tokens=True)[0]


@register("back_translation", order=10, level="sentence", similarity_retry=False,
          asset_keys=("back_translation_models", "device"), missing=_missing)
def make_sampler(severity: int, assets: Mapping[str, Any]) -> Sampler:
    """English -> German -> English with the wmt19 FSMT pair (nlpaug BackTranslationAug)."""
    reason = _missing(assets)
    if reason:
        raise ValueError(reason)
    device = default_device(assets)
    en_de, de_en = model_pair(assets)
    tok_ed, model_ed = _models.load(en_de, device)
    tok_de, model_de = _models.load(de_en, device)
    _check_direction(model_ed, "en->de", en_de)
    _check_direction(model_de, "de->en", de_en)

    def sample(text: str, stream: CaptionStream, count: int) -> list:
        out = translate(translate(text.strip(), tok_ed, model_ed, device), tok_de, model_de, device)
        return [out] * count

    stand_in = is_stand_in(en_de) or is_stand_in(de_en)
    return Sampler(sample, faithful=not stand_in,
                   reason="back-translation with stand-in models" if stand_in else None,
                   meta={"models": {"en->de": en_de, "de->en": de_en}, "device": device})
