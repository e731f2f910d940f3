import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

# nothing is downloaded in tests; Ray stays on loopback
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# one compute thread per process: the test process, Ray workers and the synthetic generator share 2 cores, and
# oversubscribed torch/OpenMP threads made the suite ~15x slower on a loaded machine
os.environ.setdefault("OMP_NUM_THREADS", "1")
# every trial the tests run calls tests/fault_injection.py's hook before it runs (a no-op unless a test sets its
# MLVP_TEST_FAULT_* variables): the trial hook of docs/testing.md, set in the environment that the CLI processes
# and the Ray workers inherit, with this folder on their import path
# (the repository's root first: CLI processes and workers import this checkout's code, whichever is installed)
TESTS = str(Path(__file__).resolve().parent)
REPO = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join([REPO, TESTS, *[p for p in os.environ.get("PYTHONPATH", "").split(
    os.pathsep) if p and p not in (REPO, TESTS)]])
os.environ.setdefault("MLVP_TRIAL_HOOK", "fault_injection:before_trial")

import torch  # noqa: E402

torch.set_num_threads(1)

# The Ctrl-C tests (tests/test_faults.py, tests/test_interrupts.py) send SIGINT to processes they start. A shell
# starts a background job (`cmd &`, nohup) with SIGINT ignored, every process under it inherits that, and Python
# leaves an ignored SIGINT ignored: the CLI then ran on, as the POSIX convention for background jobs wants. The tests
# need it delivered, so the test processes take it back (a handled signal reaches an exec'd child as the default).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Tiers (docs/testing.md): every test is in exactly one. A file or test names its tier with a marker; an unmarked
# test is `unit`, and a test marked only `slow` (the old marker, still accepted) is `integration`. Every tier but
# `unit` also carries `slow`, so `-m "not slow"` and `-m unit` select the same tests.
TIERS = ("unit", "integration", "e2e", "faults", "cluster", "browser")

# Files that share a session fixture run in one pytest-xdist worker: each worker builds its own session fixtures, and
# tiny_results (a whole submission) was made twice when the report and browser tests landed on different workers.
# The README's test command distributes by `xdist_group` (`--dist loadgroup`); every test's group is its file, or
# the file it maps to here. tests/test_readme.py checks that every file using tiny_results is listed here.
SAME_WORKER = {"tests/test_report_browser.py": "tests/test_report.py"}


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    for item in items:
        tiers = [t for t in TIERS if item.get_closest_marker(t) is not None]
        if len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid}: in tiers {tiers}; a test is in one tier (docs/testing.md)")
        if not tiers:
            item.add_marker("integration" if item.get_closest_marker("slow") else "unit")
        elif tiers[0] != "unit" and item.get_closest_marker("slow") is None:
            item.add_marker("slow")
        if item.get_closest_marker("xdist_group") is None:   # a test may name its own group (tests/test_benchmarks.py)
            path = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(SAME_WORKER.get(path, path)))


# One local Ray per pytest-xdist worker for the in-process submissions that need nothing of a Ray of their own
# (orchestrator/run/submit.py `Submission` joins a Ray its process has and leaves it running): each saves Ray's start
# and stop, ~12 s and ~11 CPU-s (docs/notes/2026-11-29-suite-time.md). A test asks for it with the `worker_ray`
# fixture; before any other test a Ray left in the process is shut down, so a test that starts or joins its own (its
# CPUs, its dashboard, its environment variables reaching the workers) never finds the shared one.
WORKER_RAY = {"gcs": None}


def ensure_worker_ray() -> None:
    """The worker's shared Ray, started as `submit` starts a local one (2 CPUs, no dashboard) where the process has
    none, or has another test's."""
    import ray

    from orchestrator.run import ray_env

    if ray.is_initialized() and ray.get_runtime_context().gcs_address == WORKER_RAY["gcs"]:
        return
    ray_env.stop_ray()
    ray_env.start_ray(num_cpus=2, dashboard=False)
    WORKER_RAY["gcs"] = ray.get_runtime_context().gcs_address


