"""Datasets by name: `create_dataset(name, root=..., **options)`; every module of this package registers its own
(`DATASETS` is the only list of names, loaded on first use).

Registered: msrvtt, msvd, lsmdc, activitynet, didemo (annotation files of the real datasets, docs/faithfulness.md:
Datasets) and
synthetic / synthetic_b (the embedded default, generated on first use; see workloads.datasets.synthetic)."""
from workloads.datasets.base import (  # noqa: F401
    DATASETS,
    AnnotatedDataset,
    DatasetError,
    Split,
    VideoTextDataset,
    VideoTextPair,
    create_dataset,
    missing_video_report,
    register_dataset,
)
from workloads.datasets.synthetic import SyntheticConfig, generate  # noqa: F401,E402
