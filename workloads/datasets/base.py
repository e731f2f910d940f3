"""What a video-text dataset is to the rest of the project: splits of (video_id, caption, video_path) pairs in
annotation order (the query order of online TTA), each with a fingerprint of its content."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Sequence

from workloads.options import Option, OptionError
from workloads.registry import Registry
from workloads.seeding import digest


@dataclass(frozen=True)
class VideoTextPair:
    video_id: str
    caption: str
    video_path: str


@dataclass(frozen=True)
class Split:
    """One split. Test splits hold one caption per video (the authors' TTA protocol on every MLVP dataset) unless a
    dataset option asks for every caption (MSVD `captions: all`); train splits may repeat a video once per caption.
    `fingerprint` covers ids, captions and order, not paths, so a dataset moved to another disk keeps its cache
    keys."""

    dataset: str
    name: str
    pairs: tuple[VideoTextPair, ...]
    fingerprint: str = field(default="")

    def __post_init__(self):
        if not self.fingerprint:
            fp = digest([self.dataset, self.name, [(p.video_id, p.caption) for p in self.pairs]])
            object.__setattr__(self, "fingerprint", fp)

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def video_ids(self) -> list[str]:
        return [p.video_id for p in self.pairs]

    @property
    def captions(self) -> list[str]:
        return [p.caption for p in self.pairs]


class DatasetError(ValueError):
    """A dataset's files are missing or malformed; the message names the file and what to do."""


class VideoTextDataset:
    """Base class of registered datasets. Subclasses set `name` and implement `test_split` / `train_split`."""

    name: ClassVar[str] = ""
    # file extension of videos, for messages and for building paths
    video_ext: ClassVar[str] = ".mp4"

    def __init__(self, root: str | None = None, **options):
        self.root = root
        self.options = options

    def test_split(self) -> Split:
        raise NotImplementedError

    def train_split(self) -> Split:
        raise DatasetError(f"dataset {self.name!r} has no train split configured")

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Raise DatasetError (one line) for an unknown or invalid option, before any file is read: grids call it
        when they load."""

    def describe(self) -> dict:
        """JSON-able identity of this dataset for records (not for cache keys: use split fingerprints)."""
        return {"name": self.name, "root": self.root, **self.options}

    def split(self, name: str) -> Split:
        """`split("test")` / `split("train")`."""
        if name == "test":
            return self.test_split()
        if name == "train":
            return self.train_split()
        raise DatasetError(f"dataset {self.name!r} has no split {name!r}; splits are 'test' and 'train'")

    def missing_videos(self, split: Split | str = "test") -> list[str]:
        """Ids (in split order, each once) of the split's videos whose file does not exist. Loaders never check
        this themselves: a missing video fails that video's renders, not the whole grid."""
        if isinstance(split, str):
            split = self.split(split)
        seen: set[str] = set()
        missing: list[str] = []
        for pair in split.pairs:
            if pair.video_id in seen:
                continue
            seen.add(pair.video_id)
            if not os.path.isfile(pair.video_path):
                missing.append(pair.video_id)
        return missing


def missing_video_report(dataset: VideoTextDataset, split: str = "test", show: int = 10) -> str | None:
    """One line for a plan: how many of the split's videos have no file, with the first `show` ids and paths
    (all at once, so a user fixes the data in one go); None when every video is there."""
    s = dataset.split(split)
    missing = dataset.missing_videos(s)
    if not missing:
        return None
    path_of = {p.video_id: p.video_path for p in s.pairs}
    n_videos = len({p.video_id for p in s.pairs})
    first = ", ".join(f"{vid} ({path_of[vid]})" for vid in missing[:show])
    more = f", ... ({len(missing) - show} more)" if len(missing) > show else ""
    return (f"dataset {dataset.name!r}: {len(missing)} of {n_videos} {split} videos missing: {first}{more}")


DATASETS = Registry("dataset", package="workloads.datasets", decorators=("register_dataset",))
register_dataset = DATASETS.register


def create_dataset(name: str, root: str | None = None, **options) -> VideoTextDataset:
    """Build a registered dataset by name; unknown names fail with the list of known ones."""
    return DATASETS.lookup(name)(root=root, **options)


# --------------------------------------------------------------------------------------------------------------
# Annotation-file datasets: shared option handling, path rules and readers that fail with file:line messages.


class AnnotatedDataset(VideoTextDataset):
    """A dataset read from annotation files under `root`. Subclasses declare their options with defaults in
    `option_defaults` (unknown options are an error, so a typo never silently falls back to a default), say in
    `provide` what the user must put under root, and implement `_load_test` / `_load_train` returning pairs.

    Relative file options are resolved against root; absolute ones are used as given. Videos live in
    `{root}/{videos_dir}` (option, default "videos"). Splits are parsed once per instance."""

    # a loader lists its own options as {**AnnotatedDataset.option_defaults, ...}: every loader has these two
    option_defaults: ClassVar[dict[str, Any]] = {"videos_dir": "videos", "video_ext": None}
    option_choices: ClassVar[dict[str, tuple]] = {}   # options with a closed set of values
    # one sentence: what must be under root and where to get it (used in error messages)
    provide: ClassVar[str] = ""

    def __init__(self, root: str | os.PathLike | None = None, **options):
        self.check_options(options)
        super().__init__(root=None if root is None else os.fspath(root), **options)
        self._splits: dict[str, Split] = {}
        self._videos_dir: Path | None = None

    @classmethod
    def option_specs(cls) -> dict[str, Option]:
        """The options as typed Options (workloads/options.py): the kind of each default, its choices where it has
        some; options without a typed default (null, lists) are taken as given and checked where they are used."""
        specs = {}
        for key, default in cls.option_defaults.items():
            kind = type(default)
            if kind in (bool, int, float, str):
                specs[key] = Option(kind, default, choices=cls.option_choices.get(key))
        return specs

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(cls.option_defaults))
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], list(cls.option_defaults), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise DatasetError(f"dataset {cls.name!r}: unknown option(s) {', '.join(unknown)}{hint}; "
                               f"known options: {', '.join(sorted(cls.option_defaults))}")
        specs = cls.option_specs()
        for key, value in options.items():
            if key in specs:
                try:
                    specs[key].check(key, value, owner=f"dataset {cls.name!r}")
                except OptionError as err:
                    raise DatasetError(str(err)) from None

    # -- options and paths ------------------------------------------------------------------------------------
    def option(self, key: str) -> Any:
        return self.options.get(key, self.option_defaults[key])

    @property
    def data_dir(self) -> Path:
        """The dataset's root directory; DatasetError when not given or absent."""
        if self.root is None:
            raise DatasetError(f"dataset {self.name!r} needs root=<directory>: {self.provide}")
        root = Path(os.path.abspath(os.path.expanduser(self.root)))
        if not root.is_dir():
            raise DatasetError(f"dataset {self.name!r}: root directory {root} does not exist; {self.provide}")
        return root

    def prepare(self) -> Path:
        """Make the dataset usable (check the root exists; the synthetic dataset generates here) -> its root."""
        return self.data_dir

    def path(self, name: str | os.PathLike) -> Path:
        p = Path(os.path.expanduser(os.fspath(name)))
        return p if p.is_absolute() else self.data_dir / p

    def annotation_file(self, option_key: str, what: str = "", name: str | None = None) -> Path:
        """The file named by option `option_key` (or `name` when given, the option's derived default);
        DatasetError naming it (and what to provide) when absent."""
        name = name or self.option(option_key)
        if not name:
            raise DatasetError(f"dataset {self.name!r}: option {option_key!r} is not set")
        path = self.path(name)
        if not path.is_file():
            detail = f" ({what})" if what else ""
            raise DatasetError(f"dataset {self.name!r}: annotation file {path}{detail} not found; {self.provide} "
                               f"(or point option {option_key}= at the file)")
        return path

    @property
    def videos_dir(self) -> Path:
        # resolved once: every pair's video path starts here, and resolving it checks the root on disk (MSRVTT-9k's
        # 180,000 train pairs spent 7 CPU s in those checks, benchmarks/dress_rehearsal.py)
        if self._videos_dir is None:
            self._videos_dir = self.path(self.option("videos_dir"))
        return self._videos_dir

    def video_path(self, video_id: str) -> str:
        ext = self.option("video_ext")
        ext = self.video_ext if ext is None else ext
        return str(self.videos_dir / f"{video_id}{ext}")

    # -- splits -----------------------------------------------------------------------------------------------
    def test_split(self) -> Split:
        return self._cached_split("test", self._load_test)

    def train_split(self) -> Split:
        return self._cached_split("train", self._load_train)

    def _cached_split(self, name: str, load: Callable[[], list[VideoTextPair]]) -> Split:
        if name not in self._splits:
            pairs = load()
            if not pairs:
                raise DatasetError(f"dataset {self.name!r}: the {name} split is empty; check its annotation file "
                                   f"({self.provide})")
            self._splits[name] = self._make_split(name, pairs)
        return self._splits[name]

    def _make_split(self, name: str, pairs: Sequence[VideoTextPair]) -> Split:
        return Split(dataset=self.name, name=name, pairs=tuple(pairs))

    def _load_test(self) -> list[VideoTextPair]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _load_train(self) -> list[VideoTextPair]:
        raise DatasetError(f"dataset {self.name!r} has no train split configured")

    def pair(self, video_id: str, caption: str) -> VideoTextPair:
        return VideoTextPair(video_id=video_id, caption=caption, video_path=self.video_path(video_id))


