"""WordNet 3.0 synonyms for the word-level (EDA) types, read with NLTK's own WordNet reader from local data.

Nothing is downloaded. The data folder is, in this order: the asset `wordnet` (a folder holding index.noun, data.noun,
noun.exc, ...), the environment variable MLVP_WORDNET, WordNet's own WNSEARCHDIR, an unpacked or zipped
`corpora/wordnet` in NLTK's data path, then the usual system folders (Debian's `wordnet-base` package installs
/usr/share/wordnet). Debian's package lacks the small `lexnames` file that NLTK's reader insists on opening (the 45
lexicographer file names, fixed since WordNet 2.0; synonym lookup never uses them), so it is supplied from here when
the folder has none; and the reader is kept from building its map to other WordNet versions (used only by the
multilingual lookups, it would look for NLTK's own downloaded corpus).
"""
from __future__ import annotations

import hashlib
import io
import os
import threading
import warnings
from pathlib import Path
from typing import Iterable

ENV_VAR = "MLVP_WORDNET"
SYSTEM_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet", "/usr/share/wordnet/dict",
               "/usr/local/WordNet-3.0/dict", "/opt/homebrew/share/wordnet", "/opt/local/share/WordNet-3.0/dict")
REQUIRED_FILES = ("index.noun", "index.verb", "index.adj", "index.adv", "data.noun", "data.verb", "data.adj",
                  "data.adv", "noun.exc", "verb.exc", "adj.exc", "adv.exc")
INSTALL_HINT = ("install Debian's wordnet-base (apt-get install wordnet-base) or pass the asset wordnet=<folder with "
                "index.noun, data.noun, noun.exc, ...> (or set MLVP_WORDNET)")

# WordNet 3.0 `lexnames`: file number, lexicographer file name, syntactic category (1 noun, 2 verb, 3 adj, 4 adv)
_LEXNAMES = """adj.all 3|adj.pert 3|adv.all 4|noun.Tops 1|noun.act 1|noun.animal 1|noun.artifact 1|noun.attribute 1|
noun.body 1|noun.cognition 1|noun.communication 1|noun.event 1|noun.feeling 1|noun.food 1|noun.group 1|
noun.location 1|noun.motive 1|noun.object 1|noun.person 1|noun.phenomenon 1|noun.plant 1|noun.possession 1|
noun.process 1|noun.quantity 1|noun.relation 1|noun.shape 1|noun.state 1|noun.substance 1|noun.time 1|verb.body 2|
verb.change 2|verb.cognition 2|verb.communication 2|verb.competition 2|verb.consumption 2|verb.contact 2|
verb.creation 2|verb.emotion 2|verb.motion 2|verb.perception 2|verb.possession 2|verb.social 2|verb.stative 2|
verb.weather 2|adj.ppl 3"""
LEXNAMES = "".join(f"{i:02d}\t{name}\t{cat}\n" for i, entry in enumerate(_LEXNAMES.replace("\n", "").split("|"))
                   for name, cat in [entry.split()])

# the characters EDA keeps in a synonym (after lower-casing and turning '_' and '-' into spaces)
_SYNONYM_CHARS = frozenset(" qwertyuiopasdfghjklzxcvbnm")


def _is_wordnet_dir(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in REQUIRED_FILES)


def candidate_locations(path: str | os.PathLike | None = None) -> list[str]:
    """Where WordNet is looked for, in order (an explicit path is the only candidate)."""
    if path:
        return [str(path)]
    found = []
    for var in (ENV_VAR, "WNSEARCHDIR"):
        if os.environ.get(var):
            found.append(os.environ[var])
    try:
        import nltk.data

        for root in nltk.data.path:
            found += [os.path.join(root, "corpora", "wordnet"), os.path.join(root, "corpora", "wordnet.zip")]
    except ImportError:
        pass
    return found + list(SYSTEM_DIRS)


def locate(path: str | os.PathLike | None = None) -> str | None:
    """The first WordNet data folder (or NLTK wordnet.zip) found, or None."""
    for cand in candidate_locations(path):
        p = Path(cand).expanduser()
        if p.suffix == ".zip" and p.is_file():
            return str(p)
        if _is_wordnet_dir(p):
            return str(p)
        if _is_wordnet_dir(p / "dict"):  # a WordNet release folder
            return str(p / "dict")
    return None


