"""The software a result was made with: this project's version and the installed versions of the libraries it runs
on, read from the packages' metadata (nothing imported), plus the CUDA build and the GPU where torch is already
loaded. `mlvp --version` prints them; every trial records them in its environment (workloads/trial.py)."""
from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version

PROJECT = "mlvp-orchestrator"
LIBRARIES = {"torch": "torch", "torchvision": "torchvision", "open_clip": "open_clip_torch", "ray": "ray",
             "mlflow": "mlflow", "numpy": "numpy", "pyav": "av"}


def installed(distribution: str) -> str:
    """The installed version of a distribution, or "not installed"."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def software_versions(with_cuda: bool | None = None) -> dict[str, str]:
    """project, python and each library's version; with `with_cuda` (default: when torch is already imported) also
    torch's CUDA build and the first GPU torch sees (importing torch takes ~1 s)."""
    out = {"mlvp": installed(PROJECT), "python": platform.python_version()}
    out.update({name: installed(dist) for name, dist in LIBRARIES.items()})
    if with_cuda is None:
        with_cuda = "torch" in sys.modules
    if with_cuda:
        try:
            import torch

            out["cuda"] = torch.version.cuda or "none (CPU build)"
            out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none visible"
        except ImportError:
            out["cuda"] = "torch not installed"
    return out
