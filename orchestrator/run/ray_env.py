"""Starting or joining Ray the way this tool needs it."""
from __future__ import annotations

import os
from pathlib import Path

from orchestrator.stages.cluster import current_cluster
from orchestrator.run.interrupts import handle_signals

# Tune's auto CSV/JSON loggers keep ~300 KB per finished trial on the driver and write 5 files per trial; our
# ledger and MLflow replace them. Trials use absolute paths, so no chdir into trial dirs.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
# nothing is downloaded at run time: fail fast instead of retrying a hub for ~46 s
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Ctrl-C must reach us as KeyboardInterrupt: Tune's own handler stops quietly, returns as if finished and prints a
# Tuner.restore hint, so a killed submission looked successful; ours marks the parent run KILLED and points to resume
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")


class ClusterError(RuntimeError):
    """The Ray cluster cannot run this grid as configured; one line saying what to change."""


def check_resources(gpus_per_trial: float, cpus_per_trial: float) -> None:
    """A trial asking for resources no node has would wait forever: say so and stop instead."""
    cluster = current_cluster()
    if gpus_per_trial > 0 and cluster.gpus == 0:
        raise ClusterError(f"runtime.gpus_per_trial is {gpus_per_trial} but the Ray cluster has no GPU: set "
                           "gpus_per_trial: 0 to run on CPUs, or join a cluster with GPUs (--address)")
    largest = cluster.largest_node_cpus if cluster.cpus else 0
    if cpus_per_trial > largest:
        raise ClusterError(f"runtime.cpus_per_trial is {cpus_per_trial} but the largest node of the Ray cluster has "
                           f"{largest:g} CPUs: lower it")


def auth_token_hint() -> str:
    """The console's note beside the dashboard's address: where its token is, and what `protect_token` did."""
    token = Path("~/.ray/auth_token").expanduser()
    where = f" (stored in {token}{protect_token(token)})" if token.exists() else ""
    return f"Ray >= 2.59 asks the dashboard for a token: print it with `ray get-auth-token`{where}"


def protect_token(token: Path) -> str:
    """Ray writes ~/.ray/auth_token with the process's umask, usually 0644: readable by every user of the machine,
    and the token lets whoever holds it run code on the cluster. A token file of this user that others can read is
    set to 0600 (docs/cluster.md says so); another user's is only named. Returns the note for the console ("" when
    the mode was already private)."""
    try:
        st = token.stat()
    except OSError:
        return ""
    if not st.st_mode & 0o077:
        return ""
    mode = f"{st.st_mode & 0o777:o}"
    if hasattr(os, "getuid") and st.st_uid == os.getuid():
        try:
            os.chmod(token, 0o600)
            return f"; its mode was {mode}, readable by other users: set to 600"
        except OSError:
            pass
    return f"; readable by other users (mode {mode}): run chmod 600 {token}"


# every worker's first act: no SIGTERM teardown traceback forwarded to the console (orchestrator/run/worker_setup.py)
WORKER_SETUP = {"worker_process_setup_hook": "orchestrator.run.worker_setup.quiet_sigterm_teardown"}


def start_ray(address: str | None = None, num_cpus: int | None = None, dashboard: bool = True,
              metadata: dict[str, str] | None = None) -> dict:
    """Join `address` when given, else start a local Ray bound to loopback only; in a process where Ray is already
    initialised, use that one. Returns facts for the console, and "started": whether this call started a local Ray
    (which its caller then stops: orchestrator/run/submit.py `Submission.close`). `metadata`: the job's metadata,
    which the Ray dashboard's job list shows (a submission gives its grid and id: `job_metadata`)."""
    if address is None:
        # Ray's local (non-cluster) mode uses 127.0.0.1 as the node address, so its listeners stay on loopback (a
        # laptop or CI needs no open ports). Ray reads this once, when it is imported: set it first.
        # Not for --address: a driver joining a cluster must be reachable from the other nodes.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if address is not None:
        use_cluster_token()   # before Ray is imported: it reads its auth mode once, then
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    if ray.is_initialized():
        return {"dashboard_url": None, "address": "already connected", "started": False}
    from ray.job_config import JobConfig

    job = JobConfig(metadata=dict(metadata or {}))
    if address is None:
        ctx = ray.init(num_cpus=num_cpus, include_dashboard=dashboard, dashboard_host="127.0.0.1",
                       log_to_driver=True, logging_level="WARNING", job_config=job,
                       runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}, **WORKER_SETUP})
    else:
        try:
            ctx = ray.init(address=address, log_to_driver=True, logging_level="WARNING", job_config=job,
                           runtime_env=WORKER_SETUP)
        except ConnectionError as err:
            if "AuthenticationError" not in repr(err.__cause__) and "InvalidAuthToken" not in str(err.__cause__):
                raise
            raise ClusterError(f"the Ray cluster at {address} refused this driver's token: copy the head's token "
                               "(`ray get-auth-token` there) to ~/.ray/auth_token here, or set RAY_AUTH_TOKEN"
                               ) from None
    handle_signals()   # Ray's core installed its own SIGTERM handler (a C++ stack dump): ours is the interrupt
    url = ctx.dashboard_url
    return {"dashboard_url": f"http://{url}" if url and not url.startswith("http") else url,
            "address": ctx.address_info.get("address") or ctx.address_info.get("gcs_address"),
            "started": address is None}


def job_metadata(grid: str, submission: str, results: str) -> dict[str, str]:
    """The Ray job's metadata for a submission (the dashboard's job list and `/api/jobs/` show it): which grid, which
    submission (ledger entries and MLflow runs carry the same id), where its results go."""
    return {"mlvp_grid": grid, "mlvp_submission": submission, "mlvp_results": results}


def use_cluster_token() -> None:
    """Joining a cluster by address: send the token when one is at hand. `ray start --head` turns token auth on by
    itself when a token exists (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token), but a driver given an
    explicit `--address` does not, and then fails with 20+ InvalidAuthToken lines and a traceback. Set before Ray is
    imported (Ray reads RAY_AUTH_MODE once); an explicit RAY_AUTH_MODE is left as it is."""
    if os.environ.get("RAY_AUTH_MODE") is not None:
        return
    if (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
            or Path("~/.ray/auth_token").expanduser().is_file()):
        os.environ["RAY_AUTH_MODE"] = "token"


def stop_ray() -> None:
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    if ray.is_initialized():
        ray.shutdown()
