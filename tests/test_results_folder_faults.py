"""A results folder that faults and races leave whole (issue 47 items 2 and 6), with real processes: two drivers of
one folder (the second stops in one line, the first finishes), a driver killed with SIGKILL (its lock is stale and
taken by the next one, its helper processes end with it, the temporary files of writers killed mid-write are swept),
a write that fails (its temporary file removed), a results disk that fills, and a corrupt MLflow store.

Submissions are real `python -m orchestrator` processes on the session's shared cache, as in tests/test_faults.py.
"""
import contextlib
import json
import os
import platform
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from test_faults import cli_env, common, grid, ledger_files, parent_id, plan_of, reap, run_cli, start_cli, wait_for
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import default_tracking_uri
from orchestrator.record.results_lock import HOLDER_NAME, ResultsFolderLocked, results_lock
from workloads.atomic import SWEEP_MARGIN_S, sweep_temporaries
from workloads.render_cache import RenderCache, RenderKey


@pytest.fixture(scope="module")
def prepared(shared_cache, tmp_path_factory):
    """The shared cache with the micro dataset, the clip4clip checkpoint and the clean clips (one `check`)."""
    tmp = tmp_path_factory.mktemp("folder-faults-prep")
    g = grid(tmp, "prep", methods="[source]")
    out = run_cli("check", str(g), *common(tmp / "results", shared_cache), "--num-cpus", "2")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return shared_cache


def dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- /proc: a process's descendants --------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), fields[0]


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"   # a zombie has ended: only its exit status waits to be read


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid`, with its command line."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            children.setdefault(stat[0], []).append(int(entry))
    out, stack = {}, [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            try:
                out[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            except OSError:
                continue
            stack.append(child)
    return out


def tracking_child(pid: int) -> int | None:
    """The tracking process among `pid`'s children (orchestrator/record/tracker_process.py: a spawned interpreter)."""
    return next((p for p, cmd in descendants(pid).items() if "multiprocessing.spawn" in cmd
                 and _stat(p) is not None and _stat(p)[0] == pid), None)


# -- the lock, in this process and another ---------------------------------------------------------------------------
def test_a_held_lock_stops_a_second_holder_in_one_line_and_a_killed_holder_leaves_a_stale_one(tmp_path):
    results = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", f"""
from orchestrator.record.results_lock import results_lock
import time
with results_lock({str(results)!r}, "mlvp submit micro"):
    print("held", flush=True)
    time.sleep(600)
"""], stdout=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ResultsFolderLocked) as err:
            with results_lock(results, "mlvp report micro"):
                pass
        line = str(err.value)
        assert "\n" not in line
        assert f"in use by `mlvp submit micro` (pid {holder.pid} on host {platform.node()}, since " in line
        assert f"kill {holder.pid}" in line
        holder.send_signal(signal.SIGKILL)   # the kernel releases its flock; its record stays
        holder.wait(timeout=10)
    finally:
        holder.kill()
    assert json.loads((results / HOLDER_NAME).read_text())["pid"] == holder.pid
    notes = []
    with results_lock(results, "mlvp resume micro", note=notes.append) as mine:
        assert mine["pid"] == os.getpid()
        assert json.loads((results / HOLDER_NAME).read_text())["pid"] == os.getpid()
    assert len(notes) == 1 and f"stale lock of `mlvp submit micro` (pid {holder.pid} on host" in notes[0]
    assert "ended without releasing it" in notes[0]
    assert not (results / HOLDER_NAME).exists()   # released on the way out


def test_the_writing_commands_meet_a_held_lock_in_one_line_and_the_reading_ones_run(tmp_path):
    results = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", f"""
from orchestrator.record.results_lock import results_lock
import time
with results_lock({str(results)!r}, "mlvp submit quickstart"):
    print("held", flush=True)
    time.sleep(600)
"""], stdout=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        for command in ("submit", "resume", "check", "sync", "report"):
            out = run_cli(command, "quickstart", "--results-dir", str(results), timeout=120)
            assert out.returncode == 2 and out.stdout == "", (command, out.stdout, out.stderr)
            assert out.stderr.count("\n") == 1 and out.stderr.startswith(
                f"error: results folder {results} is in use by `mlvp submit quickstart` (pid {holder.pid} "), out.stderr
        for command in (["plan"], ["status"], ["submit", "--dry-run"]):
            out = run_cli(*command, "quickstart", "--results-dir", str(results), timeout=120)
            assert out.returncode in (0, 3) and "in use" not in out.stderr, (command, out.stdout, out.stderr)
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_recorded_on_another_host_is_refused_unless_broken(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / HOLDER_NAME).write_text(json.dumps({"pid": 4242, "host": "other-node", "command": "mlvp submit full",
                                                   "started_unix": time.time() - 3600}))
    with pytest.raises(ResultsFolderLocked, match=r"on another host: this host cannot check .* --break-lock"):
        with results_lock(results, "mlvp submit full"):
            pass
    out = run_cli("sync", "quickstart", "--results-dir", str(results))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--break-lock" in out.stderr, out.stderr
    notes = []
    with results_lock(results, "mlvp submit full", break_lock=True, note=notes.append):
        pass
    assert len(notes) == 1 and "other-node" in notes[0] and "--break-lock" in notes[0]


# -- temporary files -------------------------------------------------------------------------------------------------
def test_the_sweep_removes_only_stale_temporaries_of_dead_writers(tmp_path):
    old = time.time() - 3600
    stale = tmp_path / "render" / "synthetic" / f".clip-ab12.npz.{dead_pid()}.tmp"
    mp4 = tmp_path / "videos" / f".v1.mp4.{dead_pid()}.tmp.mp4"
    live = tmp_path / "render" / f".clip-cd34.npz.{os.getpid()}.tmp"          # its writer runs
    fresh = tmp_path / "render" / f".clip-ef56.npz.{dead_pid()}.tmp"          # changed just now
    other = tmp_path / "render" / "notes.tmp"                                  # not atomic_path's name
    for f in (stale, mp4, live, fresh, other):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * 1000)
    for f in (stale, mp4, live, other):
        os.utime(f, (old, old))
    assert sweep_temporaries([tmp_path, tmp_path / "missing"]) == (2, 2000)
    assert not stale.exists() and not mp4.exists()
    assert live.exists() and fresh.exists() and other.exists()
    os.utime(fresh, (time.time() - SWEEP_MARGIN_S - 5,) * 2)
    assert sweep_temporaries([tmp_path]) == (1, 1000)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to fill ({out.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_render_write_that_fills_the_disk_removes_its_temporary_file(tiny_tmpfs):
    cache = RenderCache(tiny_tmpfs / "render")
    key = RenderKey("synthetic", "d1", "v1", "gaussian_noise", 3, 0, 8, 96)
    frames = np.random.default_rng(0).integers(0, 255, (8, 96, 96, 3), dtype=np.uint8)
    big = np.concatenate([frames] * 8)   # ~1.8 MB, incompressible: more than the 1 MB disk
    with pytest.raises(OSError) as err:
        cache.write(key, big, {})
    assert err.value.errno == 28
    assert [p for p in tiny_tmpfs.rglob("*") if p.is_file()] == []   # no temporary file, no torn entry
    cache.write(key, frames[:1], {})   # space again (the failed write freed it)
    assert cache.read(key)[0].shape == (1, 96, 96, 3)


# -- helper processes end with their driver --------------------------------------------------------------------------
def test_the_tracking_process_and_the_outputs_child_end_when_their_driver_is_killed(tmp_path):
    """A stand-in driver starts both helpers as `submit` does, then is killed with SIGKILL: the tracking process (a
    process pool's worker, which does not notice by itself), multiprocessing's resource tracker and the outputs
    child all end within seconds."""
    driver = subprocess.Popen([sys.executable, "-c", f"""
import time
from orchestrator.record.tracker_process import TrackerProcess
from orchestrator.report.outputs import OutputsAhead
tracker = TrackerProcess("sqlite:///{tmp_path / 'mlflow.db'}", {str(tmp_path)!r})
ahead = OutputsAhead(10**6)
ahead.start()
tracker.pid
print("up", flush=True)
time.sleep(600)
"""], stdout=subprocess.PIPE, text=True, env=cli_env(), start_new_session=True)
    try:
        assert driver.stdout.readline().strip() == "up"
        helpers = descendants(driver.pid)
        kinds = {"tracking": "multiprocessing.spawn", "resource tracker": "resource_tracker",
                 "outputs": "orchestrator.report.outputs"}
        for kind, word in kinds.items():
            assert any(word in cmd for cmd in helpers.values()), (kind, helpers)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in helpers):
            time.sleep(0.2)
        assert not [cmd for p, cmd in helpers.items() if alive(p)]
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- two drivers of one folder; a corrupt store ----------------------------------------------------------------------
def holder_pid(results: Path) -> int | None:
    try:
        return json.loads((results / HOLDER_NAME).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def runs_of(uri: str, grid_name: str, kind: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(f"mlvp/{grid_name}")
    return client.search_runs([exp.experiment_id], f"tags.`mlvp.kind` = '{kind}'", max_results=1000)


@pytest.mark.slow
def test_a_second_submit_stops_in_one_line_the_first_finishes_and_a_corrupt_store_is_rebuilt(tmp_path, prepared):
    g = grid(tmp_path, "twice", methods="[source, tent, sar, eata]")
    results, log = tmp_path / "results", tmp_path / "first.log"
    plan = plan_of(g, results, prepared)
    first = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    try:
        wait_for(lambda: holder_pid(results) == first.pid, 120, "the first driver's lock", first, log)
        second = run_cli("submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard",
                         timeout=120)
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr, second.stderr
        assert (f"is in use by `mlvp submit {g}` (pid {first.pid} on host {platform.node()}, since "
                in second.stderr), second.stderr
        assert f"kill {first.pid}" in second.stderr and second.stdout == ""   # nothing planned, nothing started
        status = run_cli("status", str(g), *common(results, prepared), timeout=120)   # reads without the lock
        assert status.returncode in (0, 3) and "twice:" in status.stdout, status.stdout + status.stderr
        rc = first.wait(timeout=420)
    finally:
        reap(first)
    assert rc == 0, log.read_text()[-3000:]
    assert not (results / HOLDER_NAME).exists()
    uri = default_tracking_uri(results)
    assert len(runs_of(uri, "twice", "submission")) == 1
    assert sorted(r.data.tags["mlvp.trial_key"] for r in runs_of(uri, "twice", "trial")) == \
        sorted(t.key for t in plan.trials)

    store = results / "mlflow.db"
    with open(store, "r+b") as f:   # garbage over its first pages: the header and the schema
        f.write(np.random.default_rng(0).bytes(16384))
    for command in ("sync", "submit"):
        out = run_cli(command, str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard",
                      timeout=120) if command == "submit" else run_cli(command, str(g), *common(results, prepared))
        assert out.returncode == 2, (command, out.stdout[-2000:], out.stderr[-2000:])
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, (command, out.stderr)
        assert f"MLflow store {uri} is corrupt (file is not a database)" in out.stderr
        assert f"mv '{store}' '{store}.corrupt'" in out.stderr and f"mlvp sync {g}" in out.stderr
    store.rename(store.with_name("mlflow.db.corrupt"))
    out = run_cli("sync", str(g), *common(results, prepared))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    # read with sqlite itself: this process's MLflow keeps its engine on the file that was moved away
    with contextlib.closing(sqlite3.connect(store)) as con:
        keys = [k for (k,) in con.execute("SELECT value FROM tags WHERE key = 'mlvp.trial_key'")]
    assert sorted(keys) == sorted(t.key for t in plan.trials)   # rebuilt from the ledger, each cell once


# -- kill -9 of the driver -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_killed_driver_leaves_no_process_and_the_next_one_takes_its_lock_and_sweeps_its_debris(tmp_path, prepared):
    g = grid(tmp_path, "killed", methods="[source, tent, sar, eata]")
    results, log = tmp_path / "results", tmp_path / "submit.log"
    plan = plan_of(g, results, prepared)
    driver = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    try:
        wait_for(lambda: tracking_child(driver.pid), 120, "the tracking process", driver, log)
        n0 = len(ledger_files(results))
        wait_for(lambda: len(ledger_files(results)) > n0, 240, "a first trial", driver, log)
        started = descendants(driver.pid)
        ours = {p: cmd for p, cmd in started.items() if "multiprocessing" in cmd or "orchestrator" in cmd}
        assert any("multiprocessing.spawn" in cmd for cmd in ours.values()), started   # the tracking process
        os.kill(driver.pid, signal.SIGKILL)   # the driver alone: what it started must end by itself
        driver.wait(timeout=30)
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in ours):
            time.sleep(0.2)
        ours_left = {p: cmd for p, cmd in ours.items() if alive(p)}
        # Ray's own (raylet, GCS, workers, its dashboard agent) end by Ray's fate sharing: the agent only after its
        # report to a GCS that is gone times out (ray/_private/process_watcher.py), so it gets longer
        deadline = time.time() + 120
        while time.time() < deadline and any(alive(p) for p in started):
            time.sleep(0.5)
        left = {p: cmd for p, cmd in started.items() if alive(p)}
    finally:
        reap(driver)
    assert not ours_left, ours_left
    assert not left, left
    assert holder_pid(results) == driver.pid   # its record stays; the kernel released its flock
    # a writer killed mid-write (a fine-tune's memory-mapped clips on a full disk die of SIGBUS) left its file
    debris = prepared / "models" / f".clips-train-32px.npy.{dead_pid()}.tmp"
    debris.write_bytes(b"\0" * 4096)
    os.utime(debris, (time.time() - 3600,) * 2)

    out = run_cli("resume", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    notes = [line for line in out.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2, out.stderr
    assert f"stale lock of `mlvp submit {g}` (pid {driver.pid} on host {platform.node()}" in notes[0]
    # ours, and any the killed run's own writers left when the resume started over SWEEP_MARGIN_S after the kill
    assert re.match(r"note: removed \d+ stale temporary files? \(\d+\.\d MB\) left by an earlier run that was killed "
                    r"mid-write under ", notes[1]), notes[1]
    assert not debris.exists()
    counts = TrialLedger(results / "ledger").counts(t.key for t in plan.trials)
    assert counts["ok"] == len(plan.trials)
    assert not (results / HOLDER_NAME).exists()


# -- a full results disk ---------------------------------------------------------------------------------------------
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


@pytest.mark.slow
def test_a_full_results_disk_ends_in_one_line_a_non_zero_exit_and_the_parent_run_failed(tmp_path, prepared,
                                                                                         small_tmpfs):
    """The results folder on a real 48 MB tmpfs, filled once the first trial is in the ledger; the MLflow store on
    another disk (`--tracking-uri`), so its parent run can be closed: FAILED. (With the store on the full disk too,
    the driver says that its parent run stays RUNNING until `mlvp sync` closes it: orchestrator/run/finish.py.)"""
    g = grid(tmp_path, "fullres", methods="[source, tent, sar, eata]")
    results, log = small_tmpfs / "results", tmp_path / "submit.log"
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    proc = start_cli(log, "submit", str(g), *common(results, prepared), "--num-cpus", "2", "--no-dashboard",
                     "--tracking-uri", uri)
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
    assert "Traceback" not in out, out[-3000:]
    assert out.strip().splitlines()[-1].startswith(f"error: disk full under {results.resolve()}"), out[-3000:]
    assert MlflowClient(uri).get_run(parent_id(log)).info.status == "FAILED"


def test_the_lock_nests_in_the_process_that_holds_it(tmp_path):
    with results_lock(tmp_path, "mlvp submit micro") as outer:
        with results_lock(tmp_path, "mlvp submit micro") as inner:
            assert inner is outer
        assert json.loads((tmp_path / HOLDER_NAME).read_text())["pid"] == os.getpid()   # still held
        probe = subprocess.run([sys.executable, "-c", f"""
from orchestrator.record.results_lock import results_lock
with results_lock({str(tmp_path)!r}, "mlvp report micro"):
    pass
"""], capture_output=True, text=True, env=cli_env())
        assert probe.returncode == 1 and "ResultsFolderLocked" in probe.stderr
    assert not (tmp_path / HOLDER_NAME).exists()
