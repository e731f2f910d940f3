"""Faults with real processes, each bounded in time (issue #14 item 6; README "Running on a cluster"): Ctrl-C, a
driver killed with SIGKILL then `resume`, injected worker crashes retried per `max_failures`, the `mlflow server`
stopped mid-run, truncated and zero-byte videos, the driver's crash callback, a disk that fills mid-run.

Every submission is a real `python -m orchestrator` process in its own session (so a signal reaches it and its local
Ray the way Ctrl-C in a terminal does), on the session's shared cache (dataset and micro checkpoints built once).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import free_port, start_mlflow_server, stop_mlflow_server, write_micro_grid
import fault_injection
from orchestrator.config.grid import load_grid
from orchestrator.record.ledger import TrialLedger
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.record.mlflow_store import default_tracking_uri

pytestmark = pytest.mark.faults

FAULT_VARS = {v: None for v in fault_injection.VARIABLES}


# -- helpers (tests/test_cluster.py uses them too) -------------------------------------------------------------------
def cli_env(**extra) -> dict:
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    for k in fault_injection.VARIABLES:
        env.pop(k, None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def start_cli(log: Path, *args, env=None) -> subprocess.Popen:
    """`python -m orchestrator ARGS` in its own session, stdout+stderr to `log`."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env=env or cli_env(), start_new_session=True)


def run_cli(*args, env=None, timeout=420) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env or cli_env(), timeout=timeout)


def library_log(results: Path) -> str:
    """The tail of the libraries' log of the submission (results/<grid>/logs/): where Python reports an exception it
    swallowed ("Exception ignored in ..."), since stderr goes there."""
    logs = sorted(results.glob("*/logs/*.log"))
    return ("\n-- " + str(logs[-1]) + "\n" + logs[-1].read_text()[-3000:]) if logs else ""


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    pytest.fail(f"timed out waiting for {what}\n{tail}")