# -- readers ------------------------------------------------------------------------------------------------------

def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err})") from err
    except OSError as err:
        raise DatasetError(f"{path}: cannot read ({err})") from err


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline) for every non-blank line."""
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            yield lineno, line.rstrip("\r\n")


def read_id_list(path: Path) -> list[tuple[int, str]]:
    """A list file of one id per line (blank lines skipped)."""
    out = []
    for lineno, line in iter_lines(path):
        item = line.strip()
        if len(item.split()) != 1:
            raise DatasetError(f"{path}:{lineno}: expected one id per line, got {line!r}")
        out.append((lineno, item))
    return out


def read_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}:{err.lineno}:{err.colno}: invalid JSON ({err.msg})") from err


def read_jsonl(path: Path, required: Sequence[str] = ()) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line; each must be a JSON object holding the `required` keys."""
    out = []
    for lineno, line in iter_lines(path):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DatasetError(f"{path}:{lineno}: invalid JSON ({err.msg} at column {err.colno})") from err
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in required if k not in obj]
        if missing:
            raise DatasetError(f"{path}:{lineno}: missing key(s) {', '.join(missing)} "
                               f"(each line must hold {', '.join(required)})")
        out.append((lineno, obj))
    return out


def text_field(value: Any, where: str, key: str) -> str:
    """A non-empty string field, stripped; DatasetError naming `where` (file:line) otherwise."""
    if not isinstance(value, str):
        raise DatasetError(f"{where}: {key} must be a string, got {type(value).__name__}")
    value = value.strip()
    if not value:
        raise DatasetError(f"{where}: empty {key}")
    return value
