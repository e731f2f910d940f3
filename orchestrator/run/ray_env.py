"""Starting or joining Ray the way this tool needs it."""
from __future__ import annotations

import os
from pathlib import Path

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
    import ray

    total = ray.cluster_resources()
    if gpus_per_trial > 0 and total.get("GPU", 0) == 0:
        raise ClusterError(f"runtime.gpus_per_trial is {gpus_per_trial} but the Ray cluster has no GPU: set "
                           "gpus_per_trial: 0 to run on CPUs, or join a cluster with GPUs (--address)")
    largest = largest_node_cpus() if total.get("CPU", 0) else 0
    if cpus_per_trial > largest:
        raise ClusterError(f"runtime.cpus_per_trial is {cpus_per_trial} but the largest node of the Ray cluster has "
                           f"{largest:g} CPUs: lower it")


def largest_node_cpus() -> int:
    """CPUs of the largest alive node: a task asking for more than one node has never starts (on a cluster the
    cluster-wide total, which `ray.available_resources()` gives, is more than any single node holds)."""
    import ray

    sizes = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    return max(1, int(max(sizes, default=1)))


def auth_token_hint() -> str:
    token = Path("~/.ray/auth_token").expanduser()
    where = f" (stored in {token})" if token.exists() else ""
    return f"Ray >= 2.59 asks the dashboard for a token: print it with `ray get-auth-token`{where}"


def start_ray(address: str | None = None, num_cpus: int | None = None, dashboard: bool = True) -> dict:
    """Join `address` when given, else start a local Ray bound to loopback only. Returns facts for the console."""
    if address is None:
        # Ray's local (non-cluster) mode uses 127.0.0.1 as the node address, so its listeners stay on loopback (a
        # laptop or CI needs no open ports). Ray reads this once, when it is imported: set it first.
        # Not for --address: a driver joining a cluster must be reachable from the other nodes.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import logging

    import ray

    # once per start Ray warns that token authentication is on; README says how to use the token
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    if ray.is_initialized():
        return {"dashboard_url": None, "address": "already connected"}
    if address is None:
        ctx = ray.init(num_cpus=num_cpus, include_dashboard=dashboard, dashboard_host="127.0.0.1",
                       log_to_driver=True, logging_level="WARNING",
                       runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}})
    else:
        use_cluster_token()
        try:
            ctx = ray.init(address=address, log_to_driver=True, logging_level="WARNING")
        except ConnectionError as err:
            if "AuthenticationError" not in repr(err.__cause__) and "InvalidAuthToken" not in str(err.__cause__):
                raise
            raise ClusterError(f"the Ray cluster at {address} refused this driver's token: copy the head's token "
                               "(`ray get-auth-token` there) to ~/.ray/auth_token here, or set RAY_AUTH_TOKEN"
                               ) from None
    quiet_worker_teardown()
    url = ctx.dashboard_url
    return {"dashboard_url": f"http://{url}" if url and not url.startswith("http") else url,
            "address": ctx.address_info.get("address") or ctx.address_info.get("gcs_address")}


def without_sigterm_tracebacks(lines: list[str]) -> list[str]:
    """A worker's lines less the traceback Python prints when Ray's SIGTERM handler (it raises SystemExit) fires
    inside a weakref callback: Ray stops idle and finished trial actors with SIGTERM, and the interpreter then
    reports "Exception ignored in: <function WeakSet...>" with 8 lines of traceback ending in "SystemExit: 1". It
    says nothing about the run (the worker's work was done and recorded) and reads as a failure."""
    kept, i = [], 0
    while i < len(lines):
        if lines[i].startswith("Exception ignored in"):
            # the traceback's last line is its first one that is not indented (nor blank, nor its header)
            end = next((j for j in range(i + 1, min(len(lines), i + 30))
                        if lines[j].strip() and not lines[j][0].isspace() and not lines[j].startswith("Traceback")),
                       None)
            if end is not None and lines[end].startswith("SystemExit") and any(
                    "sigterm_handler" in ln for ln in lines[i:end]):
                i = end + 1
                continue
        kept.append(lines[i])
        i += 1
    return kept


def quiet_worker_teardown() -> None:
    """Filter what Ray forwards from the workers' stderr to this driver through without_sigterm_tracebacks. Ray
    forwards worker output through one handler named "ray_print_logs" (ray/_private/ray_logging); when a Ray
    version lays this out otherwise, its output is left as it is."""
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return
    with dispatcher._lock:
        for k, (name, handler) in enumerate(dispatcher.handlers):
            if name != "ray_print_logs" or getattr(handler, "drops_sigterm_tracebacks", False):
                continue

            def filtered(data, print_logs=handler):
                lines = without_sigterm_tracebacks(list(data.get("lines") or []))
                if lines:
                    print_logs({**data, "lines": lines})

            filtered.drops_sigterm_tracebacks = True
            dispatcher.handlers[k] = (name, filtered)


def use_cluster_token() -> None:
    """Joining a cluster by address: send the token when one is at hand. `ray start --head` turns token auth on by
    itself when a token exists (~/.ray/auth_token, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH), but a driver given an explicit
    `--address` does not, and then fails with 20+ InvalidAuthToken lines and a traceback. An explicit RAY_AUTH_MODE
    is left as it is."""
    if os.environ.get("RAY_AUTH_MODE") is not None:
        return
    try:
        from ray._raylet import AuthenticationTokenLoader

        has_token = AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)
    except Exception:  # Ray without token auth
        has_token = bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                         or Path("~/.ray/auth_token").expanduser().is_file())
    if has_token:
        os.environ["RAY_AUTH_MODE"] = "token"
        try:  # Ray caches its config at import: refresh it, as Ray's own ray start does
            from ray._raylet import Config

            Config.initialize("")
        except Exception:
            pass


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
