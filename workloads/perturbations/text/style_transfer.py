"""formal, casual, passive, active: Styleformer (PrithivirajDamodaran/Styleformer at 02c9a7f, the commit the authors
pin) as the authors call it, under the similarity retry.

Styleformer feeds a T5 model "<prefix><caption>" and samples (do_sample, top_k 50, top_p 0.95, max_length 32):
- formal (style 0) "transfer Casual to Formal: ", casual (style 1) "transfer Formal to Casual: ": 5 samples, the
  distinct ones scored by the adequacy model (a sequence-pair classifier: softmax probability of label 1 for
  (caption, candidate), max 128 tokens); the best one scoring >= 0.95 is the output, none -> no output (the retry
  then keeps the original caption, as the authors' does).
- passive (style 2) "transfer Active to Passive: ", active (style 3) "transfer Passive to Active: ": 1 sample.

Assets: `styleformer_models` = a folder holding one model folder per style (named after the type, or after the
model: informal_to_formal_styletransfer, formal_to_informal_styletransfer, active_to_passive_styletransfer,
passive_to_active_styletransfer, and parrot_adequacy_model / adequacy for formal and casual), or a mapping from those
names to folders; `sentence_encoder`; `device`. Sampling uses torch's random state, seeded per call from the caption's
stream (and restored afterwards). A block of k attempts is one `generate` call with k (or 5k) return sequences,
i.e. k independent draws from the same distribution as k sequential calls.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from workloads.perturbations.text import _encoder, _models
from workloads.perturbations.text._registry import CaptionStream, Sampler, default_device, register

QUALITY_FILTER = 0.95
MAX_CANDIDATES = 5
# Styleformer also passes early_stopping=True, which has no effect without beam search (transformers warns)
GENERATION = {"do_sample": True, "max_length": 32, "top_k": 50, "top_p": 0.95}

# type -> (Table 3 column, Styleformer style, T5 prefix, model folder names, uses the adequacy filter)
STYLES = {
    "formal": (11, 0, "transfer Casual to Formal: ", ("formal", "informal_to_formal_styletransfer"), True),
    "casual": (12, 1, "transfer Formal to Casual: ", ("casual", "formal_to_informal_styletransfer"), True),
    "passive": (13, 2, "transfer Active to Passive: ", ("passive", "active_to_passive_styletransfer"), False),
    "active": (14, 3, "transfer Passive to Active: ", ("active", "passive_to_active_styletransfer"), False),
}
ADEQUACY_NAMES = ("adequacy", "parrot_adequacy_model")


def _find(models: Any, names: tuple[str, ...]) -> str | None:
    if isinstance(models, Mapping):
        for n in names:
            if n in models:
                return str(models[n])
        return None
    for n in names:
        for folder in (Path(models).expanduser() / n, Path(models).expanduser() / "prithivida" / n):
            if _models.is_model_folder(folder):
                return str(folder)
    return None


def folders(name: str, assets: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(style model folder, adequacy folder or None, reason when something is missing)."""
    _, style, _, names, adequacy = STYLES[name]
    models = assets.get("styleformer_models")
    if models is None:
        return None, None, (f"{name} needs Styleformer models (asset styleformer_models=<folder with "
                            f"{names[1]}{', parrot_adequacy_model' if adequacy else ''}> or a mapping) or a "
                            f"precomputed JSON (asset precomputed=...)")
    if not isinstance(models, (Mapping, str, os.PathLike)):
        return None, None, f"styleformer_models must be a folder or a mapping, got {type(models).__name__}"
    model = _find(models, names)
    if model is None or not _models.is_model_folder(model):
        return None, None, f"styleformer_models has no model folder for {name} (Styleformer style {style}: " \
                           f"{' or '.join(names)})"
    ade = None
    if adequacy:
        ade = _find(models, ADEQUACY_NAMES)
        if ade is None or not _models.is_model_folder(ade):
            return None, None, f"{name} needs the adequacy model too: styleformer_models has no " \
                               f"{' or '.join(ADEQUACY_NAMES)} model folder"
    return model, ade, None


def _missing(name: str):
    def missing(assets: Mapping[str, Any]) -> str | None:
        return folders(name, assets)[2] or _encoder.missing_reason(assets.get("sentence_encoder"))

    return missing


def adequacy_scores(source: str, candidates: list[str], tokenizer, model, device: str) -> list[float]:
    import torch

    if not candidates:
        return []
    batch = tokenizer([source] * len(candidates), candidates, padding=True, truncation=True, max_length=128,
                      return_tensors="pt").to(device)
    with torch.inference_mode():
        probs = model(**batch).logits.float().softmax(dim=1)[:, 1]
    return probs.cpu().tolist()


def _make(name: str):
    order, style, prefix, _, uses_adequacy = STYLES[name]

    def make_sampler(severity: int, assets: Mapping[str, Any]) -> Sampler:
        import torch

        model_dir, adequacy_dir, reason = folders(name, assets)
        if reason:
            raise ValueError(reason)
        device = default_device(assets)
        tokenizer, model = _models.load(model_dir, device)
        ade_tok, ade_model = _models.load(adequacy_dir, device, "classifier") if uses_adequacy else (None, None)
        per_attempt = MAX_CANDIDATES if uses_adequacy else 1

        def sample(text: str, stream: CaptionStream, count: int) -> list:
            ids = tokenizer.encode(prefix + text, return_tensors="pt").to(device)
            preds = []
            # one seeded generate call per attempt, as a sequential loop makes them: a block of `count` attempts
            # is then the same attempts however the engine groups them (its batched retry relies on this)
            with torch.random.fork_rng(devices=_models.cuda_devices(device)), torch.inference_mode():
                for _ in range(count):
                    torch.manual_seed(stream.next_seed())
                    preds.extend(model.generate(ids, attention_mask=torch.ones_like(ids), **GENERATION,
                                                num_return_sequences=per_attempt))
            decoded = [tokenizer.decode(p, skip_special_tokens=True).strip() for p in preds]
            if not uses_adequacy:
                return decoded
            groups = [list(dict.fromkeys(decoded[k:k + per_attempt])) for k in range(0, len(decoded), per_attempt)]
            unique = list(dict.fromkeys(c for g in groups for c in g))
            score = dict(zip(unique, adequacy_scores(text, unique, ade_tok, ade_model, device)))
            out = []
            for group in groups:
                passing = [c for c in group if score[c] >= QUALITY_FILTER]
                out.append(max(passing, key=lambda c: score[c]) if passing else None)
            return out

        stand_in = [d for d in (model_dir, adequacy_dir) if d and _encoder.is_stand_in(d)]
        meta = {"models": {"style": model_dir, "adequacy": adequacy_dir}, "styleformer_style": style,
                "prefix": prefix, "device": device}
        return Sampler(sample, faithful=not stand_in,
                       reason="style transfer with stand-in models" if stand_in else None, meta=meta)

    make_sampler.__name__ = name
    return make_sampler


for _name, (_order, _style, _prefix, _names, _adequacy) in STYLES.items():
    register(_name, order=_order, level="sentence", similarity_retry=True,
             asset_keys=("styleformer_models", "sentence_encoder", "device"), missing=_missing(_name),
             doc=f"Styleformer style {_style}: T5 with prefix {_prefix!r}"
                 + (", adequacy filter >= 0.95 over 5 samples" if _adequacy else ", one sample"))(_make(_name))
