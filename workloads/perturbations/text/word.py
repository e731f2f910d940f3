"""Word-level types: the EDA operations (Wei & Zou 2019) as the authors call them, and their punctuation insertion
(bingqingzhang/vtr_tta, preprocess/eda.py and do_text_perturbation.py), all under the similarity retry.

With r = 0.05 x severity and words = caption.split():
- synonym_replace: n = max(1, int(r x #words)); the distinct words not in EDA's stop-word list, shuffled; each in turn
  with at least one WordNet synonym has every occurrence replaced by a random one of its synonyms, until n words have
  been replaced.
- word_insert: n times, draw random words until one has synonyms (the 10th draw gives up) and insert its first
  synonym at a random position in 0..len-1 (never at the end).
- word_swap: n times, draw a position, then up to 3 more until one differs and swap the two (a 4th draw is made and
  ignored: no swap).
- word_delete: drop each word when a uniform draw is <= r; a single word is kept; if all go, one random word is kept.
- insert_punctuation: words = caption.split(' '); q = max(1, int(r x #words)) distinct positions get one of . , ! ? ; :
  inserted before the word.
Outputs are joined with single spaces. The random draws are the same calls in the same order as the authors' code
(shuffle, choice, randint, uniform, sample of a `random.Random`). Two orders the authors take from Python's set
iteration (the candidate words before their shuffle, and each word's synonym list: `word_insert` always takes its
first entry) are reproduced with a per-caption keyed hash (`_wordnet.set_order`), the stand-in for the per-process
string-hash seed. Synonyms come from every part of speech: EDA does no POS tagging (the authors' script fetches
NLTK's perceptron tagger but nothing uses it).
"""
from __future__ import annotations

from workloads.perturbations.text import _encoder, _wordnet
from workloads.perturbations.text._registry import CaptionStream, Sampler, ratio, register

# EDA's stop-word list (eda_nlp by Wei & Zou, kept by the authors): 127 words and the empty string
STOP_WORDS = frozenset("""i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing a an the and but if or because as until while of at
by for with about against between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more most other some such no nor
not only own same so than too very s t can will just don should now""".split()) | {""}

PUNCTUATIONS = (".", ",", "!", "?", ";", ":")


def synonym_replace(words: list[str], n: int, rng, wn, key: int) -> list[str]:
    new = list(words)
    candidates = _wordnet.set_order({w for w in words if w not in STOP_WORDS}, key)
    rng.shuffle(candidates)
    replaced = 0
    for word in candidates:
        synonyms = wn.synonyms(word)
        if synonyms:
            synonym = rng.choice(_wordnet.set_order(synonyms, key))
            new = [synonym if w == word else w for w in new]
            replaced += 1
        if replaced >= n:
            break
    return " ".join(new).split(" ")  # a multi-word synonym becomes several words


def word_insert(words: list[str], n: int, rng, wn, key: int) -> list[str]:
    new = list(words)
    for _ in range(n):
        for draw in range(1, 11):
            synonyms = wn.synonyms(new[rng.randint(0, len(new) - 1)])
            if draw == 10:  # EDA gives up on the 10th draw even when that word has synonyms
                break
            if synonyms:
                new.insert(rng.randint(0, len(new) - 1), _wordnet.set_order(synonyms, key)[0])
                break
    return new


def word_swap(words: list[str], n: int, rng) -> list[str]:
    new = list(words)
    for _ in range(n):
        i = rng.randint(0, len(new) - 1)
        for draw in range(1, 5):
            j = rng.randint(0, len(new) - 1)
            if draw == 4:  # EDA gives up on the 4th draw even when it differs
                break
            if j != i:
                new[i], new[j] = new[j], new[i]
                break
    return new


def word_delete(words: list[str], p: float, rng) -> list[str]:
    if len(words) == 1:
        return words
    kept = [w for w in words if rng.uniform(0, 1) > p]
    return kept if kept else [words[rng.randint(0, len(words) - 1)]]


def insert_punctuation(sentence: str, r: float, rng) -> str:
    words = sentence.split(" ")
    q = max(1, int(r * len(words)))
    marked = set(rng.sample(range(len(words)), min(q, len(words))))
    out = []
    for j, word in enumerate(words):
        if j in marked:
            out.append(PUNCTUATIONS[rng.randint(0, len(PUNCTUATIONS) - 1)])
        out.append(word)
    return " ".join(out)


def _attempt(name: str, text: str, r: float, stream: CaptionStream, wn) -> str:
    if name == "insert_punctuation":
        return insert_punctuation(text, r, stream.random)
    words = text.split()
    if not words:
        return text
    n = max(1, int(r * len(words)))
    rng, key = stream.random, stream.seed
    if name == "synonym_replace":
        return " ".join(synonym_replace(words, n, rng, wn, key))
    if name == "word_insert":
        return " ".join(word_insert(words, n, rng, wn, key))
    if name == "word_swap":
        return " ".join(word_swap(words, n, rng))
    return " ".join(word_delete(words, r, rng))


NEEDS_WORDNET = ("synonym_replace", "word_insert")
TYPES = {"synonym_replace": 5, "word_insert": 6, "word_swap": 7, "word_delete": 8, "insert_punctuation": 9}


def _make(name: str):
    def make_sampler(severity: int, assets) -> Sampler:
        wn = _wordnet.load(assets.get("wordnet")) if name in NEEDS_WORDNET else None
        r = ratio(severity)

        def sample(text: str, stream: CaptionStream, count: int) -> list:
            return [_attempt(name, text, r, stream, wn) for _ in range(count)]

        meta = {"wordnet": wn.location} if wn is not None else {}
        if wn is not None:
            import nltk

            meta["nltk"] = nltk.__version__
        return Sampler(sample, meta=meta)

    make_sampler.__name__ = name
    return make_sampler


def _missing(name: str):
    def missing(assets) -> str | None:
        if name in NEEDS_WORDNET:
            reason = _wordnet.missing_reason(assets.get("wordnet"))
            if reason:
                return reason
        return _encoder.missing_reason(assets.get("sentence_encoder"))

    return missing


for _name, _order in TYPES.items():
    register(_name, order=_order, level="word", similarity_retry=True,
             asset_keys=(("wordnet",) if _name in NEEDS_WORDNET else ()) + ("sentence_encoder", "device"),
             missing=_missing(_name))(_make(_name))
