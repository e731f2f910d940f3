"""The text (t2v) perturbations: every registered type on real MSR-VTT captions (tests/data/text_captions.txt),
the similarity retry with real encoders (a bag-of-words encoder, a tiny transformers model folder), the sentence
level through tiny random transformers models built offline, and the precomputed-JSON import."""
from __future__ import annotations

import difflib
import json
import os
import random
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

import workloads.perturbations.text as T
from workloads.perturbations.text import _engine, _tiny, _wordnet
from workloads.perturbations.text._registry import CaptionStream, Sampler
from workloads.seeding import stable_seed

DATA = Path(__file__).parent / "data" / "text_captions.txt"
PAPER_COLUMNS = ("ocr", "char_insert", "char_replace", "char_swap", "char_delete", "synonym_replace", "word_insert",
                 "word_swap", "word_delete", "insert_punctuation", "back_translation", "formal", "casual", "passive",
                 "active")
MODEL_FREE = [n for n in T.NAMES if T.get(n).level != "sentence"]


def _rows():
    rows = [line.rstrip("\n").split("\t") for line in DATA.read_text().splitlines() if not line.startswith("#")]
    return [r[0] for r in rows], [r[1] for r in rows]


VIDEO_IDS, CAPTIONS = _rows()


@pytest.fixture(scope="module", autouse=True)
def wordnet_present():
    reason = _wordnet.missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install WordNet: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_text_models")
    return {"encoder": _tiny.build_sentence_encoder(root / "encoder", CAPTIONS),
            "back_translation": _tiny.build_back_translation_models(root / "wmt19"),
            "styleformer": _tiny.build_styleformer_models(root / "styleformer", CAPTIONS, adequacy_bias=8.0),
            "styleformer_rejecting": _tiny.build_styleformer_models(root / "styleformer_rej", CAPTIONS,
                                                                    adequacy_bias=-8.0)}


def assets_for(name: str, tiny=None, **extra) -> dict:
    """Assets that make `name` runnable here (the sentence level needs the tiny models)."""
    assets = {"device": "cpu", **extra}
    if name == "back_translation":
        assets["back_translation_models"] = tiny["back_translation"]
    elif T.get(name).level == "sentence":
        assets["styleformer_models"] = tiny["styleformer"]
    return assets


class BagOfWords:
    """A real (if simple) sentence encoder: hashed word counts; the cosine is the word overlap, so a swap scores 1.0
    and replacing one word of nine scores 8/9 < 0.9."""

    faithful = True

    def __init__(self, dim: int = 1024):
        self.dim = dim
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, zlib.crc32(w.encode()) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class Unrelated:
    """Every distinct text gets its own random direction (cosine ~ 0): no perturbed attempt is ever accepted."""

    faithful = True

    def encode(self, texts):
        rows = [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(4096) for t in texts]
        out = np.asarray(rows, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class Alike:
    """Every text gets the same direction (cosine 1): each caption's first attempt is accepted. The Styleformer
    stand-in T5 writes unrelated words, which a word-overlap encoder never accepts (100 attempts a caption, 0.1-0.3 s
    each); the retry's loop is test_batched_retry_equals_the_sequential_loop_for_every_retry_type's."""

    faithful = True

    def encode(self, texts):
        return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)


class OneOfEight:
    """Each text falls in one of 8 classes (by its hash), and an attempt is accepted when its class is the
    original's: about 1 attempt in 8, so a caption retries over a few blocks and is settled well before the 100th."""

    faithful = True

    def encode(self, texts):
        return np.eye(8, dtype=np.float32)[[zlib.crc32(t.encode()) % 8 for t in texts]]


def edit_rate(a: str, b: str, chars: bool) -> float:
    x, y = (a, b) if chars else (a.split(), b.split())
    return 1.0 - difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()


# -- registry, names, severities ------------------------------------------------------------------------------------
def test_names_follow_the_papers_columns():
    assert T.NAMES == PAPER_COLUMNS
    levels = [T.get(n).level for n in T.NAMES]
    assert levels == ["character"] * 5 + ["word"] * 5 + ["sentence"] * 5
    assert all(T.TEXT_PERTURBATIONS.info(n)["level"] == T.get(n).level for n in T.NAMES)


