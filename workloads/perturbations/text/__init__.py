"""The 15 text-query (t2v) perturbations of the MLVP benchmark (Qiu et al. 2024's set, as the HAT-VTR authors apply
it in bingqingzhang/vtr_tta, do_text_perturbation.py), in the paper's Table 3 column order:

    character (severity 1-7): ocr, char_insert, char_replace, char_swap, char_delete          nlpaug 1.1.11
    word (severity 1-7):      synonym_replace, word_insert, word_swap, word_delete,           EDA + WordNet,
                              insert_punctuation                                             similarity retry
    sentence (severity 1):    back_translation (wmt19 FSMT pair), formal, casual, passive,   local models or a
                              active (Styleformer T5, similarity retry)                      precomputed JSON

    apply(name, text, severity, seed=0, **assets) -> str
    perturb_captions(name, captions, severity, *, dataset, seed=0, video_ids=None, **assets) -> PerturbedCaptions
    check_severity(name, severity) -> int          (edit ratio r = 0.05 x severity)
    availability(name, **assets) -> (bool, reason)
    load_precomputed(path, video_ids) -> list[str]

Assets (keyword arguments; each type reads its own and ignores the others): `precomputed` (a JSON in the authors'
output format, any type), `wordnet` (WordNet data folder), `sentence_encoder` (model folder or encoder object),
`back_translation_models` ((en->de, de->en) folders), `styleformer_models` (folder or mapping), `device`.
A caption's output depends only on (dataset, caption index, type, severity, grid seed): its seed is
`stable_seed(dataset, index, name, severity, seed)`, and `apply(..., seed=that)` gives the same text.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from workloads.perturbations.text._engine import PerturbedCaptions, run
from workloads.perturbations.text._precomputed import load_precomputed
from workloads.perturbations.text._registry import (  # noqa: F401
    ASSET_KEYS,
    DEFAULT_SEVERITIES,
    LEVELS,
    SEVERITIES,
    TEXT_PERTURBATIONS,
    TextPerturbation,
    check_assets,
    check_severity,
    get,
    ratio,
    register,
)
from workloads.seeding import file_digest, stable_seed

__all__ = ["apply", "perturb_captions", "check_severity", "availability", "load_precomputed", "PerturbedCaptions",
           "Unavailable", "DEFAULT_SEVERITIES", "TEXT_PERTURBATIONS", "NAMES"]


class Unavailable(ValueError):
    """A type cannot run with the given assets (the message is `availability`'s reason)."""


def __getattr__(name: str):
    if name == "NAMES":  # derived on each access: a type registered later (a plugin, a test) is listed too
        return TEXT_PERTURBATIONS.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def availability(name: str, **assets: Any) -> tuple[bool, str]:
    """Whether `name` can run here with these assets, and a one-line reason (when it cannot, or when it runs
    unfaithfully: a similarity-retry type without a sentence encoder)."""
    info = get(name)
    check_assets(assets)
    if assets.get("precomputed") is not None:
        path = os.fspath(assets["precomputed"])
        if not os.path.isfile(path):
            return False, f"precomputed file {path!r} not found"
        return True, f"from the precomputed JSON {path} (checked against the split's video ids when used)"
    reason = info.missing(assets)
    if reason:
        return False, reason
    if info.similarity_retry and assets.get("sentence_encoder") is None:
        return True, ("runs without the similarity retry (no sentence_encoder asset): its captions are marked "
                      "unfaithful")
    return True, ""


def apply(name: str, text: str, severity: int, seed: int = 0, **assets: Any) -> str:
    """One perturbed caption, drawn from the stream seeded with `seed`."""
    if assets.get("precomputed") is not None:
        raise ValueError("precomputed captions belong to a split: use perturb_captions(..., video_ids=...)")
    return _generate(name, [text], severity, [seed], assets).texts[0]


def perturb_captions(name: str, captions: Sequence[str], severity: int, *, dataset: str, seed: int = 0,
                     video_ids: Sequence[str] | None = None, **assets: Any) -> PerturbedCaptions:
    """Every caption of a split perturbed, or read from the asset `precomputed` (then `video_ids` is required and
    the file is validated against it)."""
    severity = check_severity(name, severity)
    check_assets(assets)
    captions = list(captions)
    if video_ids is not None and len(video_ids) != len(captions):
        raise ValueError(f"{len(video_ids)} video ids for {len(captions)} captions")
    if assets.get("precomputed") is not None:
        if video_ids is None:
            raise ValueError("the precomputed asset needs video_ids to be checked against")
        path = os.fspath(assets["precomputed"])
        texts = load_precomputed(path, video_ids)
        meta = {"name": name, "level": get(name).level, "severity": severity, "ratio": ratio(severity),
                "source": "precomputed", "path": path, "file_digest": file_digest(path), "dataset": dataset}
        return PerturbedCaptions(texts, [True] * len(texts), {}, meta)
    seeds = [stable_seed(dataset, i, name, severity, seed) for i in range(len(captions))]
    result = _generate(name, captions, severity, seeds, assets)
    result.meta.update(dataset=dataset, seed=seed)
    return result


def _generate(name: str, captions: list, severity: int, seeds: list[int], assets: dict) -> PerturbedCaptions:
    info = get(name)
    severity = check_severity(name, severity)
    check_assets(assets)
    for i, c in enumerate(captions):
        if not isinstance(c, str) or not c.strip():
            raise ValueError(f"caption {i} is {c!r}: captions must be non-empty strings")
    ok, reason = availability(name, **assets)
    if not ok:
        raise Unavailable(f"text perturbation {name!r} is unavailable: {reason}")
    return run(info, severity, captions, seeds, assets)