@pytest.fixture
def worker_ray() -> None:
    ensure_worker_ray()


@pytest.fixture(autouse=True)
def _no_shared_ray_unless_asked(request):
    if "worker_ray" not in request.fixturenames and "ray" in sys.modules:
        from orchestrator.run import ray_env

        ray_env.stop_ray()
        WORKER_RAY["gcs"] = None
    yield


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


def plan_unrun(folder: Path, shared_cache: Path, name: str):
    """The plan of a 6-trial grid (clean + gaussian_noise 1 and 5, Source and Tent, clip4clip), built from a dict
    and not run: for tests that write its ledger themselves (tests/test_tracking.py, tests/test_outputs.py). The
    grid file holds only its name (the parent run logs the file's text)."""
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    grid_file = folder / f"{name}.yaml"
    grid_file.write_text(f"name: {name}\n")
    grid = parse_grid({"name": name, "models": {"clip_model": "mlvp-micro"},
                       "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
                       "backbones": ["clip4clip"], "methods": ["source", "tent"],
                       "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise"],
                                       "severities": [1, 5]}}, str(grid_file))
    return build_plan(grid, Paths.make(folder / "results", shared_cache))


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One cache (synthetic data, micro checkpoints, renders) for the whole session: built once, reused."""
    return tmp_path_factory.mktemp("mlvp-cache")


def private_cache(path: Path, shared_cache: Path, share=("datasets", "models", "gallery")) -> Path:
    """A cache at `path` of its own (renders, prepared assets) whose `share` folders are the session cache's (linked,
    so what one test generates or fine-tunes, every later one reuses): for tests that corrupt or count renders."""
    path.mkdir(parents=True, exist_ok=True)
    for sub in share:
        (shared_cache / sub).mkdir(parents=True, exist_ok=True)
        os.symlink(shared_cache / sub, path / sub)
    return path


# -- the five real datasets' annotation layouts, tiny stand-ins (a stand-in video file each): enough to plan a grid
N_TEST = {"msrvtt": 4, "activitynet": 3, "lsmdc": 2, "msvd": 2, "didemo": 3}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def stand_in_weights(path: Path) -> Path:
    """A small file in the weights format (torch.save's zip) that planning digests and no trial loads: what a grid's
    `models.pretrained` names before the real weights are there."""
    torch.save({"stand-in": torch.zeros(1)}, path)
    return path


def stand_in_data(root: Path) -> None:
    """The annotation files each loader reads, in the authors' layouts, with N_TEST test pairs."""
    n = N_TEST
    _write(root / "MSRVTT/MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id,sentence\n" + "".join(
        f"ret{i},msr{i},video{i},caption {i}\n" for i in range(n["msrvtt"])))
    _write(root / "MSRVTT/MSRVTT_train.9k.csv", "video_id\nvideo100\n")
    _write(root / "MSRVTT/MSRVTT_data.json", json.dumps({"sentences": [{"caption": "train", "video_id": "video100"}]}))
    anno = "".join(json.dumps({"clip_id": f"v_{i}", "text": f"paragraph {i}."}) + "\n"
                   for i in range(n["activitynet"]))
    _write(root / "ActivityNet/val1_anno.jsonl", anno)
    _write(root / "ActivityNet/train_anno.jsonl", json.dumps({"clip_id": "v_t", "text": "train."}) + "\n")
    rows = "".join(f"0001_Movie_00.00.0{i}.000-00.00.0{i}.900\t0\t1\t0\t1\tSomeone acts {i}.\n"
                   for i in range(n["lsmdc"]))
    _write(root / "LSMDC/LSMDC16_challenge_1000_publictect.csv", rows)
    _write(root / "LSMDC/LSMDC16_annos_training.csv", rows.splitlines()[0] + "\n")
    _write(root / "MSVD/captions_msvd.json", json.dumps({f"vid{i}": [f"first {i}", f"second {i}"] for i in range(5)}))
    _write(root / "MSVD/test_list.txt", "".join(f"vid{i}\n" for i in range(n["msvd"])))
    _write(root / "MSVD/train_list.txt", "vid4\n")
    _write(root / "DiDeMo/test_anno.jsonl", "".join(json.dumps({"clip_id": f"d{i}@N00", "text": f"moment {i}."}) + "\n"
                                                     for i in range(n["didemo"])))
    _write(root / "DiDeMo/train_anno.jsonl", json.dumps({"clip_id": "t@N00", "text": "train."}) + "\n")


FOLDERS = {"msrvtt": "MSRVTT", "activitynet": "ActivityNet", "lsmdc": "LSMDC", "msvd": "MSVD", "didemo": "DiDeMo"}


def stand_in_videos(root: Path) -> None:
    """A video file at every path the stand-in splits name (hard links to one tiny H.264 clip): planning checks that
    the videos exist (orchestrator/planning/plan.py missing_videos)."""
    import numpy as np

    from workloads.datasets import create_dataset
    from workloads.video_io import write_mp4

    source = root / "stand_in.mp4"
    write_mp4(source, np.full((4, 16, 16, 3), 128, np.uint8))
    for name, folder in FOLDERS.items():
        ds = create_dataset(name, root=root / folder)
        for split in (ds.test_split(), ds.train_split()):
            for pair in split.pairs:
                path = Path(pair.video_path)
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.hardlink_to(source)


@pytest.fixture
def mlvp_env(tmp_path, monkeypatch):
    stand_in_data(tmp_path / "data")
    stand_in_videos(tmp_path / "data")
    weights = tmp_path / "clip_vit_b32.bin"
    stand_in_weights(weights)
    monkeypatch.setenv("MLVP_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("MLVP_WEIGHTS", str(weights))
    return tmp_path


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory, shared_cache):
    """One submission of a 10-trial grid (clean + 2 types x 2 severities, Source and Tent, one backbone), shared by
    the report and browser tests (tests/test_report*.py)."""
    from types import SimpleNamespace

    from orchestrator.config.grid import load_grid
    from orchestrator.record.ledger import TrialLedger
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import submit

    ensure_worker_ray()
    root = tmp_path_factory.mktemp("report")
    grid = write_micro_grid(root / "tiny.yaml", name="tiny", backbones="[clip4clip]", methods="[source, tent]",
                            perturbations="[gaussian_noise, fog]", severities="[1, 5]")
    report = submit(str(grid), SubmitOptions(results_dir=str(root / "results"), cache_dir=str(shared_cache),
                                             num_cpus=2, dashboard=False))
    assert report.ok == 10 and report.failed == 0
    plan = build_plan(load_grid(grid), Paths.make(root / "results", shared_cache))
    return SimpleNamespace(root=root, grid=grid, results=root / "results", cache=shared_cache, report=report,
                           plan=plan, entries={e["key"]: e for e in TrialLedger(root / "results" / "ledger").entries(
                               t.key for t in plan.trials)})


# -- a real `mlflow server` on loopback (tests/test_mlflow_server.py, test_report_browser.py, test_faults.py) ------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_server(backend_uri: str, log: Path, port: int, artifact_root: Path | None = None,
                        timeout: float = 120) -> subprocess.Popen:
    """`mlflow server` in its own session (so its gunicorn/uvicorn workers stop with it), serving `backend_uri` on
    127.0.0.1:`port`; returns once /health answers (the test fails with the server's log if it never does)."""
    args = [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri", backend_uri,
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    if artifact_root is not None:
        args += ["--default-artifact-root", str(artifact_root)]
    proc = subprocess.Popen(args, stdout=open(log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            stop_mlflow_server(proc)
            pytest.fail(f"mlflow server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)


def stop_mlflow_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # the server's own session: its workers too
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