def test_a_throwaway_type_shows_up_in_names():
    info = T.TextPerturbation("echo", "word", False, lambda sev, assets: Sampler(lambda t, s, k: [t] * k), (),
                              lambda assets: None, "identity")
    with T.TEXT_PERTURBATIONS.temporary("echo", info, order=99, level="word"):
        assert T.NAMES[-1] == "echo"
        assert T.apply("echo", "a dog runs", 3) == "a dog runs"
    assert "echo" not in T.NAMES


@pytest.mark.parametrize("name", T.TEXT_PERTURBATIONS.names())
def test_severities(name):
    level = T.get(name).level
    allowed = T.SEVERITIES[level]
    assert [T.check_severity(name, s) for s in allowed] == list(allowed)
    assert T.check_severity(name, np.int64(1)) == 1
    assert T.check_severity(name, T.DEFAULT_SEVERITIES[level]) == T.DEFAULT_SEVERITIES[level]
    for bad in (0, max(allowed) + 1, -1, 1.0, "1", True, None):
        with pytest.raises(ValueError) as err:
            T.check_severity(name, bad)
        msg = str(err.value)
        assert name in msg and f"one of {list(allowed)}" in msg and msg.endswith(f"got {bad!r}")


def test_sentence_level_takes_only_severity_1():
    with pytest.raises(ValueError, match=r"'back_translation' \(sentence level\) takes severity one of \[1\], got 2"):
        T.check_severity("back_translation", 2)


def test_unknown_names_and_assets_are_rejected():
    with pytest.raises(ValueError, match="unknown text perturbation 'typo'; known text perturbations: ocr, "):
        T.apply("typo", "a dog", 1)
    with pytest.raises(ValueError, match=r"unknown text perturbation asset\(s\) \['wordnett'\]; known assets: "):
        T.apply("ocr", "a dog", 1, wordnett="/x")
    with pytest.raises(ValueError, match="caption 1 is ''"):
        T.perturb_captions("ocr", ["a dog", ""], 1, dataset="d")


# -- every type: determinism, seeds, never empty ---------------------------------------------------------------------
@pytest.mark.parametrize("name", T.TEXT_PERTURBATIONS.names())
def test_deterministic_per_caption_seed(name, tiny):
    assets = assets_for(name, tiny)
    severity = T.DEFAULT_SEVERITIES[T.get(name).level]
    captions = CAPTIONS[:3] if T.get(name).level == "sentence" else CAPTIONS[:40]
    a = T.perturb_captions(name, captions, severity, dataset="msrvtt", seed=1, **assets)
    b = T.perturb_captions(name, captions, severity, dataset="msrvtt", seed=1, **assets)
    assert a.texts == b.texts and a.faithful == b.faithful and a.fallbacks == b.fallbacks
    # each caption's output is apply() with its derived seed, whatever else is in the batch
    i = 2
    seed_i = stable_seed("msrvtt", i, name, severity, 1)
    assert T.apply(name, captions[i], severity, seed=seed_i, **assets) == a.texts[i]
    if name != "back_translation":  # beam-search translation has no randomness
        # the same caption at different indices (or another grid seed) gets different edits
        same = T.perturb_captions(name, [captions[0]] * 6, severity, dataset="msrvtt", seed=1, **assets).texts
        assert len(set(same)) > 1, same
        other = T.perturb_captions(name, captions, severity, dataset="msrvtt", seed=2, **assets).texts
        assert other != a.texts


@pytest.mark.parametrize("name", T.TEXT_PERTURBATIONS.names())
def test_never_empty(name, tiny):
    level = T.get(name).level
    edge = ["a", "x", "dog", "a a", "the", "ten", "...", "a man is", "I  am  here"]
    captions = edge if level != "sentence" else edge[:3]
    for severity in T.SEVERITIES[level]:
        out = T.perturb_captions(name, captions, severity, dataset="edge", **assets_for(name, tiny))
        assert all(isinstance(t, str) and t.strip() for t in out.texts), out.texts
        assert len(out.texts) == len(out.faithful) == len(captions)
        json.dumps(out.meta)