def reap(proc: subprocess.Popen) -> None:
    """The submission's session (driver and its local Ray): gone, by its process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def ledger_files(results: Path) -> list[Path]:
    return sorted((results / "ledger").glob("*/*.json"))


def plan_of(grid_file: Path, results: Path, cache: Path):
    return build_plan(load_grid(grid_file), Paths.make(results, cache))


def parent_id(log: Path) -> str | None:
    for line in log.read_text().splitlines():
        if line.startswith("MLflow: parent run "):
            return line.split()[3]
    return None


def trial_runs(uri: str, grid_name: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(f"mlvp/{grid_name}")
    return client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'", max_results=1000)


def common(results: Path, cache: Path) -> list[str]:
    return ["--results-dir", str(results), "--cache-dir", str(cache)]


def grid(tmp: Path, name: str, methods="[source, tent]", extra="") -> Path:
    """A one-backbone micro grid: clean + gaussian noise 3 x `methods` (the session cache holds its data)."""
    return write_micro_grid(tmp / f"{name}.yaml", name=name, backbones="[clip4clip]", methods=methods,
                            perturbations="[gaussian_noise]", severities="[3]", extra=extra)


@pytest.fixture(scope="module")
def prepared(shared_cache, tmp_path_factory):
    """The shared cache with the micro dataset, the clip4clip checkpoint, the clean clips and gallery: one `check`
    (its time is the cost of the first test of the module in a fresh session; a submit would also run Tune)."""
    tmp = tmp_path_factory.mktemp("faults-prep")
    g = grid(tmp, "prep", methods="[source]")
    out = run_cli("check", str(g), *common(tmp / "results", shared_cache), "--num-cpus", "2")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return shared_cache


# -- Ctrl-C -----------------------------------------------------------------------------------------------------------
def test_sigint_exits_130_marks_parent_killed_and_points_to_resume(tmp_path, prepared):
    g = grid(tmp_path, "sigint", methods="[source, tent, sar, eata]")
    results, log = tmp_path / "results", tmp_path / "submit.log"
    proc = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    try:
        # Tune is running (parent run made) and a trial of it has reached the ledger: press Ctrl-C
        wait_for(lambda: parent_id(log), 240, "the MLflow parent run", proc, log)
        n0 = len(ledger_files(results))
        wait_for(lambda: len(ledger_files(results)) > n0, 240, "a first trial", proc, log)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=120)
    finally:
        reap(proc)
    out = log.read_text()
    assert rc == 130, out[-3000:] + library_log(results)
    assert "mlvp resume" in out and "Tuner.restore" not in out
    run = MlflowClient(default_tracking_uri(results)).get_run(parent_id(log))
    assert run.info.status == "KILLED"
    ledger = TrialLedger(results / "ledger")
    plan = plan_of(g, results, prepared)
    counts = ledger.counts(t.key for t in plan.trials)
    assert 0 < counts["ok"] < len(plan.trials) and counts["failed"] == 0   # nothing recorded as failed by Ctrl-C


def test_sigterm_is_handled_as_ctrl_c(tmp_path, prepared):
    """SIGTERM (what `timeout`, Slurm and Kubernetes send, to the driver alone) stops a submission as Ctrl-C does:
    finished trials in the ledger, the parent run KILLED, a non-zero exit, one line naming resume, and no stack
    dump of Ray's core on the console (Ray's own SIGTERM handler prints one)."""
    g = grid(tmp_path, "sigterm", methods="[source, tent, sar, eata]")
    results, log = tmp_path / "results", tmp_path / "submit.log"
    proc = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    try:
        wait_for(lambda: parent_id(log), 240, "the MLflow parent run", proc, log)
        n0 = len(ledger_files(results))
        wait_for(lambda: len(ledger_files(results)) > n0, 240, "a first trial", proc, log)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        reap(proc)
    out = log.read_text()
    assert rc == 143, out[-3000:]
    assert out.count("mlvp resume") == 1 and "stopped by SIGTERM" in out
    for dump in ("logging.cc", "CoreWorker", "Traceback", "*** SIGTERM"):
        assert dump not in out, (dump, out[-3000:])
    assert MlflowClient(default_tracking_uri(results)).get_run(parent_id(log)).info.status == "KILLED"
    counts = TrialLedger(results / "ledger").counts(t.key for t in plan_of(g, results, prepared).trials)
    assert counts["ok"] > 0 and counts["failed"] == 0


# -- kill -9 of the driver, then resume ------------------------------------------------------------------------------
def test_driver_killed_then_resume_records_each_cell_once(tmp_path, prepared):
    g = grid(tmp_path, "kill9", methods="[source, tent, sar, eata]")
    results, log = tmp_path / "results", tmp_path / "submit.log"
    plan = plan_of(g, results, prepared)
    proc = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    try:
        wait_for(lambda: parent_id(log), 240, "the MLflow parent run", proc, log)
        n0 = len(ledger_files(results))
        wait_for(lambda: len(ledger_files(results)) > n0, 240, "a first trial", proc, log)
        os.killpg(proc.pid, signal.SIGKILL)   # the driver and its local Ray, as when the machine dies
        proc.wait(timeout=60)
    finally:
        reap(proc)
    killed_parent = parent_id(log)
    ledger = TrialLedger(results / "ledger")
    before = {e["key"]: e for e in ledger.entries(t.key for t in plan.trials)}
    assert 0 < len(before) < len(plan.trials), "the kill must land mid-grid"

    out = run_cli("resume", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    entries = ledger.entries(t.key for t in plan.trials)
    assert len(entries) == len(plan.trials) and all(e["status"] == "ok" for e in entries)
    for e in entries:   # cells done before the kill were not run again; the others ran once, in the resume
        assert len(e["attempts"]) == 1
        if e["key"] in before:
            assert e["submission"] == before[e["key"]]["submission"]
    uri = default_tracking_uri(results)
    runs = trial_runs(uri, "kill9")
    keys = [r.data.tags["mlvp.trial_key"] for r in runs]
    assert sorted(keys) == sorted(t.key for t in plan.trials)    # each cell once in MLflow: none lost, none twice
    parent = MlflowClient(uri).get_run(killed_parent)
    assert parent.info.status == "KILLED" and "mlvp.closed_by" in parent.data.tags
    table = pq.read_table(results / "kill9" / "trials.parquet").to_pandas()
    assert len(table) == len(plan.trials) and table["key"].is_unique and set(table["status"]) == {"ok"}


# -- injected worker crashes ----------------------------------------------------------------------------------------
def _fault_seed(keys: list[str], rate: float, persistent: float, max_failures: int) -> str:
    """The first seed whose draws give these trials both a transient fault (retried, then ok) and a persistent one."""
    for seed in range(500):
        outcomes = [fault_injection.outcome(k, max_failures, rate, persistent, str(seed)) for k in keys]
        if any(ok and n > 1 for ok, n in outcomes) and any(not ok for ok, _ in outcomes):
            return str(seed)
    raise AssertionError("no seed gives both kinds of fault")


def test_injected_faults_are_retried_and_persistent_ones_listed_by_status(tmp_path, prepared):
    g = grid(tmp_path, "faulty", methods="[source, tent, sar, eata]")
    results = tmp_path / "results"
    plan = plan_of(g, results, prepared)
    max_failures = plan.grid.runtime.max_failures
    # the clean source trials `check` runs are ledger entries before Tune starts (no fault injected there)
    tune_keys = [t.key for t in plan.trials if not (t.method == "source" and t.perturbation == "clean")]
    rate = persistent = 0.1
    seed = _fault_seed(tune_keys, rate, persistent, max_failures)
    env = cli_env(MLVP_TEST_FAULT_RATE=str(rate), MLVP_TEST_FAULT_PERSISTENT=str(persistent),
                  MLVP_TEST_FAULT_SEED=seed, MLVP_TEST_FAULT_DIR=str(tmp_path / "attempts"))
    out = run_cli("submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard", env=env)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]   # some cells failed for good
    os.environ[fault_injection.DIR] = str(tmp_path / "attempts")
    try:
        ledger = TrialLedger(results / "ledger")
        failed = []
        for key in tune_keys:
            ok, attempts = fault_injection.outcome(key, max_failures, rate, persistent, seed)
            entry = ledger.get(key)
            assert fault_injection.attempts(key) == attempts, key   # Tune retried exactly per max_failures
            assert entry["status"] == ("ok" if ok else "failed"), key
            if not ok:
                assert "InjectedFault: injected fault (persistent" in entry["error"]
                failed.append(key)
    finally:
        del os.environ[fault_injection.DIR]
    status = run_cli("status", str(g), *common(results, prepared))
    assert status.returncode == (1 if failed else 0)   # `status` exits 1 while cells have failed (docs/ledger.md)
    assert f"{len(failed)} failed" in status.stdout
    for key in failed:
        line = next(ln for ln in status.stdout.splitlines() if key[:10] in ln)
        assert "injected fault (persistent" in line
    assert "mlvp resume" in status.stdout


# -- the driver's crash callback ------------------------------------------------------------------------------------
def test_on_trial_error_records_the_workers_error_in_the_ledger(tmp_path, shared_cache, monkeypatch):
    """Real Ray Tune: a worker that raises (after max_failures retries) reaches `on_trial_error`, and the driver's
    recorder writes it to the ledger as failed with the worker's own exception in one line."""
    import ray
    from rich.progress import Progress

    from orchestrator.run import ray_env
    from orchestrator.record.recorder import LiveRecorder
    from orchestrator.planning.environment import TrialEnvironment
    from orchestrator.run.tune import run_trials

    g = grid(tmp_path, "crash", methods="[tent]")
    plan = plan_of(g, tmp_path / "results", shared_cache)
    spec = next(t for t in plan.trials if t.perturbation != "clean")
    monkeypatch.setenv(fault_injection.PERSISTENT, "1")          # every attempt of every trial crashes
    monkeypatch.setenv(fault_injection.DIR, str(tmp_path / "attempts"))
    ledger = TrialLedger(tmp_path / "results" / "ledger")

    class NoStore:   # the MLflow side is tested elsewhere; here only the ledger path matters
        uri = "none"

        def log_trial_later(self, parent, grid_name, entry, on_logged, on_error):
            on_error(RuntimeError("no store"))

    progress = Progress()
    recorder = LiveRecorder(ledger, NoStore(), "parent", "crash", "sub-1", progress, progress.add_task("t", total=1))
    env = TrialEnvironment(render_cache=str(tmp_path), gallery_cache=str(tmp_path), scores_dir=None, checkpoints={},
                           datasets={}, use_gpu=False, threads=1, hook="fault_injection:before_trial")
    ray_env.start_ray(None, 1, dashboard=False)
    try:
        run_trials([spec], env, storage_path=str(tmp_path / "tune"), name="crash", cpus_per_trial=1,
                   gpus_per_trial=0, max_failures=1, max_concurrent=None, on_result=recorder.result,
                   on_crash=recorder.crash)
    finally:
        ray.shutdown()
    entry = ledger.get(spec.key)
    assert entry["status"] == "failed" and entry["submission"] == "sub-1"
    assert entry["error"].startswith("worker crashed: InjectedFault: injected fault (persistent, attempt 2)")
    assert "\n" not in entry["error"] and "Traceback" not in entry["error"]
    assert fault_injection.attempts(spec.key) == 2 and recorder.counts == {"ok": 0, "failed": 1}


