"""A real two-node Ray cluster on this machine (issue #14 items 5 and 6b; README "Running on a cluster").

`ray start --head` and a second `ray start --address` (each with its own CPUs and a custom resource, each in its own
session and temp dir so no other Ray on the machine sees them), token authentication on as a real cluster has it, and
`python -m orchestrator submit --address 127.0.0.1:PORT`: trials run on both nodes (each ledger entry records the
Ray node and worker pid it ran on), reading one render cache and writing one results directory. Then the second node
is killed mid-run: its trial is retried on the head and the grid completes. Both nodes are stopped by their pids.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from test_faults import cli_env, common, grid, plan_of, reap, run_cli, start_cli, wait_for
from orchestrator.record.ledger import TrialLedger

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    """pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Cluster:
    def __init__(self):
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.head_dir = Path(tempfile.mkdtemp(prefix="mlvp-h", dir="/tmp"))   # short: Ray's socket paths
        self.worker_dir = Path(tempfile.mkdtemp(prefix="mlvp-w", dir="/tmp"))
        self.token = self.head_dir / "token"
        self.token.write_text(secrets.token_hex(32))
        self.procs: dict[str, subprocess.Popen] = {}

    def node_env(self) -> dict:
        env = cli_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token),
                      # a dead node is noticed in ~3 s instead of ~30 s
                      RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3",
                      PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                      # fault injection at rate 0: no fault, but every trial attempt is counted with its worker pid
                      # (tests/fault_injection.py), so the test sees which trial was in flight on which node
                      MLVP_TEST_FAULT_RATE="0", MLVP_TEST_FAULT_DIR=str(self.head_dir / "attempts"))
        env.pop("RAY_ADDRESS", None)
        return env

    def driver_env(self) -> dict:
        # the driver gets the token file only: joining with an explicit --address must turn token auth on by
        # itself (orchestrator/run/ray_env.py use_cluster_token)
        env = cli_env(RAY_AUTH_TOKEN_PATH=str(self.token))
        env.pop("RAY_AUTH_MODE", None)
        return env

    def start(self, name: str, args: list[str], temp_dir: Path) -> None:
        log = open(temp_dir / f"{name}.log", "w")
        env = self.node_env()
        # Ray's loopback-only mode (=0, the tests' default) refuses a second node
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
        self.procs[name] = subprocess.Popen(
            [RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--temp-dir",
             str(temp_dir), "--disable-usage-stats", *args], stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, cwd=temp_dir)

    def nodes(self) -> list[dict]:
        """The cluster's nodes as Ray sees them (from a short-lived driver)."""
        code = ("import json, ray; ray.init(address=%r, logging_level='ERROR'); "
                "print(json.dumps([{'id': n['NodeID'], 'alive': n['Alive'], 'resources': n['Resources']} "
                "for n in ray.nodes()]))" % self.address)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**self.node_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    def node_id(self, resource: str) -> str:
        return next(n["id"] for n in self.nodes() if n["alive"] and resource in n["resources"])

    def kill(self, name: str) -> None:
        """SIGKILL a node: its `ray start` and every process under it (raylet, GCS, workers), by pid."""
        proc = self.procs[name]
        for pid in [proc.pid, *descendants(proc.pid)]:
            _kill(pid)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        # anything of ours that outlived its parent: every node process inherits our token path in its environment
        mark = f"RAY_AUTH_TOKEN_PATH={self.token}".encode()
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if mark in environ.read_bytes().split(b"\0"):
                    _kill(int(environ.parent.name))
            except OSError:
                continue
        for folder in (self.head_dir, self.worker_dir):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.start("head", ["--head", "--port", str(c.port), "--resources", '{"head": 1}', "--include-dashboard",
                         "false"], c.head_dir)
        wait_for(lambda: "Ray runtime started" in (c.head_dir / "head.log").read_text(), 180, "the head node",
                 c.procs["head"], c.head_dir / "head.log")
        c.start("worker", ["--address", c.address, "--resources", '{"worker": 1}'], c.worker_dir)
        wait_for(lambda: "Ray runtime started" in (c.worker_dir / "worker.log").read_text(), 180,
                 "the second node", c.procs["worker"], c.worker_dir / "worker.log")
        wait_for(lambda: sum(n["alive"] for n in c.nodes()) == 2, 120, "two alive nodes")
        yield c
    finally:
        c.stop()


