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
import platform
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from orchestrator.record.writer import BackgroundLogging, TrialLogWriter
from workloads.perturbations.text import TEXT_PERTURBATIONS
from workloads.perturbations.video import VIDEO_PERTURBATIONS
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
            "backbone", "backbone_variant", "faithful", "config", "seed")
# a trial run's attempt: its ledger entry's `recorded_at`, so a run of an earlier attempt of the cell (a re-run of a
# damaged, failed or --rerun cell) is told from this one's (orchestrator/record/sync.py `current_run`)
ATTEMPT_TAG = "mlvp.recorded_at"
# on a run of an earlier attempt, once its cell has a newer run: that run's id. The UI shows one current run per cell
# with the filter `tags.mlvp.superseded_by IS NULL`; `sync` neither counts nor matches a superseded run
SUPERSEDED_TAG = "mlvp.superseded_by"


def attempt_tag(recorded_at: float) -> str:
    """`ATTEMPT_TAG`'s value for an entry's `recorded_at` (a float's repr: it reads back from JSON the same)."""
    return repr(float(recorded_at))


def default_tracking_uri(results_dir: str | os.PathLike) -> str:
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written; the message is one line with what to do."""


class CorruptStore(TrackingUnavailable):
    """The local sqlite store is not a readable database (garbage written into it, a torn copy); the ledger is the
    record, so the store is rebuilt from it (`corrupt_store_line`)."""


def corrupt_store_line(tracking_uri: str, problem: str, grid: str | None = None) -> str:
    """The one line for a corrupt sqlite store: what is wrong and how to rebuild it from the ledger."""
    path = Path(tracking_uri[len("sqlite:///"):])
    return (f"MLflow store {tracking_uri} is corrupt ({problem}); the ledger has every result: move the file away "
            f"(mv '{path}' '{path}.corrupt') and run `mlvp sync {grid or 'GRID'}`, which rebuilds the store from the "
            f"ledger")


def sqlite_problem(path: Path) -> str | None:
    """Why a sqlite file is not a readable database ("file is not a database", "database disk image is
    malformed"), or None. Read only; a store busy with another writer is not corrupt."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            row = con.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError:   # locked, busy, unreadable for now: MLflow's own error says which
        return None
    except sqlite3.DatabaseError as err:
        return str(err)
    if row and row[0] == "ok":
        return None
    found = " ".join(str(row[0] if row else "no answer").split())   # its report spans lines: one, bounded
    return f"integrity check: {found[:200]}"


def is_corrupt_store_error(err: BaseException) -> bool:
    """Whether an error from MLflow's SQL store says the sqlite file is damaged (SQLAlchemy's DatabaseError text)."""
    text = str(getattr(err, "message", err)).lower()
    return "file is not a database" in text or "database disk image is malformed" in text


class StoreOfAnotherFolder(TrackingUnavailable):
    """The local store of this results folder keeps a grid's artifacts in another results folder's `mlartifacts/`:
    the folder was copied or moved. Nothing is logged there (it would write into the other folder)."""


def check_store(tracking_uri: str, timeout: float = 5.0, grid: str | None = None) -> None:
    """Fail fast, before Ray starts, when the store is unreachable: an http(s) server must answer /health within
    `timeout`; a sqlite file's folder must be writable and the file, where it exists, a readable database
    (CorruptStore, its line naming `mlvp sync GRID`). (MLflow's own client retries for minutes, then prints a
    traceback.)"""
    if tracking_uri.startswith(("http://", "https://")):
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
        path = Path(tracking_uri[len("sqlite:///"):])
        if path.is_file() and (problem := sqlite_problem(path)):
            raise CorruptStore(corrupt_store_line(tracking_uri, problem, grid))


def sqlite_file(tracking_uri: str) -> Path | None:
    """The file of a local sqlite store (None for a server or another kind of store)."""
    return Path(tracking_uri[len("sqlite:///"):]) if tracking_uri.startswith("sqlite:///") else None


def empty_store_template(templates: str | os.PathLike) -> Path:
    """Where the cache keeps an empty store that this MLflow version created and migrated: one per version, since a
    store's schema is its version's."""
    from importlib.metadata import version   # the version without importing MLflow

    return Path(templates) / f"empty-store-mlflow-{version('mlflow')}.db"


def copy_new_file(source: Path, target: Path) -> bool:
    """Copy `source` to `target` whole or not at all, never over an existing file (two drivers racing: the second
    keeps the first's). Returns whether this call made `target`."""
    import shutil

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        os.link(tmp, target)   # fails if target exists: a store is never replaced
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


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
    """One MLflow store, through `MlflowClient`'s public calls only: a trial run is `create_run` (with its tags),
    one `log_batch` (params, metrics and the per-batch R@1 steps), its artifacts (`log_dict` / `log_text`) and
    `set_terminated`. A local sqlite store keeps each grid's artifacts beside it, under `<results>/mlartifacts/`."""

    def __init__(self, tracking_uri: str, results_dir: str | os.PathLike, templates: str | os.PathLike | None = None):
        """`templates`: a cache folder where a new local sqlite store is started from an empty store this MLflow
        version already created (`empty_store_template`): MLflow's schema migrations run once per cache and version
        instead of once per results folder (4.7 CPU-s of every first submission: docs/notes/2026-11-29-suite-time.md).
        The first new store made with that folder, right after MLflow created it and before anything is written to
        it, becomes the template."""
        from mlflow.tracking import MlflowClient  # MLflow (~90 MB, 1-2 s): only where a store is opened

        self.uri = tracking_uri
        self.results_dir = Path(results_dir).resolve()
        db = sqlite_file(tracking_uri)
        template = empty_store_template(templates) if templates is not None and db is not None else None
        fresh = db is not None and not db.exists()
        if fresh and template is not None and template.is_file():
            copy_new_file(template, db)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        if fresh and template is not None and not template.is_file():
            self.client.search_experiments(max_results=1)   # MLflow creates and migrates the store here
            if not any(db.with_name(db.name + end).exists() for end in ("-journal", "-wal")):   # nothing pending
                copy_new_file(db, template)
        self._experiments: dict[str, str] = {}      # grid name -> experiment id (looked up once, not per trial)
        self._writer: TrialLogWriter | None = None

    def log_trials(self, parent_id: str, grid_name: str, entries: list[dict[str, Any]]) -> list[str]:
        """`log_trial` for each entry, in order (one call from the driver for many runs when MLflow runs in its own
        process: TrackerProcess). Returns the run ids; the first error is raised, the runs logged before it stay."""
        return [self.log_trial(parent_id, grid_name, e) for e in entries]

    def experiment(self, grid_name: str) -> str:
        if grid_name in self._experiments:
            return self._experiments[grid_name]
        self._experiments[grid_name] = eid = self._experiment(grid_name)
        return eid

    def _experiment(self, grid_name: str) -> str:
        name = f"mlvp/{grid_name}"
        exp = self.client.get_experiment_by_name(name)
        own = self._local_artifacts(grid_name)
        if exp is not None:
            self._refuse_other_folder(exp.artifact_location, grid_name)
            if exp.tags.get(KIND_TAG) != KIND:
                self.client.set_experiment_tag(exp.experiment_id, KIND_TAG, KIND)
            return exp.experiment_id
        # mlflow's default is ./mlruns relative to wherever the user stands; keep artifacts beside the store
        return self.client.create_experiment(name, artifact_location=own.as_uri() if own else None,
                                             tags={KIND_TAG: KIND})

    def _local_artifacts(self, grid_name: str) -> Path | None:
        """Where a local store (sqlite file, or a path) of this results folder keeps a grid's artifacts."""
        if self.uri.startswith("sqlite:") or "://" not in self.uri:
            return self.results_dir / "mlartifacts" / grid_name
        return None

    def _refuse_other_folder(self, location: str | None, grid_name: str) -> None:
        """A grid's artifacts are logged in this results folder's `mlartifacts/` or not at all: a store copied or
        moved with its folder still names the old folder's (MLflow keeps absolute locations), and logging there
        would write into it."""
        if not location or not location.startswith("file:"):
            return

        where = Path(unquote(urlparse(location).path))
        if where.parent.name == "mlartifacts" and where.parent.parent != self.results_dir:
            raise StoreOfAnotherFolder(
                f"MLflow store {self.uri} keeps the artifacts of experiment mlvp/{grid_name} in {where}, another "
                f"results folder's (this one was copied or moved from {where.parent.parent}): nothing is logged "
                f"there; the ledger, tables and report are written here; to track this folder, give it a store of "
                f"its own: --tracking-uri sqlite:///{self.results_dir / 'mlflow-here.db'}")

    def start_parent(self, grid, grid_text: str, summary: dict[str, Any], pid: int | None = None) -> str:
        """The submission's parent run, tagged with the host and the driver's `pid` (this process by default):
        `close_stale_parents` closes it once that process is gone. `grid` needs `name` and `source`."""
        exp = self.experiment(grid.name)
        run = self.client.create_run(exp, run_name=f"{grid.name} submission",
                                     tags={"mlvp.kind": "submission", "mlvp.grid": grid.name,
                                           "mlvp.grid_file": grid.source, "mlvp.host": platform.node(),
                                           "mlvp.pid": str(pid or os.getpid())})
        rid = run.info.run_id
        params = {k: v for k, v in summary.items() if isinstance(v, (str, int, float, bool))}
        self._log_batch(rid, params=params)
        self.client.log_text(rid, grid_text, Path(grid.source).name or "grid.yaml")
        return rid

    def log_trial(self, parent_id: str, grid_name: str, entry: dict[str, Any]) -> str:
        """A child run for one trial result (ledger entry). Failed trials become FAILED runs with the error."""
        spec = entry["spec"]
        exp = self.experiment(grid_name)
        tags = {"mlflow.parentRunId": parent_id, "mlvp.kind": "trial", "mlvp.trial_key": entry["key"],
                "mlvp.status": entry["status"], **{k: str(spec[k]) for k in TAG_AXES if spec.get(k) not in (None, "")}}
        if entry.get("recorded_at") is not None:
            tags[ATTEMPT_TAG] = attempt_tag(entry["recorded_at"])
        level = _level(spec)
        if level:
            tags["level"] = level
        if entry.get("fallbacks"):
            tags["mlvp.fallbacks"] = "; ".join(entry["fallbacks"])[:4900]
        if entry.get("error"):
            tags["mlvp.error"] = entry["error"][:4900]
        if entry.get("method_faithful") is not None:   # false: a method derived from its paper (no authors' code)
            tags["mlvp.method_faithful"] = str(entry["method_faithful"])
        if entry.get("notes"):
            tags["mlvp.notes"] = "; ".join(entry["notes"])[:4900]
        rid = self.client.create_run(exp, run_name=run_name(spec), tags=tags).info.run_id
        # R1/R5/R10 = R@1/5/10 in percent (mlflow metric names cannot contain '@')
        metrics = dict(entry.get("metrics", {}))
        metrics.update({f"time_{k}": v for k, v in entry.get("timings", {}).items()})
        metrics["n_queries"] = entry.get("n_queries", 0)
        metrics["n_dropped"] = len(entry.get("dropped", []))
        if entry.get("faithful_renders") is not None:
            metrics["faithful_renders"] = entry["faithful_renders"]
        # R@1 of each stream batch as a step metric: the UI's chart of `batch_R1` shows adaptation over the stream
        # each method option as a param of its own too (`option.lr`), so a search's runs sort and plot by them
        options = {f"option.{k}": v for k, v in json.loads(spec.get("options") or "{}").items()}
        # and each backbone option (`backbone_option.ocr`): TCD with and without OCR filter apart
        options.update({f"backbone_option.{k}": v
                        for k, v in json.loads(spec.get("backbone_options") or "{}").items()})
        # the running R@1 over the stream (docs/protocols.md), step = queries scored so far: the chart view compares
        # methods along one stream; a multi-segment trial's R@1 per segment, step = the segment's place in the stream
        points = {"running_R1": [(int(q), r) for q, r in entry.get("running_R1") or []]}
        for s, seg in enumerate(entry.get("segments") or []):
            points[f"R1.seg.{seg['cell']}"] = [(s, seg.get("R1"))]
        self._log_batch(rid, params={**{k: spec[k] for k in SPEC_FIELDS if k in spec}, **options}, metrics=metrics,
                        steps={"batch_R1": entry.get("batch_R1") or []}, points=points)
        self.client.log_dict(rid, {"k": spec.get("hub_k"), "counts": entry.get("k_occurrence", [])},
                             "k_occurrence.json")
        if entry.get("dropped"):
            self.client.log_dict(rid, entry["dropped"], "dropped_queries.json")
        if entry.get("traceback"):
            self.client.log_text(rid, entry["traceback"], "traceback.txt")
        self.client.set_terminated(rid, status="FINISHED" if entry["status"] == "ok" else "FAILED")
        return rid

    def close_stale_parents(self, grid_name: str) -> list[str]:
        """Submissions of this grid whose driver died (killed, machine reset) leave their parent run RUNNING; close
        the ones started on this host by a process that no longer exists as KILLED, with the number of trials they
        had logged. Parents on other hosts are left alone (this host cannot tell whether they still run)."""
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
        """(trial key, status) -> run id of the newest current (not superseded) trial run of each in this store."""
        out: dict[tuple[str, str], str] = {}
        for key, runs in self.current_trial_runs(grid_name).items():
            for status, rid, _ in runs:
                out.setdefault((key, status), rid)
        return out

    def current_trial_runs(self, grid_name: str) -> dict[str, list[tuple[str, str, str]]]:
        """Trial key -> (status, run id, attempt: `ATTEMPT_TAG`, "" on runs logged before it) of every trial run of
        the grid in this store that is not superseded (`SUPERSEDED_TAG`), newest first (a page of `search_runs` at a
        time; the superseded ones are left out here, not in the query, which an older server may not parse)."""
        exp = self.client.get_experiment_by_name(f"mlvp/{grid_name}")
        out: dict[str, list[tuple[str, str, str]]] = {}
        if exp is None:
            return out
        token = None
        while True:
            page = self.client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'", max_results=5000,
                                           page_token=token)
            for run in page:
                tags = run.data.tags
                if SUPERSEDED_TAG not in tags:
                    out.setdefault(tags.get("mlvp.trial_key", ""), []).append(
                        (tags.get("mlvp.status", ""), run.info.run_id, tags.get(ATTEMPT_TAG, "")))
            token = page.token
            if not token:
                return out

    def supersede(self, grid_name: str, key: str, current: str) -> list[str]:
        """Tag every other trial run of trial `key` as superseded by run `current` (`SUPERSEDED_TAG`, and a note the
        UI shows on the run's page); returns the runs tagged now."""
        exp = self.experiment(grid_name)
        done, token = [], None
        while True:
            page = self.client.search_runs([exp], f"tags.`mlvp.trial_key` = '{key}' and tags.`mlvp.kind` = 'trial'",
                                           max_results=1000, page_token=token)
            for run in page:
                rid = run.info.run_id
                if rid != current and SUPERSEDED_TAG not in run.data.tags:
                    self.client.set_tag(rid, SUPERSEDED_TAG, current)
                    self.client.set_tag(rid, "mlflow.note.content",
                                        f"Superseded by run {current}: a later attempt of this trial (the ledger's).")
                    done.append(rid)
            token = page.token
            if not token:
                return done

    def finish_parent(self, parent_id: str, metrics: dict[str, float], files: list[Path], status: str) -> None:
        self._log_batch(parent_id, metrics=metrics)
        self.log_outputs(parent_id, files)
        self.client.set_terminated(parent_id, status=status)

    def log_outputs(self, run_id: str, files: list[Path]) -> None:
        """The grid's tables under `tables/`, its report (orchestrator/report/page.py: index.html, Markdown, Parquet,
        plots/*.png) under `report/` keeping its folders, so the run's artifact page opens the report's files. Only
        into this results folder's artifacts (`_refuse_other_folder`)."""
        run = self.client.get_run(run_id)
        self._refuse_other_folder(run.info.artifact_uri.rsplit("/", 2)[0] if run.info.artifact_uri else None,
                                  run.data.tags.get("mlvp.grid", ""))
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
    def _log_batch(self, run_id: str, params: dict | None = None, metrics: dict | None = None,
                   steps: dict[str, list[float]] | None = None,
                   points: dict[str, list[tuple[int, float]]] | None = None) -> None:
        """Params, metrics (step 0) and step metrics (`steps`: name -> value per step 0, 1, ...; `points`: name ->
        (step, value) pairs) in one `log_batch` when they fit MLflow's limits (100 params, 1,000 metrics a call), else
        in as many as they need."""
        from mlflow.entities import Metric, Param   # MLflow (seconds): only in the process that logs to it

        now = int(time.time() * 1000)
        ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        ms = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if v is not None]
        ms += [Metric(k, float(v), now, step) for k, values in (steps or {}).items()
               for step, v in enumerate(values) if v is not None]
        ms += [Metric(k, float(v), now, int(step)) for k, pairs in (points or {}).items()
               for step, v in pairs if v is not None]
        if len(ps) <= 100 and len(ms) <= 1000:
            self.client.log_batch(run_id, params=ps, metrics=ms)
            return
        for i in range(0, len(ps), 100):
            self.client.log_batch(run_id, params=ps[i:i + 100])
        for i in range(0, len(ms), 1000):
            self.client.log_batch(run_id, metrics=ms[i:i + 1000])


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
    # a searched configuration and a seed other than 0 name themselves: .../tent/fog-5/random-3/seed1
    return (f"{source}{s.dataset}/{s.direction}/{s.backbone_label}/{s.method_label}/{s.cell}"
            + (f"/{s.config}" if s.config else "") + (f"/seed{s.seed}" if s.seed else ""))


def _level(spec: dict[str, Any]) -> str:
    """The paper's level of the cell's perturbation, registry metadata: low / mid / high for the video types,
    character / word / sentence for the text types; "" for clean and mixed cells."""
    name = spec.get("perturbation")
    registry = VIDEO_PERTURBATIONS if spec.get("direction", "v2t") == "v2t" else TEXT_PERTURBATIONS
    return registry.static_info(name)["level"] if name in registry else ""