@pytest.mark.parametrize("name", MODEL_FREE)
def test_edit_rate_rises_with_severity(name):
    chars = T.get(name).level == "character"
    rates = []
    for severity in T.SEVERITIES[T.get(name).level]:
        out = T.perturb_captions(name, CAPTIONS, severity, dataset="msrvtt").texts
        rates.append(np.mean([edit_rate(a, b, chars) for a, b in zip(CAPTIONS, out)]))
    assert rates[0] > 0.01, rates
    assert all(b >= a - 0.02 for a, b in zip(rates, rates[1:])), rates  # non-decreasing up to sampling noise
    assert rates[-1] > rates[0] + 0.04, rates


# -- character level is nlpaug itself ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in T.NAMES if T.get(n).level == "character"])
def test_character_level_is_nlpaug_with_the_authors_arguments(name):
    import nlpaug.augmenter.char as nac

    from workloads.perturbations.text.character import TYPES

    _, cls, action = TYPES[name]
    for severity in (1, 7):
        r = 0.05 * severity
        aug = nac.OcrAug(aug_word_p=r) if cls == "OcrAug" else nac.RandomCharAug(action=action, aug_word_p=r)
        for seed, text in enumerate(CAPTIONS[:30]):
            random.seed(seed)  # the authors' global stream, started at this caption
            expected = aug.augment(text)[0]
            assert T.apply(name, text, severity, seed=seed) == expected


def test_global_random_state_is_left_alone():
    random.seed(123)
    np.random.seed(7)
    py, nps = random.getstate(), np.random.get_state()
    T.perturb_captions("char_swap", CAPTIONS[:20], 7, dataset="d")
    T.perturb_captions("word_swap", CAPTIONS[:20], 2, dataset="d")
    assert random.getstate() == py
    after = np.random.get_state()
    assert np.array_equal(after[1], nps[1]) and after[2] == nps[2]


# -- word level: EDA behaviour ----------------------------------------------------------------------------------------
def test_wordnet_synonyms_as_eda_computes_them():
    wn = _wordnet.load()
    car = wn.synonyms("car")
    assert "automobile" in car and "car" not in car and "cable car" in car  # '_' -> ' ', all parts of speech
    assert "run" in wn.synonyms("running")  # morphy lemmatises before the lookup
    assert wn.synonyms("car.") == ()  # punctuation glued to a word: no synset, as in EDA
    assert all(set(s) <= set(" abcdefghijklmnopqrstuvwxyz") for s in wn.synonyms("ten"))
    assert "" in wn.synonyms("ten")  # the lemma "10" loses every character, as in EDA
    order = _wordnet.set_order(car, 5)
    assert sorted(order) == sorted(car) and order == _wordnet.set_order(car, 5) != _wordnet.set_order(car, 6)


@pytest.mark.parametrize("severity", [1, 4, 7])
def test_word_level_invariants(severity):
    r = 0.05 * severity
    for i, text in enumerate(CAPTIONS[:100]):
        words = text.split()
        n = max(1, int(r * len(words)))

        def run(name):
            return T.apply(name, text, severity, seed=i)

        swapped = run("word_swap").split()
        assert sorted(swapped) == sorted(words)
        assert sum(a != b for a, b in zip(swapped, words)) <= 2 * n
        kept = run("word_delete").split()
        assert 1 <= len(kept) <= len(words) and _is_subsequence(kept, words)
        inserted = run("word_insert").split()
        assert _is_subsequence(words, inserted) and len(inserted) >= len(words)
        marked = run("insert_punctuation").split(" ")
        marks = [w for w in marked if w in (".", ",", "!", "?", ";", ":")]
        assert len(marks) == n and [w for w in marked if w not in marks] == text.split(" ")
        replaced = run("synonym_replace")
        changed = {a for a, b in zip(words, replaced.split()) if a != b}
        assert len(changed) <= n or len(replaced.split()) != len(words)


def _is_subsequence(small, big) -> bool:
    it = iter(big)
    return all(any(w == x for x in it) for w in small)


# -- similarity retry -------------------------------------------------------------------------------------------------
def test_without_an_encoder_the_first_attempt_is_kept_and_marked_unfaithful():
    out = T.perturb_captions("synonym_replace", CAPTIONS[:30], 2, dataset="d")
    assert out.faithful == [False] * 30
    assert out.fallbacks == {_engine.NO_ENCODER: 30}
    assert out.meta["similarity_retry"] == {"used": False}
    ok, reason = T.availability("synonym_replace")
    assert ok and "without the similarity retry" in reason


