import os
import textwrap
from pathlib import Path

import pytest

# nothing is downloaded in tests; Ray stays on loopback
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# one compute thread per process: the test process, Ray workers and the synthetic generator share 2 cores, and
# oversubscribed torch/OpenMP threads made the suite ~15x slower on a loaded machine
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

MICRO_GRID = """
name: {name}
seed: 0
datasets:
  synthetic: {{options: {{n_train: 96, n_test: 40, size: 32}}}}
models:
  clip_model: mlvp-micro
  finetune: {{steps: 12, batch_size: 32, xpool_steps: 6, precision: fp32}}
backbones: {backbones}
methods: {methods}
query_shift:
  datasets: [synthetic]
  directions: {directions}
  perturbations: {perturbations}
  severities: {severities}
  clean: true
runtime:
  cpus_per_trial: 1
"""


def write_micro_grid(path: Path, name="micro", backbones="[clip4clip, xpool]", methods="[source, tent]",
                     directions="[v2t]", perturbations="[gaussian_noise, impulse_noise]", severities="[1, 5]",
                     extra: str = "") -> Path:
    path.write_text(MICRO_GRID.format(name=name, backbones=backbones, methods=methods, directions=directions,
                                      perturbations=perturbations, severities=severities) + textwrap.dedent(extra))
    return path


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One cache (synthetic data, micro checkpoints, renders) for the whole session: built once, reused."""
    return tmp_path_factory.mktemp("mlvp-cache")
