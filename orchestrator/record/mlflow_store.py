"""MLflow tracking: one parent run per submission, one child run per trial (tag `mlflow.parentRunId`), addressed by
id through `MlflowClient`, never through the fluent active-run state.

Only the driver logs (one writer: sqlite stays free of "database is locked"). The ledger is the record; MLflow is a
view of it. Each ledger entry lists the run it has in each store (`mlflow_runs: {store uri: run id}`), and `sync`
(orchestrator/record/sync.py) logs every entry a store lacks, so a store that went away mid-run, a second store, or
a driver killed between the ledger write and the MLflow write never loses a result and never gets one twice.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.record.writer import BackgroundLogging, TrialLogWriter
from workloads.spec import SPEC_FIELDS, TrialSpec

# a dead tracking server must not stall the driver for minutes per trial (MLflow's defaults retry 7 times with
# back-off): fail a call within seconds; the ledger keeps the result and `sync` logs it later
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")

# MLflow 3's UI opens experiments without this tag in its GenAI (traces) view; ours are runs to compare
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
# every field of a trial spec is a child-run parameter (a new field is logged by itself)
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


class TrackingError(RuntimeError):
    """An error raised in the tracking process (TrackerProcess), carried back as its type name and message: MLflow's
    own exceptions do not all survive pickling."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind, self.message = kind, message

    def __reduce__(self):
        return TrackingError, (self.kind, self.message)


def error_name(err: BaseException) -> str:
    """The type name to show for a tracking error, the original one for an error of the tracking process."""
    return getattr(err, "kind", None) or type(err).__name__