def missing_reason(path: str | os.PathLike | None = None) -> str | None:
    """None when WordNet data is found, else a one-line reason with the install hint."""
    import importlib.util

    if importlib.util.find_spec("nltk") is None:  # installed? (importing it takes ~1 s, planning must not)
        return "the word-level types need nltk: pip install nltk"
    if locate(path) is None:
        where = candidate_locations(path)
        shown = ", ".join(where[:4]) + (f" (+{len(where) - 4} more)" if len(where) > 4 else "")
        return f"WordNet data not found at {shown}: {INSTALL_HINT}"
    return None


class WordNet:
    """Synonyms as EDA computes them, memoised per word."""

    def __init__(self, location: str):
        self.location = location
        self.reader = _open_reader(location)
        self._synonyms: dict[str, tuple[str, ...]] = {}
        self._pos: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def parts_of_speech(self, word: str) -> frozenset[str]:
        """The parts of speech WordNet's index lists `word` under (NLTK's morphy finds inflected forms: "moves" ->
        move): a subset of {"n", "v", "a", "r"} (satellite adjectives count as "a"); empty for words WordNet does
        not hold (articles, prepositions, conjunctions, pronouns). A lookup, not a tagger: the word's use in a
        sentence is not considered."""
        got = self._pos.get(word)
        if got is None:
            got = frozenset("a" if s.pos() == "s" else s.pos() for s in self.reader.synsets(word))
            with self._lock:
                self._pos[word] = got
        return got

    def synonyms(self, word: str) -> tuple[str, ...]:
        """EDA's synonym set of `word`, sorted (the caller imposes the set order, see `set_order`): every lemma of
        every synset of the word in any part of speech (NLTK lower-cases the word and lemmatises it with morphy;
        no POS tagging), '_' and '-' turned into spaces, lower-cased, characters other than a-z and space dropped,
        minus the word itself."""
        got = self._synonyms.get(word)
        if got is None:
            found = set()
            for synset in self.reader.synsets(word):
                for lemma in synset.lemmas():
                    s = lemma.name().replace("_", " ").replace("-", " ").lower()
                    found.add("".join(c for c in s if c in _SYNONYM_CHARS))
            found.discard(word)
            got = tuple(sorted(found))
            with self._lock:
                self._synonyms[word] = got
        return got


def set_order(items: Iterable[str], key: int) -> list[str]:
    """The iteration order of a Python set of strings, made reproducible.

    EDA iterates sets (`list(set(...))`): the order depends on the process's string-hash seed, so it is a fixed
    pseudo-random permutation within one run and another one in the next run. We emulate that with a keyed hash: the
    same `key` (the caption's seed) always gives the same permutation, and a word's synonym list has the same order in
    every attempt of a caption, as it had within one run of the authors' script."""
    k = key.to_bytes(8, "little", signed=False)
    return sorted(items, key=lambda s: hashlib.blake2b(s.encode(), digest_size=8, key=k).digest())


_READERS: dict[str, object] = {}
_READERS_LOCK = threading.Lock()


def load(path: str | os.PathLike | None = None) -> WordNet:
    """The WordNet at `path` (or found by `locate`), opened once per process; a ValueError with the install hint if
    there is none."""
    location = locate(path)
    if location is None:
        raise ValueError(missing_reason(path))
    with _READERS_LOCK:
        if location not in _READERS:
            _READERS[location] = WordNet(location)
        return _READERS[location]


def _open_reader(location: str):
    import nltk.data
    from nltk.corpus.reader.wordnet import WordNetCorpusReader
    from nltk.data import ZipFilePathPointer

    class _Reader(WordNetCorpusReader):
        def open(self, file):
            if file == "lexnames":
                try:
                    return super().open(file)
                except (OSError, LookupError):
                    return io.StringIO(LEXNAMES)
            return super().open(file)

        def map_wn(self, version="wordnet"):
            # the synset map to another WordNet version serves only multilingual (OMW) lookups, and building it
            # would look for NLTK's own `wordnet` corpus
            return None

    # NLTK >= 3.10 opens corpus files only below a folder of its data path: authorise this one (its documented way)
    folder = os.path.dirname(location) if location.endswith(".zip") else location
    if folder not in nltk.data.path:
        nltk.data.path.append(folder)
    root = ZipFilePathPointer(location, "wordnet/") if location.endswith(".zip") else location
    with warnings.catch_warnings():  # "multilingual functions are not available": no OMW data is wanted here
        warnings.simplefilter("ignore")
        return _Reader(root, None)