def test_retry_accepts_the_first_attempt_at_cosine_0_9():
    enc = BagOfWords()
    out = T.perturb_captions("word_swap", CAPTIONS[:30], 2, dataset="d", sentence_encoder=enc)
    # a swap keeps the bag of words: cosine 1.0, so the first attempt, the same one the no-encoder run keeps
    assert out.texts == T.perturb_captions("word_swap", CAPTIONS[:30], 2, dataset="d").texts
    assert out.faithful == [True] * 30 and out.fallbacks == {}
    assert out.meta["similarity_retry"]["attempts"] == {"1": 30}
    assert enc.calls == 2  # the originals, then every caption's first attempt in one call


def test_retry_exhausted_keeps_the_100th_attempt():
    name, severity, captions = "insert_punctuation", 3, CAPTIONS[:5]
    out = T.perturb_captions(name, captions, severity, dataset="d", seed=4, sentence_encoder=Unrelated())
    assert out.fallbacks == {_engine.EXHAUSTED: 5}
    assert out.meta["similarity_retry"]["attempts"] == {"100": 5}
    sampler = T.get(name).make_sampler(severity, {})
    for i, text in enumerate(captions):
        attempts = sampler.sample(text, CaptionStream(stable_seed("d", i, name, severity, 4)), 100)
        assert out.texts[i] == attempts[-1]


def test_batched_retry_equals_the_sequential_loop():
    """Blocks of attempts encoded across captions give the authors' one-attempt-at-a-time result."""
    info, severity = T.get("synonym_replace"), 3
    seeds = [stable_seed("d", i, info.name, severity, 0) for i in range(60)]
    assets = {"sentence_encoder": BagOfWords()}
    batched = _engine.run(info, severity, CAPTIONS[:60], seeds, assets)
    one_by_one = [_engine.run(info, severity, [c], [s], assets, blocks=(1,) * 100)
                  for c, s in zip(CAPTIONS[:60], seeds)]
    assert batched.texts == [r.texts[0] for r in one_by_one]
    hist = batched.meta["similarity_retry"]["attempts"]
    assert sum(hist.values()) == 60 and len(hist) > 2, hist  # a real mix of accepted-at-once and retried captions


# The four Styleformer types share one sampler (a tiny T5 per attempt, 0.1-0.3 s here): one of them stands for it.
RETRY_TYPES = [n for n in T.TEXT_PERTURBATIONS.names() if T.get(n).similarity_retry
               and (T.get(n).level != "sentence" or n == "formal")]


@pytest.mark.parametrize("name", RETRY_TYPES)
def test_batched_retry_equals_the_sequential_loop_for_every_retry_type(name, tiny):
    """Every retrying type draws the same attempts whether the engine asks for them one at a time or in blocks
    (the Styleformer sampler once drew a block from one seed, so the batched retry kept other captions)."""
    info, severity = T.get(name), T.DEFAULT_SEVERITIES[T.get(name).level]
    n = 1 if info.level == "sentence" else 30
    seeds = [stable_seed("d", i, name, severity, 0) for i in range(n)]
    assets = assets_for(name, tiny, sentence_encoder=OneOfEight() if info.level == "sentence" else BagOfWords())
    batched = _engine.run(info, severity, CAPTIONS[:n], seeds, assets)
    one_by_one = [_engine.run(info, severity, [c], [s], assets, blocks=(1,) * 100)
                  for c, s in zip(CAPTIONS[:n], seeds)]
    assert batched.texts == [r.texts[0] for r in one_by_one]
    if info.level == "sentence":   # its one caption took the same attempts both ways: several, not all 100
        attempts = batched.meta["similarity_retry"]["attempts"]
        assert attempts == one_by_one[0].meta["similarity_retry"]["attempts"] and 1 < int(next(iter(attempts))) < 100


