"""MLflow tracking: one parent run per submission, one child run per trial (tag `mlflow.parentRunId`).

Only the driver logs (one writer: sqlite stays free of "database is locked"). Runs are addressed by id through
`MlflowClient`, never through the fluent active-run state, so logging from a Tune callback is safe.

The ledger is the record; MLflow is a view of it. Each ledger entry lists the run it has in each store
(`mlflow_runs: {store uri: run id}`), and `sync` logs every entry a store lacks — checked against the store itself
(runs are tagged with their trial key and status), so a store that went away mid-run, a second store, or a driver
killed between the ledger write and the MLflow write never loses a result and never gets one twice.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from workloads.spec import TrialSpec

# a dead tracking server must not stall the driver for minutes per trial (MLflow's defaults retry 7 times with
# back-off): fail a call within seconds; the ledger keeps the result and `sync` logs it later
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")

# MLflow 3's UI opens experiments without this tag in its GenAI (traces) view; ours are runs to compare
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
# every field of a trial spec is a child-run parameter (a new field is logged by itself)
PARAMS = tuple(f.name for f in dataclasses.fields(TrialSpec))
# the axes a user filters and groups runs by in the MLflow UI, also as tags (tags are searchable and editable)
TAG_AXES = ("scenario", "dataset", "source_dataset", "direction", "perturbation", "severity", "method", "variant",
            "backbone", "faithful")


def default_tracking_uri(results_dir: str | os.PathLike) -> str:
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written; the message is one line with what to do."""


def check_store(tracking_uri: str, timeout: float = 5.0) -> None:
    """Fail fast, before Ray starts, when the store is unreachable: an http(s) server must answer /health within
    `timeout`; a sqlite file's folder must be writable. (MLflow's own client retries for minutes, then prints a
    traceback.)"""
    if tracking_uri.startswith(("http://", "https://")):
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=timeout) as resp:
                if resp.status == 200:
                    return
                problem = f"answered HTTP {resp.status}"
        except (urllib.error.URLError, OSError, ValueError) as err:
            problem = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
        raise TrackingUnavailable(
            f"MLflow tracking server {tracking_uri} is not reachable ({problem}); start it (mlflow server "
            f"--backend-store-uri sqlite:///PATH/mlflow.db --host 127.0.0.1 --port 5000) or drop --tracking-uri to "
            f"use the local sqlite store")
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri[len("sqlite:///"):]).parent
        existing = next(p for p in (folder, *folder.parents) if p.exists())   # the folder or what would hold it
        if not existing.is_dir() or not os.access(existing, os.W_OK):
            raise TrackingUnavailable(f"MLflow store {tracking_uri}: folder {folder} is not writable")


def store_key(tracking_uri: str) -> str:
    """How a store is named in ledger entries (`mlflow_runs`)."""
    return tracking_uri.rstrip("/")