class Tracker(BackgroundLogging):
    def __init__(self, tracking_uri: str, results_dir: str | os.PathLike):
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri
        self.results_dir = Path(results_dir).resolve()
        if tracking_uri.startswith("sqlite:///"):
            _fast_sqlite(Path(tracking_uri[len("sqlite:///"):]))
        mlflow.set_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self._experiments: dict[str, str] = {}      # grid name -> experiment id (looked up once, not per trial)
        self._writer: TrialLogWriter | None = None

    def log_trials(self, parent_id: str, grid_name: str, entries: list[dict[str, Any]]) -> list[str]:
        """`log_trial` for many entries: in one database transaction on a sqlite / SQL store (the runs, tags, params
        and metrics `log_trial` writes, captured by `_BatchClient`; artifacts written into a local artifact folder),
        else one by one. Returns the run ids in order."""
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        if not isinstance(store, SqlAlchemyStore):
            return [self.log_trial(parent_id, grid_name, e) for e in entries]
        exp_id = self.experiment(grid_name)   # cached before the client is swapped
        real, batch = self.client, _BatchClient(self.client)
        self.client = batch
        try:
            rids = [self.log_trial(parent_id, grid_name, e) for e in entries]
        finally:
            self.client = real
        batch.commit(store, exp_id, self.client.get_experiment(exp_id).artifact_location)
        return rids

    def experiment(self, grid_name: str) -> str:
        if grid_name in self._experiments:
            return self._experiments[grid_name]
        self._experiments[grid_name] = eid = self._experiment(grid_name)
        return eid

    def _experiment(self, grid_name: str) -> str:
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

    def start_parent(self, grid, grid_text: str, summary: dict[str, Any], pid: int | None = None) -> str:
        """The submission's parent run, tagged with the host and the driver's `pid` (this process by default):
        `close_stale_parents` closes it once that process is gone. `grid` needs `name` and `source`."""
        import platform

        exp = self.experiment(grid.name)
        run = self.client.create_run(exp, run_name=f"{grid.name} submission",
                                     tags={"mlvp.kind": "submission", "mlvp.grid": grid.name,
                                           "mlvp.grid_file": grid.source, "mlvp.host": platform.node(),
                                           "mlvp.pid": str(pid or os.getpid())})
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
        params = {k: spec[k] for k in SPEC_FIELDS if k in spec}
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
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        if isinstance(store, SqlAlchemyStore):   # three tags per run, not whole runs: 15 s -> well under 1 s at 4,270
            return _trial_runs_sql(store, exp.experiment_id)
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

    def finish_parent(self, parent_id: str, metrics: dict[str, float], files: list[Path], status: str) -> None:
        self._log_batch(parent_id, metrics=metrics)
        self.log_outputs(parent_id, files)
        self.client.set_terminated(parent_id, status=status)

    def log_outputs(self, run_id: str, files: list[Path]) -> None:
        """The grid's tables under `tables/`, its report (orchestrator/report/page.py: index.html, Markdown, Parquet,
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
        # mlflow batch limits: 100 params, 1000 metrics per call; one call (one transaction) when both fit
        if len(ps) <= 100 and len(ms) <= 1000:
            self.client.log_batch(run_id, params=ps, metrics=ms)
            return
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
        if isinstance(self.client, _BatchClient):   # kept in memory until the batch commits: no folder per run
            self.client.add_files(run_id, {name: (content if isinstance(content, str) else json.dumps(content))
                                           .encode() for name, content in files.items()})
            return
        with tempfile.TemporaryDirectory() as d:
            for name, content in files.items():
                p = Path(d) / name
                p.write_text(content if isinstance(content, str) else json.dumps(content))
            self.client.log_artifacts(run_id, d)


def _trial_runs_sql(store, experiment_id: str) -> dict[tuple[str, str], str]:
    """Tracker.trial_runs on a SQL store: only the runs' kind, trial key and status tags, newest run first (as
    search_runs orders them)."""
    from mlflow.store.tracking.dbmodels.models import SqlRun, SqlTag

    with store.ManagedSessionMaker() as session:
        rows = (session.query(SqlTag.run_uuid, SqlTag.key, SqlTag.value)
                .join(SqlRun, SqlRun.run_uuid == SqlTag.run_uuid)
                .filter(SqlRun.experiment_id == int(experiment_id), SqlRun.lifecycle_stage == "active",
                        SqlTag.key.in_(("mlvp.kind", "mlvp.trial_key", "mlvp.status")))
                .order_by(SqlRun.start_time.desc(), SqlRun.run_uuid).all())
    tags: dict[str, dict[str, str]] = {}
    for rid, key, value in rows:
        tags.setdefault(rid, {})[key] = value
    out: dict[tuple[str, str], str] = {}
    for rid, t in tags.items():
        if t.get("mlvp.kind") == "trial":
            out.setdefault((t.get("mlvp.trial_key", ""), t.get("mlvp.status", "")), rid)
    return out


class _BatchClient:
    """Stands in for MlflowClient inside `Tracker.log_trials`: records the writes `log_trial` makes (run, tags,
    params, metrics, artifacts, final status) so they are committed together; anything else it is asked is an
    AttributeError (the batch then falls back to one run at a time)."""

    def __init__(self, real):
        self.real = real
        self.runs: dict[str, dict[str, Any]] = {}

    def create_run(self, experiment_id, start_time=None, tags=None, run_name=None):
        import types
        import uuid

        rid = uuid.uuid4().hex
        now = int(time.time() * 1000)
        self.runs[rid] = {"name": run_name or rid[:8], "start": start_time or now, "end": None, "status": "RUNNING",
                          "tags": dict(tags or {}), "params": {}, "metrics": [], "files": {}}
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=rid))

    def log_batch(self, run_id, metrics=(), params=(), tags=(), **_):
        run = self.runs[run_id]
        run["metrics"].extend(metrics)
        run["params"].update({p.key: p.value for p in params})
        run["tags"].update({t.key: t.value for t in tags})

    def set_tag(self, run_id, key, value, **_):
        self.runs[run_id]["tags"][key] = str(value)

    def add_files(self, run_id, files: dict[str, bytes]) -> None:
        self.runs[run_id]["files"].update(files)

    def set_terminated(self, run_id, status=None, end_time=None):
        run = self.runs[run_id]
        run["status"], run["end"] = status or "FINISHED", end_time or int(time.time() * 1000)

    def commit(self, store, experiment_id: str, artifact_location: str) -> None:
        """Every recorded run in one transaction (the rows MLflow's own create_run / log_batch / set_terminated
        write), then the artifacts: written into a local artifact folder, else through the real client."""
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag
        from mlflow.utils.uri import append_to_uri_path
        from sqlalchemy import insert

        runs, tags, params, metrics, latest_rows = [], [], [], [], []
        for rid, run in self.runs.items():
            runs.append(dict(name=run["name"], run_uuid=rid, experiment_id=int(experiment_id),
                             artifact_uri=append_to_uri_path(artifact_location, rid, "artifacts"),
                             source_type="UNKNOWN", source_name="", entry_point_name="", user_id="",
                             status=run["status"], start_time=run["start"], end_time=run["end"], deleted_time=None,
                             source_version="", lifecycle_stage="active"))
            tags += [dict(run_uuid=rid, key=k, value=str(v))
                     for k, v in {"mlflow.runName": run["name"], **run["tags"]}.items()]
            params += [dict(run_uuid=rid, key=k, value=str(v)) for k, v in run["params"].items()]
            latest: dict[str, Any] = {}
            rows = {}
            for m in run["metrics"]:
                is_nan, value = store.sanitize_metric_value(m.value)
                rows[(m.key, m.timestamp, m.step, value, is_nan)] = (m, is_nan, value)
                if m.key not in latest or (m.step, m.timestamp) >= (latest[m.key][0].step, latest[m.key][0].timestamp):
                    latest[m.key] = (m, is_nan, value)
            metrics += [dict(run_uuid=rid, key=m.key, value=v, timestamp=m.timestamp, step=m.step, is_nan=nan)
                        for m, nan, v in rows.values()]
            latest_rows += [dict(run_uuid=rid, key=m.key, value=v, timestamp=m.timestamp, step=m.step, is_nan=nan)
                            for m, nan, v in latest.values()]
        # Core INSERTs on the models' tables (one DB-API executemany per table): the same rows as adding one ORM
        # object per row, without the ORM's per-row work, which took ~70% of the writer thread's CPU and competed with
        # Tune's loop for the GIL (py-spy, benchmarks/RESULTS.md section 15)
        with store.ManagedSessionMaker(read_only=False) as session:
            for model, rows_of in ((SqlRun, runs), (SqlTag, tags), (SqlParam, params), (SqlMetric, metrics),
                                   (SqlLatestMetric, latest_rows)):
                if rows_of:
                    session.execute(insert(model.__table__), rows_of)
        local = artifact_location.startswith("file:") or "://" not in artifact_location
        for rid, run in self.runs.items():
            if not run["files"]:
                continue
            if local:
                from mlflow.utils.file_utils import local_file_uri_to_path

                root = Path(local_file_uri_to_path(artifact_location)) / rid / "artifacts"
                for name, data in run["files"].items():
                    (root / name).parent.mkdir(parents=True, exist_ok=True)
                    (root / name).write_bytes(data)
            else:
                with tempfile.TemporaryDirectory() as d:
                    for name, data in run["files"].items():
                        (Path(d) / name).parent.mkdir(parents=True, exist_ok=True)
                        (Path(d) / name).write_bytes(data)
                    self.real.log_artifacts(rid, d)


_FAST: set[Path] = set()


_NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph", "beegfs", "9p", "fuse.sshfs",
               "glusterfs", "fuse.glusterfs"}


def _fast_sqlite(db: Path) -> None:
    """Commit without an fsync per transaction: WAL journal with synchronous=NORMAL (durable across a process crash,
    consistent across a power loss, where the ledger still has every result and `sync` relogs it). On a network
    filesystem WAL is unsafe (it needs shared memory between readers): there only synchronous=NORMAL. Each MLflow
    call is one transaction, so this is most of the per-trial cost on a slow disk (RESULTS.md section 15)."""
    db = db.resolve()
    if db in _FAST:
        return
    _FAST.add(db)
    import sqlite3

    import sqlalchemy

    wal = _filesystem(db.parent) not in _NETWORK_FS
    if wal:
        db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(db)   # persistent in the file: readers (mlflow ui) use WAL too
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        finally:
            conn.close()

    def on_connect(dbapi_conn, _record) -> None:
        if isinstance(dbapi_conn, sqlite3.Connection):
            row = dbapi_conn.execute("PRAGMA database_list").fetchone()
            if row and row[2] and Path(row[2]).resolve() in _FAST:
                dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    if len(_FAST) == 1:
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", on_connect)


def _filesystem(folder: Path) -> str:
    """The filesystem type holding `folder` (from /proc/mounts; "" when unknown)."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return ""
    folder = folder.resolve()
    best, kind = "", ""
    for point, fstype in mounts:
        if (str(folder) == point or str(folder).startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fstype
    return kind


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
    return registry.static_info(name)["level"] if name in registry else ""


