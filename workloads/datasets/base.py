"""What a video-text dataset is to the rest of the project: splits of (video_id, caption, video_path) pairs in
annotation order (the query order of online TTA), each with a fingerprint of its content."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

from workloads.seeding import digest


@dataclass(frozen=True)
class VideoTextPair:
    video_id: str
    caption: str
    video_path: str


@dataclass(frozen=True)
class Split:
    """One split. Test splits hold one caption per video (the TTA protocol of every MLVP dataset, s5); train splits
    may repeat a video once per caption. `fingerprint` covers ids, captions and order, not paths, so a dataset moved
    to another disk keeps its cache keys."""

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

    def describe(self) -> dict:
        """JSON-able identity of this dataset for records (not for cache keys: use split fingerprints)."""
        return {"name": self.name, "root": self.root, **self.options}


DATASETS: dict[str, type[VideoTextDataset]] = {}


def register_dataset(name: str) -> Callable[[type[VideoTextDataset]], type[VideoTextDataset]]:
    def wrap(cls: type[VideoTextDataset]) -> type[VideoTextDataset]:
        if name in DATASETS:
            raise ValueError(f"dataset {name!r} registered twice")
        cls.name = name
        DATASETS[name] = cls
        return cls

    return wrap


def create_dataset(name: str, root: str | None = None, **options) -> VideoTextDataset:
    """Build a registered dataset by name; unknown names fail with the list of known ones."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}")
    return DATASETS[name](root=root, **options)
