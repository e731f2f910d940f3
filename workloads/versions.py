"""The software a result was made with: this project's version and the installed versions of the libraries it runs
on, read from the packages' metadata (nothing imported: `workloads` never imports Ray or MLflow, docs/architecture.md),
plus the CUDA build and the GPU where torch is already loaded. `mlvp --version` prints them; every trial records the
same keys in its environment (workloads/trial.py `_environment`: its own GPU rather than the first one, none on a
CPU), and tests/test_console_terminal.py checks a submission's ledger entries against them."""
from __future__ import annotations

import functools
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

PROJECT = "mlvp-orchestrator"
LIBRARIES = {"torch": "torch", "torchvision": "torchvision", "open_clip": "open_clip_torch", "ray": "ray",
             "mlflow": "mlflow", "numpy": "numpy", "pyav": "av"}


@functools.lru_cache(maxsize=None)
def installed(distribution: str) -> str:
    """The installed version of a distribution, or "not installed". Read once per process (a trial worker runs many
    trials, and reading a package's metadata walks the import path)."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def software_versions(with_cuda: bool | None = None, gpu: bool = True) -> dict[str, str]:
    """project, python and each library's version; with `with_cuda` (default: when torch is already imported) also
    torch's CUDA build and, with `gpu`, the first GPU torch sees (importing torch takes ~1 s; naming a GPU starts
    CUDA, which a trial on a CPU must not do)."""
    out = {"mlvp": installed(PROJECT), "python": platform.python_version()}
    out.update({name: installed(dist) for name, dist in LIBRARIES.items()})
    if with_cuda is None:
        with_cuda = "torch" in sys.modules
    if with_cuda:
        try:
            import torch

            out["torch"] = str(torch.__version__)   # with its local label (2.14.1+cu130), which the metadata lacks
            out["cuda"] = torch.version.cuda or "none (CPU build)"
            if gpu:
                out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none visible"
        except ImportError:
            out["cuda"] = "torch not installed"
    return out