# -- the tracking server goes away mid-run ----------------------------------------------------------------------------
def start_server(store: Path, port: int) -> subprocess.Popen:
    store.mkdir(exist_ok=True)
    return start_mlflow_server(f"sqlite:///{store / 'mlflow.db'}", store / "server.log", port,
                               artifact_root=store / "artifacts", timeout=90)


def test_mlflow_server_stopped_mid_run_then_sync_without_duplicates(tmp_path, prepared):
    g = grid(tmp_path, "srvdown", methods="[source, tent, sar, eata]")
    results, log, store, port = tmp_path / "results", tmp_path / "submit.log", tmp_path / "server", free_port()
    url = f"http://127.0.0.1:{port}"
    plan = plan_of(g, results, prepared)
    server = start_server(store, port)
    proc = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard",
                     "--tracking-uri", url)
    ledger = TrialLedger(results / "ledger")
    try:
        wait_for(lambda: parent_id(log), 240, "the MLflow parent run", proc, log)
        n0 = len(ledger_files(results))
        wait_for(lambda: len(ledger_files(results)) > n0, 240, "a first trial", proc, log)
        stop_mlflow_server(server)
        rc = proc.wait(timeout=300)
    finally:
        reap(proc)
        if server.poll() is None:
            stop_mlflow_server(server)
    out = log.read_text()
    assert rc == 0, out[-3000:]
    assert f"MLflow store {url} stopped answering" in out or f"MLflow store {url} not updated" in out
    assert "Traceback" not in out
    entries = ledger.entries(t.key for t in plan.trials)
    assert len(entries) == len(plan.trials) and all(e["status"] == "ok" for e in entries)
    assert any(url not in (e.get("mlflow_runs") or {}) for e in entries)   # some never reached the server

    server = start_server(store, port)   # back, same store
    try:
        out = run_cli("sync", str(g), *common(results, prepared), "--tracking-uri", url)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        keys = sorted(r.data.tags["mlvp.trial_key"] for r in trial_runs(url, "srvdown"))
        assert keys == sorted(t.key for t in plan.trials)          # each trial once in the store
        assert all(url in e["mlflow_runs"] for e in ledger.entries(t.key for t in plan.trials))
        again = run_cli("sync", str(g), *common(results, prepared), "--tracking-uri", url)
        assert again.returncode == 0 and len(trial_runs(url, "srvdown")) == len(plan.trials)
        # the submission's parent, left RUNNING when the server died, is closed by the next command that syncs
        parent = MlflowClient(url).get_run(parent_id(log))
        assert parent.info.status == "KILLED"
    finally:
        stop_mlflow_server(server)


