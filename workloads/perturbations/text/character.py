"""Character-level types: nlpaug 1.1.11 itself, with the authors' arguments (bingqingzhang/vtr_tta,
do_text_perturbation.py): `OcrAug(aug_word_p=r)` and `RandomCharAug(action=..., aug_word_p=r)`, r = 0.05 x severity,
every other argument nlpaug's default. No similarity retry.

nlpaug draws from Python's global `random`. Each call here runs with the global state set to the caption's own
stream and puts both the stream's advanced state back into the stream and the caller's global state back in place
(numpy's global state likewise, seeded from the caption), under a lock so that threads of this process using these
types do not interleave. Code in other threads that uses the global `random` at the same moment is not protected.
"""
from __future__ import annotations

import contextlib
import functools
import random
import threading

import numpy as np

from workloads.perturbations.text._registry import CaptionStream, Sampler, ratio, register
from workloads.seeding import stable_seed

# name -> (Table 3 column, nlpaug augmenter, RandomCharAug action)
TYPES = {"ocr": (0, "OcrAug", None), "char_insert": (1, "RandomCharAug", "insert"),
         "char_replace": (2, "RandomCharAug", "substitute"), "char_swap": (3, "RandomCharAug", "swap"),
         "char_delete": (4, "RandomCharAug", "delete")}
_GLOBAL_RNG = threading.Lock()


def _missing(assets) -> str | None:
    import importlib.util

    if importlib.util.find_spec("nlpaug") is None:  # installed? (importing it takes seconds, planning must not)
        return "the character-level types need nlpaug: pip install nlpaug==1.1.11"
    return None


@functools.lru_cache(maxsize=None)
def augmenter(name: str, severity: int):
    """The authors' nlpaug augmenter for (type, severity), built once."""
    import nlpaug.augmenter.char as nac

    _, cls, action = TYPES[name]
    if cls == "OcrAug":
        return nac.OcrAug(aug_word_p=ratio(severity))
    return nac.RandomCharAug(action=action, aug_word_p=ratio(severity))


@contextlib.contextmanager
def global_rng_of(stream: CaptionStream):
    """Python's and numpy's global random state set from `stream` for the duration, then restored."""
    with _GLOBAL_RNG:
        saved_py, saved_np = random.getstate(), np.random.get_state()
        try:
            random.setstate(stream.random.getstate())
            np.random.seed(stable_seed(stream.seed, "numpy") % 2**32)
            yield
            stream.random.setstate(random.getstate())
        finally:
            random.setstate(saved_py)
            np.random.set_state(saved_np)


def _make(name: str):
    def make_sampler(severity: int, assets) -> Sampler:
        import nlpaug

        aug = augmenter(name, severity)

        def sample(text: str, stream: CaptionStream, count: int) -> list:
            with global_rng_of(stream):
                # augment() returns a list of one output (an empty list for an empty input)
                return [(aug.augment(text) or [None])[0] for _ in range(count)]

        _, cls, action = TYPES[name]
        call = f"{cls}(aug_word_p={ratio(severity)!r}" + (f", action={action!r})" if action else ")")
        return Sampler(sample, meta={"nlpaug": nlpaug.__version__, "augmenter": call})

    make_sampler.__name__ = name
    return make_sampler


for _name, (_order, _cls, _action) in TYPES.items():
    register(_name, order=_order, level="character", similarity_retry=False, missing=_missing,
             doc=f"nlpaug {_cls}" + (f"(action={_action!r})" if _action else "") + ", aug_word_p = 0.05 x severity")(
        _make(_name))
