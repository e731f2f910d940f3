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
    import ray

    if ray.is_initialized():
        return {"dashboard_url": None, "address": "already connected"}
    if address is None:
        ctx = ray.init(num_cpus=num_cpus, include_dashboard=dashboard, dashboard_host="127.0.0.1",
                       log_to_driver=True, logging_level="WARNING",
                       runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}})
    else:
        ctx = ray.init(address=address, log_to_driver=True, logging_level="WARNING")
    url = ctx.dashboard_url
    return {"dashboard_url": f"http://{url}" if url and not url.startswith("http") else url,
            "address": ctx.address_info.get("address") or ctx.address_info.get("gcs_address")}


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