# -- undecodable videos -----------------------------------------------------------------------------------------------
def test_truncated_and_empty_videos_fail_their_clips_and_resume_incomplete_reruns_them(tmp_path, prepared):
    # the generated dataset repairs its own files, so the damaged videos live in a real dataset's layout: a copy of
    # the synthetic split read as MSRVTT (its files are in MSRVTT's layout), with the micro checkpoint given as a file
    # (the module's micro dataset and checkpoint by their plan: the session cache may hold other tests' variants)
    prep = plan_of(grid(tmp_path, "prep", methods="[source]"), tmp_path / "prep", prepared)
    root = tmp_path / "MSRVTT"
    shutil.copytree(prep.datasets["synthetic"].dataset.location, root)
    checkpoint = prep.model_path(CheckpointKey("clip4clip", "synthetic"))
    assert checkpoint.is_file()
    g = tmp_path / "badvid.yaml"
    g.write_text(f"""
name: badvid
datasets:
  msrvtt: {{root: {root}}}
models:
  clip_model: mlvp-micro
  checkpoints: {{clip4clip: {{msrvtt: {checkpoint}}}}}
backbones: [clip4clip]
methods: [source]
query_shift: {{datasets: [msrvtt], directions: [v2t], perturbations: [gaussian_noise], severities: [3], clean: true}}
runtime: {{cpus_per_trial: 1}}
""")
    cache, results = tmp_path / "cache", tmp_path / "results"
    plan = plan_of(g, results, cache)
    pairs = plan.datasets["msrvtt"].test.pairs
    truncated, empty = Path(pairs[1].video_path), Path(pairs[2].video_path)
    originals = {p: p.read_bytes() for p in (truncated, empty)}
    truncated.write_bytes(originals[truncated][:len(originals[truncated]) // 3])
    empty.write_bytes(b"")
    # --force: the micro checkpoint is far below the paper's clean MSRVTT R@1 (`check` would refuse it)
    run = ("--num-cpus", "2", "--no-dashboard", "--force")

    out = run_cli("submit", str(g), *common(results, cache), *run)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for path in (truncated, empty):   # each failed clip is named with its video's path
        assert any("render failed" in ln and str(path) in ln for ln in out.stdout.splitlines()), out.stdout[-3000:]
    ledger = TrialLedger(results / "ledger")
    entries = ledger.entries(t.key for t in plan.trials)
    assert len(entries) == len(plan.trials) and all(e["status"] == "ok" for e in entries)   # the rest finished
    for e in entries:
        assert sorted(d["video_id"] for d in e["dropped"]) == sorted([pairs[1].video_id, pairs[2].video_id])
        assert e["n_queries"] == len(pairs) - 2

    status = run_cli("status", str(g), *common(results, cache))
    assert f"{len(plan.trials)} done cells ran with dropped queries" in status.stdout
    assert "resume" in status.stdout and "--incomplete" in status.stdout

    for path, data in originals.items():   # the videos are fixed
        path.write_bytes(data)
    out = run_cli("resume", str(g), *common(results, cache), "--incomplete", *run)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    entries = ledger.entries(t.key for t in plan.trials)
    assert all(e["status"] == "ok" and not e["dropped"] and e["n_queries"] == len(pairs) for e in entries)
    status = run_cli("status", str(g), *common(results, cache))
    assert "dropped queries" not in status.stdout


# -- the disk fills mid-run -------------------------------------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to fill ({out.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_disk_full_mid_run_one_line_per_write_ledger_and_tables_safe(tmp_path, prepared, small_tmpfs):
    g = grid(tmp_path, "diskfull", methods="[source, tent, sar, eata]")
    results, log = small_tmpfs / "results", tmp_path / "submit.log"
    plan = plan_of(g, results, prepared)
    proc = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    filler = small_tmpfs / "filler"
    try:
        wait_for(lambda: parent_id(log), 240, "the MLflow parent run", proc, log)
        n0 = len(ledger_files(results))
        wait_for(lambda: len(ledger_files(results)) > n0, 240, "a first trial", proc, log)
        with open(filler, "wb") as f:   # fill the disk
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
            except OSError:
                pass
        rc = proc.wait(timeout=300)
    finally:
        reap(proc)
    out = log.read_text()
    assert rc == 2, out[-3000:]
    # every line about the full disk is one line; ours name the directory (a trial's own failed write is one line too)
    assert "Traceback" not in out, out[-3000:]
    assert f"error: disk full under {results.resolve()}" in out
    for line in out.splitlines():
        if line.startswith("ledger write failed"):
            assert f"free space under {results / 'ledger'}" in line
    for f in ledger_files(results):   # what was written is whole
        json.loads(f.read_text())

    filler.unlink()   # space again: resume finishes the grid
    out = run_cli("resume", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ledger = TrialLedger(results / "ledger")
    assert all(e["status"] == "ok" for e in ledger.entries(t.key for t in plan.trials))
    assert len(pq.read_table(results / "diskfull" / "trials.parquet")) == len(plan.trials)


def test_hub_k_above_the_gallery_size_stops_submit_in_one_line(tmp_path, shared_cache):
    g = grid(tmp_path, "hubk", methods="[source]")
    g.write_text(g.read_text().replace("  cpus_per_trial: 1\n", "  cpus_per_trial: 1\n  hub_k: 100000\n"))
    out = run_cli("submit", str(g), *common(tmp_path / "results", shared_cache), "--dry-run")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr[-2000:]
    assert "runtime.hub_k is 100000 but the test split of synthetic has 40 items" in out.stderr
    assert not (tmp_path / "results" / "ledger").exists()