def test_empty_attempts_become_the_original():
    calls = []

    def make(severity, assets):
        def sample(text, stream, count):
            calls.append(count)
            return ["" if stream.random.random() < 0.5 else "  " for _ in range(count)]

        return Sampler(sample)

    info = T.TextPerturbation("blank", "word", True, make, (), lambda a: None, "")
    with T.TEXT_PERTURBATIONS.temporary("blank", info, order=100, level="word"):
        out = T.perturb_captions("blank", CAPTIONS[:50], 1, dataset="d")
        assert out.texts == CAPTIONS[:50]  # "" -> original; a blank last attempt -> original too
        assert out.fallbacks[_engine.EMPTY] == 50
        retried = T.perturb_captions("blank", CAPTIONS[:50], 1, dataset="d", sentence_encoder=Unrelated())
        assert retried.texts == CAPTIONS[:50]
        # the authors' rule: an empty attempt is the original, cosine 1, accepted; a blank one is not
        assert retried.fallbacks[_engine.EMPTY] == 50
        assert set(retried.meta["similarity_retry"]["attempts"]) - {"100"}


def test_tiny_encoder_folder_runs_the_retry_and_is_a_stand_in(tiny):
    out = T.perturb_captions("word_delete", CAPTIONS[:20], 2, dataset="d", sentence_encoder=tiny["encoder"],
                             device="cpu")
    assert out.faithful == [False] * 20
    assert out.fallbacks[_engine.STAND_IN_ENCODER] == 20
    retry = out.meta["similarity_retry"]
    assert retry["used"] and retry["encoder"]["path"] == tiny["encoder"] and retry["encoder"]["pooling"] == "mean"
    from workloads.perturbations.text._encoder import resolve

    enc = resolve(tiny["encoder"], "cpu")
    emb = enc.encode(CAPTIONS[:3] + [CAPTIONS[0]])
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5) and np.allclose(emb[0], emb[3], atol=1e-6)
    with pytest.raises(ValueError, match="boolean attribute `faithful`"):
        T.apply("word_swap", "a dog runs", 1, sentence_encoder=object())


# -- sentence level through tiny models -------------------------------------------------------------------------------
def test_back_translation_runs_the_model_pair(tiny):
    out = T.perturb_captions("back_translation", CAPTIONS[:2], 1, dataset="d", **assets_for("back_translation", tiny))
    assert all(t.strip() and t != c for t, c in zip(out.texts, CAPTIONS))
    assert out.faithful == [False, False] and out.fallbacks == {"back-translation with stand-in models": 2}
    assert out.meta["models"]["en->de"].endswith("wmt19-en-de") and not out.meta["similarity_retry"]["used"]
    reversed_pair = tuple(reversed(tiny["back_translation"]))
    with pytest.raises(ValueError, match="en->de folder .* translates de->en"):
        T.apply("back_translation", "a dog", 1, back_translation_models=reversed_pair, device="cpu")


@pytest.mark.parametrize("name", ["formal", "casual", "passive", "active"])
def test_styleformer_types(name, tiny):
    from workloads.perturbations.text.style_transfer import STYLES

    assets = assets_for(name, tiny, sentence_encoder=Alike())
    out = T.perturb_captions(name, CAPTIONS[:3], 1, dataset="d", **assets)
    assert all(t.strip() for t in out.texts) and out.texts != CAPTIONS[:3]
    assert out.faithful == [False] * 3 and out.fallbacks["style transfer with stand-in models"] == 3
    assert out.meta["prefix"] == STYLES[name][2] and out.meta["similarity_retry"]["used"]
    assert out.meta["similarity_retry"]["attempts"] == {"1": 3}   # each caption's first attempt, the model's
    if STYLES[name][4]:  # formal/casual: no candidate passes the adequacy filter -> the original, accepted at once
        assets["styleformer_models"] = tiny["styleformer_rejecting"]
        rejected = T.perturb_captions(name, CAPTIONS[:3], 1, dataset="d", **assets)
        assert rejected.texts == CAPTIONS[:3] and rejected.fallbacks[_engine.EMPTY] == 3
        assert rejected.meta["similarity_retry"]["attempts"] == {"1": 3}


def test_styleformer_models_as_a_mapping(tiny):
    root = Path(tiny["styleformer"])
    mapping = {"passive": root / "active_to_passive_styletransfer"}
    assert T.availability("passive", styleformer_models=mapping)[0]
    ok, reason = T.availability("formal", styleformer_models={"formal": root / "informal_to_formal_styletransfer"})
    assert not ok and "adequacy model" in reason