def test_submit_with_address_runs_trials_on_both_nodes(tmp_path, shared_cache, cluster):
    head, worker = cluster.node_id("head"), cluster.node_id("worker")
    g = grid(tmp_path, "twonode", methods="[source, tent, sar, eata]")
    results = tmp_path / "shared" / "results"   # one results directory and one cache for both nodes
    out = run_cli("submit", str(g), *common(results, shared_cache), "--address", cluster.address,
                  env=cluster.driver_env(), timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "InvalidAuthToken" not in out.stdout + out.stderr
    plan = plan_of(g, results, shared_cache)
    entries = TrialLedger(results / "ledger").entries(t.key for t in plan.trials)
    assert len(entries) == len(plan.trials) and all(e["status"] == "ok" for e in entries)
    tune_entries = [e for e in entries if "ray_node" in e]   # check's clean cells run as Ray tasks, not in Tune
    assert {e["ray_node"] for e in tune_entries} == {head, worker}
    assert all(e["n_queries"] == plan.datasets["synthetic"].test.__len__() for e in entries)
    assert (results / "twonode" / "trials.parquet").is_file()


def test_second_node_killed_mid_run_its_trials_finish_on_the_head(tmp_path, shared_cache, cluster):
    head = cluster.node_id("head")
    g = grid(tmp_path, "nodeloss", methods="[source, tent, sar, eata, tcr, read]")
    results, log = tmp_path / "results", tmp_path / "submit.log"
    plan = plan_of(g, results, shared_cache)
    ledger = TrialLedger(results / "ledger")
    attempts = cluster.head_dir / "attempts"
    shutil.rmtree(attempts, ignore_errors=True)   # the first test ran some of these keys: count this run's attempts
    proc = start_cli(log, "submit", str(g), *common(results, shared_cache), "--address", cluster.address,
                     env=cluster.driver_env())
    try:
        def in_flight_on_worker():
            """A trial whose latest attempt started less than a second ago in a process of the second node (a trial
            takes longer than that) and has no ledger entry yet."""
            done = {e["key"] for e in ledger.entries(t.key for t in plan.trials)}
            on_node = set(descendants(cluster.procs["worker"].pid))
            for f in attempts.glob("*") if attempts.is_dir() else []:
                pids = f.read_text().split()
                if f.name in keys and f.name not in done and pids and int(pids[-1]) in on_node \
                        and time.time() - f.stat().st_mtime < 1.0:
                    return f.name
            return None
        keys = {t.key for t in plan.trials}
        victim = wait_for(in_flight_on_worker, 400, "a trial running on the second node", proc, log)
        killed_at = time.time()
        cluster.kill("worker")
        rc = proc.wait(timeout=500)
    finally:
        reap(proc)
    out = log.read_text()
    assert rc == 0, out[-3000:]
    entries = ledger.entries(t.key for t in plan.trials)
    assert len(entries) == len(plan.trials) and all(e["status"] == "ok" for e in entries)
    after = [e for e in entries if e["recorded_at"] > killed_at + 1]
    assert after and all(e["ray_node"] == head for e in after)   # everything after the loss ran on the head
    # the trial that was running on the lost node: retried by Tune (a second attempt), finished on the head
    assert len((attempts / victim).read_text().split()) == 2 and ledger.get(victim)["ray_node"] == head
    assert sum(n["alive"] for n in cluster.nodes()) == 1