class Tracker:
    def __init__(self, tracking_uri: str, results_dir: str | os.PathLike):
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri
        self.results_dir = Path(results_dir).resolve()
        mlflow.set_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=tracking_uri)

    def experiment(self, grid_name: str) -> str:
        name = f"mlvp/{grid_name}"
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.tags.get(KIND_TAG) != KIND:
                self.client.set_experiment_tag(exp.experiment_id, KIND_TAG, KIND)
            return exp.experiment_id
        artifact_location = None
        if self.uri.startswith("sqlite:") or "://" not in self.uri:
            # mlflow's default is ./mlruns relative to wherever the user stands; keep artifacts beside the store
            artifact_location = (self.results_dir / "mlartifacts" / grid_name).as_uri()
        return self.client.create_experiment(name, artifact_location=artifact_location, tags={KIND_TAG: KIND})

    def start_parent(self, grid, grid_text: str, summary: dict[str, Any]) -> str:
        import platform

        exp = self.experiment(grid.name)
        run = self.client.create_run(exp, run_name=f"{grid.name} submission",
                                     tags={"mlvp.kind": "submission", "mlvp.grid": grid.name,
                                           "mlvp.grid_file": grid.source, "mlvp.host": platform.node(),
                                           "mlvp.pid": str(os.getpid())})
        rid = run.info.run_id
        params = {k: v for k, v in summary.items() if isinstance(v, (str, int, float, bool))}
        self._log_batch(rid, params=params)
        self.log_text(rid, grid_text, Path(grid.source).name or "grid.yaml")
        return rid

    def log_trial(self, parent_id: str, grid_name: str, entry: dict[str, Any]) -> str:
        """A child run for one trial result (ledger entry). Failed trials become FAILED runs with the error."""
        spec = entry["spec"]
        exp = self.experiment(grid_name)
        label = run_name(spec)
        tags = {"mlflow.parentRunId": parent_id, "mlvp.kind": "trial", "mlvp.trial_key": entry["key"],
                "mlvp.status": entry["status"], **{k: str(spec[k]) for k in TAG_AXES if spec.get(k) not in (None, "")}}
        level = _level(spec)
        if level:
            tags["level"] = level
        if entry.get("fallbacks"):
            tags["mlvp.fallbacks"] = "; ".join(entry["fallbacks"])[:4900]
        if entry.get("error"):
            tags["mlvp.error"] = entry["error"][:4900]
        run = self.client.create_run(exp, run_name=label, tags=tags)
        rid = run.info.run_id
        params = {k: spec[k] for k in PARAMS if k in spec}
        # R1/R5/R10 = R@1/5/10 in percent (mlflow metric names cannot contain '@')
        metrics = dict(entry.get("metrics", {}))
        metrics.update({f"time_{k}": v for k, v in entry.get("timings", {}).items()})
        metrics["n_queries"] = entry.get("n_queries", 0)
        metrics["n_dropped"] = len(entry.get("dropped", []))
        if entry.get("faithful_renders") is not None:
            metrics["faithful_renders"] = entry["faithful_renders"]
        self._log_batch(rid, params=params, metrics=metrics)
        # R@1 of each stream batch as a step metric: the UI's chart of `batch_R1` shows adaptation over the stream
        self._log_steps(rid, "batch_R1", entry.get("batch_R1") or [])
        artifacts = {"k_occurrence.json": {"k": spec.get("hub_k"), "counts": entry.get("k_occurrence", [])}}
        if entry.get("dropped"):
            artifacts["dropped_queries.json"] = entry["dropped"]
        if entry.get("traceback"):
            artifacts["traceback.txt"] = entry["traceback"]
        self.log_files(rid, artifacts)
        self.client.set_terminated(rid, status="FINISHED" if entry["status"] == "ok" else "FAILED")
        return rid

    def close_stale_parents(self, grid_name: str) -> list[str]:
        """Submissions of this grid whose driver died (killed, machine reset) leave their parent run RUNNING; close
        the ones started on this host by a process that no longer exists as KILLED, with the number of trials they
        had logged. Parents on other hosts are left alone (this host cannot tell whether they still run)."""
        import platform

        exp = self.client.get_experiment_by_name(f"mlvp/{grid_name}")
        if exp is None:
            return []
        closed = []
        for run in self.client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'submission' and "
                                           "attributes.status = 'RUNNING'", max_results=1000):
            tags = run.data.tags
            if tags.get("mlvp.host") != platform.node() or _alive(tags.get("mlvp.pid")):
                continue
            children = self.client.search_runs([exp.experiment_id],
                                               f"tags.mlflow.parentRunId = '{run.info.run_id}'", max_results=50000)
            self._log_batch(run.info.run_id, metrics={"trials_logged": len(children)})
            self.client.set_tag(run.info.run_id, "mlvp.closed_by", f"a later submission ({os.getpid()})")
            self.client.set_terminated(run.info.run_id, status="KILLED")
            closed.append(run.info.run_id)
        return closed

    def trial_runs(self, grid_name: str) -> dict[tuple[str, str], str]:
        """(trial key, status) -> run id of every trial run this store holds for the grid."""
        exp = self.client.get_experiment_by_name(f"mlvp/{grid_name}")
        out: dict[tuple[str, str], str] = {}
        if exp is None:
            return out
        token = None
        while True:
            page = self.client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'", max_results=5000,
                                           page_token=token)
            for run in page:
                tags = run.data.tags
                out.setdefault((tags.get("mlvp.trial_key", ""), tags.get("mlvp.status", "")), run.info.run_id)
            token = page.token
            if not token:
                return out

    def sync(self, grid_name: str, entries: list[dict[str, Any]], parent: Callable[[], str],
             record: Callable[[str, str], None]) -> int:
        """Log every ledger entry this store lacks (by trial key and status) as a child run of `parent()` (called
        only when something is logged), and `record(trial key, run id)` for every entry whose run in this store the
        ledger did not know yet. Returns the number of runs created."""
        have = self.trial_runs(grid_name)
        store, created, parent_id = store_key(self.uri), 0, None
        for e in entries:
            rid = have.get((e["key"], e["status"]))
            if rid is None:
                parent_id = parent_id or parent()
                rid = self.log_trial(parent_id, grid_name, e)
                created += 1
            if (e.get("mlflow_runs") or {}).get(store) != rid:
                record(e["key"], rid)
        return created

    def finish_parent(self, parent_id: str, metrics: dict[str, float], files: list[Path], status: str) -> None:
        self._log_batch(parent_id, metrics=metrics)
        self.log_outputs(parent_id, files)
        self.client.set_terminated(parent_id, status=status)

    def log_outputs(self, run_id: str, files: list[Path]) -> None:
        """The grid's tables under `tables/`, its report (orchestrator/report.py: index.html, Markdown, Parquet,
        plots/*.png) under `report/` keeping its folders, so the run's artifact page opens the report's files."""
        for f in map(Path, files):
            if not f.is_file():
                continue
            if f.parent.name == "report":
                where = "report"
            elif f.parent.parent.name == "report":
                where = f"report/{f.parent.name}"
            else:
                where = "tables"
            self.client.log_artifact(run_id, str(f), artifact_path=where)

    def latest_parent(self, grid_name: str) -> str | None:
        """The newest submission run of the grid in this store (None when it has none)."""
        exp = self.client.get_experiment_by_name(f"mlvp/{grid_name}")
        if exp is None:
            return None
        runs = self.client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'submission'", max_results=1,
                                       order_by=["attributes.start_time DESC"])
        return runs[0].info.run_id if runs else None

    # -- helpers -----------------------------------------------------------------------------------------------
    def _log_batch(self, run_id: str, params: dict | None = None, metrics: dict | None = None) -> None:
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        ms = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if v is not None]
        # mlflow batch limits: 100 params, 1000 metrics per call
        for i in range(0, max(len(ps), 1), 100):
            self.client.log_batch(run_id, params=ps[i:i + 100])
        for i in range(0, len(ms), 1000):
            self.client.log_batch(run_id, metrics=ms[i:i + 1000])

    def _log_steps(self, run_id: str, key: str, values: list[float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        ms = [Metric(key, float(v), now, step) for step, v in enumerate(values) if v is not None]
        for i in range(0, len(ms), 1000):
            self.client.log_batch(run_id, metrics=ms[i:i + 1000])

    def log_text(self, run_id: str, text: str, name: str) -> None:
        self.client.log_text(run_id, text, name)

    def log_files(self, run_id: str, files: dict[str, Any]) -> None:
        with tempfile.TemporaryDirectory() as d:
            for name, content in files.items():
                p = Path(d) / name
                p.write_text(content if isinstance(content, str) else json.dumps(content))
            self.client.log_artifacts(run_id, d)


def _alive(pid: str | None) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def run_name(spec: dict[str, Any]) -> str:
    """A trial's name wherever a person sees it: its MLflow run, its Ray worker in the dashboard."""
    s = TrialSpec.from_dict(spec)
    source = f"{s.source_dataset}->" if s.source_dataset not in ("", s.dataset) else ""
    return f"{source}{s.dataset}/{s.direction}/{s.backbone}/{s.method_label}/{s.cell}"


def _level(spec: dict[str, Any]) -> str:
    """The paper's level of the cell's perturbation, registry metadata: low / mid / high for the video types,
    character / word / sentence for the text types; "" for clean and mixed cells."""
    from workloads.perturbations.text import TEXT_PERTURBATIONS
    from workloads.perturbations.video import VIDEO_PERTURBATIONS

    name = spec.get("perturbation")
    registry = VIDEO_PERTURBATIONS if spec.get("direction", "v2t") == "v2t" else TEXT_PERTURBATIONS
    return registry.info(name)["level"] if name in registry else ""