# -- availability -----------------------------------------------------------------------------------------------------
def test_availability_reasons(tmp_path):
    for name in T.NAMES:
        ok, reason = T.availability(name)
        if T.get(name).level == "sentence":
            assert not ok and "precomputed" in reason and ("models" in reason), reason
        else:
            assert ok
    ok, reason = T.availability("synonym_replace", wordnet=tmp_path / "nowhere")
    assert not ok and reason.startswith(f"WordNet data not found at {tmp_path / 'nowhere'}")
    assert "apt-get install wordnet-base" in reason
    assert T.availability("word_swap", wordnet=tmp_path / "nowhere")[0]  # no WordNet needed for swaps
    ok, reason = T.availability("word_swap", sentence_encoder=tmp_path)
    assert not ok and "not a model folder" in reason
    ok, reason = T.availability("back_translation", back_translation_models=(tmp_path, tmp_path))
    assert not ok and "en->de" in reason
    assert "back_translation_models must be" in T.availability("back_translation", back_translation_models="x")[1]
    ok, reason = T.availability("passive", styleformer_models=tmp_path)
    assert not ok and "active_to_passive_styletransfer" in reason
    assert T.availability("formal", precomputed=tmp_path / "missing.json") == (
        False, f"precomputed file {str(tmp_path / 'missing.json')!r} not found")
    with pytest.raises(T.Unavailable, match="'casual' is unavailable: casual needs Styleformer models"):
        T.perturb_captions("casual", CAPTIONS[:2], 1, dataset="d")


def test_wordnet_location_is_configurable(tmp_path, monkeypatch):
    found = _wordnet.locate()
    monkeypatch.setenv(_wordnet.ENV_VAR, str(tmp_path))
    assert _wordnet.candidate_locations()[0] == str(tmp_path)
    assert _wordnet.locate() == found  # an empty folder is passed over
    for f in _wordnet.REQUIRED_FILES:  # copies: NLTK refuses files that resolve outside the corpus folder
        shutil.copyfile(Path(found) / f, tmp_path / f)
    assert _wordnet.locate() == str(tmp_path)  # no lexnames there: supplied by the reader
    wn = _wordnet.WordNet(str(tmp_path))
    assert wn.synonyms("car") == _wordnet.load(found).synonyms("car")


# -- precomputed JSON ------------------------------------------------------------------------------------------------
def _write(tmp_path, data, name="formal_1.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_precomputed_is_read_and_validated(tmp_path):
    ids, texts = VIDEO_IDS[:4], [c.upper() for c in CAPTIONS[:4]]
    path = _write(tmp_path, [[v, t] for v, t in zip(ids, texts)])
    assert T.load_precomputed(path, ids) == texts
    out = T.perturb_captions("formal", CAPTIONS[:4], 1, dataset="msrvtt", video_ids=ids, precomputed=path)
    assert out.texts == texts and out.faithful == [True] * 4 and out.meta["source"] == "precomputed"
    with pytest.raises(ValueError, match="needs video_ids"):
        T.perturb_captions("formal", CAPTIONS[:4], 1, dataset="msrvtt", precomputed=path)
    with pytest.raises(ValueError, match="use perturb_captions"):
        T.apply("formal", CAPTIONS[0], 1, precomputed=path)


@pytest.mark.parametrize("data, message", [
    ("[[", "not readable as JSON"),
    ({"a": 1}, "expected a JSON list of \\[video_id, text\\] pairs, got dict"),
    ([["video9770", "x"]], "has 1 entries, expected 3"),
    ([["video9770", "x"], ["video9771"], ["video7020", "z"]], "entry 1 is \\[\"video9771\"\\], expected \\[video_id"),
    ([["video9770", "x"], ["video9999", "y"], ["video7020", "z"]],
     "entry 1 has video id 'video9999', expected 'video9771'$"),
    ([["video9771", "y"], ["video9770", "x"], ["video7020", "z"]],
     "entry 0 has video id 'video9771', expected 'video9770' \\(the file's ids are the split's in another order\\)"),
    ([["video9770", "x"], ["video9771", 5], ["video7020", "z"]], "entry 1 \\(video9771\\) text is int"),
    ([["video9770", "x"], ["video9771", "  "], ["video7020", "z"]], "entry 1 \\(video9771\\) text is empty"),
])
def test_precomputed_errors(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        T.load_precomputed(path, VIDEO_IDS[:3])


def test_precomputed_missing_file(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        T.load_precomputed(tmp_path / "nope.json", VIDEO_IDS[:3])
