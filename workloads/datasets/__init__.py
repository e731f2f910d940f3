"""Datasets by name: `create_dataset(name, root=..., **options)`."""
from workloads.datasets.base import (  # noqa: F401
    DATASETS,
    DatasetError,
    Split,
    VideoTextDataset,
    VideoTextPair,
    create_dataset,
    register_dataset,
)
