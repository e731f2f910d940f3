"""Trials on Ray Tune: one Tune trial per grid cell, each `workloads.trial.run` in a worker.

- A trial reports once, with its whole result. The driver's side (`RecordingScheduler`, Tune's scheduler) hands it
  to the ledger and the MLflow child run as each trial finishes (one writer for both, nothing lost if the driver dies
  later).
- Failures inside a trial (bad data, NaN scores) come back as failed results: deterministic, so not retried. A crashed
  worker (OOM, segfault) is a Tune error, retried `max_failures` times, then recorded as failed.
- Tune's auto CSV/JSON loggers are off (they cost ~300 KB of driver memory per trial at thousands of trials);
  actors are reused so a worker imports torch and loads a checkpoint once for many trials.

Overlap with the stages that feed the trials (docs/architecture.md, "Overlap"): a trial is fed to Tune only when its
inputs exist. Each trial lists its *needs* (its checkpoint and check, its render set, its text set: strings such as
"render:msrvtt/fog/3"); the producers (fine-tune tasks, the render stream of orchestrator/stages/render.py, the text
sets) call `ReadyGate.ready(need)` as each one is written. `GatedSearcher` is the Tune search algorithm that hands Tune
the next trial whose needs are all met, in plan order, and tells Tune "not yet" (None) while the rest wait; Tune keeps
scheduling, retrying and recording the trials it has. So Ray Tune stays the trial scheduler and the render cache stays
the hand-off: a trial reads its clips from the cache exactly as before, only later.

Waves: Ray Tune keeps a `Trial` object per trial on the driver until `Tuner.fit` returns (~11 KB a trial and its
JSON state at the fit's end: docs/notes/2026-11-results-history.md §15). A submission's trials run in one `Tuner.fit` by
default; `run_trials` can run several `Tuner.fit` one after another on the same gate (`wave`: each hands out at most
that many trials; its `GatedSearcher` says FINISHED once it has), which bounds what the driver holds at the cost of
a barrier at each wave's end (the next wave starts when the last trial of this one finishes, with fresh actors). A
wave also ends when it is idle (every trial it handed out finished, none ready for 2 s: `GatedSearcher`) while a
producer waits for resources its idle actors hold (or after 30 s idle), so that the producers get the cluster;
`run_trials` waits on the gate, holding no trial actor, and starts the next wave when a trial is ready. An idle wave
whose producers are running keeps its actors, saving a new wave's start.

Which cell each trial works on, in the Ray dashboard: Tune runs every trial as a `train` call of a reused actor, so
neither the actor nor that call can carry the cell (an actor's repr is read once, when it is created:
docs/results.md, step 4). Each trial therefore also holds a task named by its cell (`trial <MLflow run
name>`) on one zero-CPU `TrialsRunning` actor for as long as it runs: the dashboard's task list shows it RUNNING, then
FINISHED (tests/test_report_dashboard.py reads it through the dashboard's REST API).

Only Tune's public interfaces are used: `Tuner`, a `Searcher`, a `TrialScheduler` and `tune.report`.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import json
import logging
import os
import time
from typing import Any, Callable, NamedTuple
from dataclasses import asdict

import ray
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher

from orchestrator.config.schema import TRIALS_PER_WAVE
from orchestrator.planning.environment import TrialEnvironment
from orchestrator.record.mlflow_store import run_name
from orchestrator.run.gate import ReadyGate
from orchestrator.run.interrupts import raise_if_pending
from workloads.spec import TrialSpec


def trial_trainable(config: dict[str, Any], env: dict[str, Any], running=None) -> None:
    """The Tune function trainable: run one trial and report its full result once. `running`: the submission's
    `TrialsRunning` actor, which shows the trial's cell in the Ray dashboard while it runs (module docstring)."""
    from workloads.trial import run   # torch (heavy): only in the workers

    spec = TrialSpec.from_dict(config["spec"])
    environment = TrialEnvironment(**env)
    _name_worker(spec)
    if running is not None:
        running.running.options(name=f"trial {run_name(spec.to_dict())}").remote(spec.key)
    try:
        if environment.hook:
            call_hook(environment.hook, spec)
        result = run(spec, environment.context_for(spec))
    finally:
        if running is not None:
            running.finished.remote(spec.key)
    # where it ran, for the ledger: which node of a cluster, which worker process (tests/test_cluster.py reads them)
    where = {"ray_node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
    # the result as one string and no numeric metric: Tune keeps running statistics (six values and two deques) of
    # every number a trial reports, on the driver until its `Tuner.fit` ends, ~3 KB per metric and trial; nothing
    # here reads them (RecordingScheduler hands the result to the ledger)
    tune.report({"result_json": json.dumps({**result.to_dict(), **where})})


@ray.remote(num_cpus=0, max_concurrency=100_000)
class TrialsRunning:
    """One per `run_trials`: `running(key)`, called by a trial as it starts with the task name `trial <its cell>`,
    lasts until that trial calls `finished(key)` (or its retry starts, or the driver hears it crashed for good), so
    the Ray dashboard lists the task as RUNNING exactly while the trial runs. Async: the waits cost no thread, and
    the actor no CPU of the trials."""

    def __init__(self):
        self._waiting: dict[str, asyncio.Event] = {}
        self._early: set[str] = set()   # finished before its `running` arrived (calls from two processes)

    async def running(self, key: str) -> None:
        self._release(key)   # a retried trial: its crashed attempt ends here
        if key in self._early:
            self._early.discard(key)
            return
        event = self._waiting[key] = asyncio.Event()
        await event.wait()

    @ray.method(enable_task_events=False)   # not a row of the dashboard's task list: only `running` is
    async def finished(self, key: str) -> None:
        if not self._release(key):
            self._early.add(key)

    def _release(self, key: str) -> bool:
        event = self._waiting.pop(key, None)
        if event is not None:
            event.set()
        return event is not None


def call_hook(hook: str, spec: TrialSpec) -> None:
    """The trial hook "module:function" (`SubmitOptions.trial_hook` or MLVP_TRIAL_HOOK, docs/testing.md), called
    with the trial's spec in its worker before the trial runs: what it raises fails the attempt as a crashed worker
    would (Tune retries it `max_failures` times). Production trials have none."""
    module, _, name = hook.partition(":")
    if not module or not name:
        raise ValueError(f"trial hook {hook!r}: write it as module:function")
    getattr(importlib.import_module(module), name)(spec)


def _name_worker(spec: TrialSpec) -> None:
    """Title this worker process by the trial's cell, its MLflow run name (`ray::trial synthetic/v2t/clip4clip/
    tent/fog-5`), so `ps`/`top` on a node show which trial each worker runs. Ray 2.60's dashboard does not show
    this title (its task list shows `TrialsRunning`'s task instead). Ray retitles the worker at its next task."""
    try:
        import setproctitle   # small; only in the workers

        setproctitle.setproctitle(f"ray::trial {run_name(spec.to_dict())}")
    except Exception:  # a title is cosmetic: never fail a trial over it
        pass


def _short_name(trial) -> str:
    spec = TrialSpec.from_dict(trial.config["spec"])
    return f"{spec.backbone_label}_{spec.method_label}_{spec.direction}_{spec.cell}_{spec.key[:8]}"


def trial_error_message(trial) -> str:
    """One line for a trial Tune gave up on: the worker's own exception (`RuntimeError: ...`), not the RayTaskError
    traceback around it. Read from Tune's local copy in the trial folder: `trial.get_error()` reads the storage path,
    which Tune fills only when it next syncs, so in `on_trial_error` it returned nothing."""
    try:
        if trial.pickled_error_file and os.path.isfile(trial.pickled_error_file):
            import cloudpickle   # only to read a failed trial's pickled error

            with open(trial.pickled_error_file, "rb") as f:
                err = cloudpickle.load(f)
            cause = getattr(err, "cause", None) or err   # RayTaskError wraps the worker's exception
            text = str(cause).strip().splitlines()
            return f"{type(cause).__name__}: {text[0] if text else ''}".strip()
        text = ""
        if trial.error_file and os.path.isfile(trial.error_file):
            text = open(trial.error_file).read()
        text = text or str(trial.get_error() or "")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Failure #")]
        return lines[-1] if lines else "worker failed (no error recorded by Tune)"
    except Exception as err:  # never let bookkeeping kill the run
        return f"worker failed (its error could not be read: {type(err).__name__})"


class OneLineStateErrors(logging.Filter):
    """Tune saves its experiment state under the results directory after every trial; when that fails (a full disk)
    it logs a 20-line traceback each time. We do not need that state (the ledger is the record), so say it in one
    line, once per cause."""

    def __init__(self):
        super().__init__()
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and record.levelno >= logging.ERROR:
            err = record.exc_info[1]
            cause = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        elif "Traceback (most recent call last)" in message:
            # Ray Train's background syncer (the same state, copied to the storage path) puts the traceback in the
            # message itself: its last line is the error
            cause = message.strip().splitlines()[-1].strip()
        else:
            return True
        if cause not in self.said:
            self.said.add(cause)
            first = message.splitlines()[0] if message else ""
            where = first.split("'")[1] if first.count("'") >= 2 else "the results directory"
            print(f"Ray Tune could not save its experiment state under {where} ({cause}); the ledger keeps every "
                  "result", flush=True)
        return False


def _ignore(*args: Any) -> None:
    return None


class GatedSearcher(Searcher):
    """Tune search algorithm over a fixed list of trials: suggests each trial once, when its `ReadyGate` lets it; with
    a `quota`, at most that many (one wave of `run_trials`), then FINISHED.

    An idle wave ends when it blocks a producer: once every trial it handed out has finished and none is ready for
    `idle_s` seconds while a task or actor waits for resources (`starved`, by default `producers_waiting`), or after
    `idle_max_s` regardless, it says FINISHED (`ended_idle`) and `run_trials` waits on the gate itself. Tune, with no
    trial left to run, blocks for up to 600 s asking for the next one without stepping its actor manager
    (ray/tune/execution/tune_controller.py `_update_trial_queue`), so the trial actor it caches and the one it is
    stopping keep their CPUs and GPU shares; a producer needing them (a render actor on a small cluster, a fine-tune)
    could not start, its input never came, and the run stalled for the whole 600 s (tests/test_waves.py reproduces
    it). Ending every idle wave fixed that but cost a new wave each time the renders lagged the trials (a new
    `Tuner.fit` and cold trial actors: 20 s once in the render-stage test under the suite's load), so a wave whose
    producers are running keeps its actors."""

    def __init__(self, gate: ReadyGate, quota: int | None = None, idle_s: float = 2.0,
                 starved: Callable[[], bool] | None = None, idle_max_s: float = 30.0):
        super().__init__()
        self.gate = gate
        self.quota = quota
        self.handed = 0
        self.idle_s, self.idle_max_s = idle_s, idle_max_s
        self.starved = starved or producers_waiting
        self.ended_idle = False
        self._live: set[str] = set()          # trials handed out and not finished (Tune's trial ids)
        self._idle_since: float | None = None
        self._asked = 0.0                     # when `starved` was last asked (at most once a second)

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        raise_if_pending()
        if self.quota is not None and self.handed >= self.quota:
            return Searcher.FINISHED
        spec = self.gate.pop()
        if spec is None:
            if self._live:
                self._idle_since = None
            elif self._idle_since is None:
                self._idle_since = time.monotonic()
            elif self._gives_back(time.monotonic() - self._idle_since):
                self.ended_idle = True
                return Searcher.FINISHED
            return None
        if spec == ReadyGate.DONE:
            return Searcher.FINISHED
        self.handed += 1
        self._live.add(trial_id)
        self._idle_since = None
        return {"spec": spec.to_dict()}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self._live.discard(trial_id)

    def _gives_back(self, idle: float) -> bool:
        if idle >= self.idle_max_s:
            return True
        now = time.monotonic()
        if idle < self.idle_s or now - self._asked < 1.0:
            return False
        self._asked = now
        try:
            return bool(self.starved())
        except Exception:   # cannot tell: give the actors back, as when it can tell they are needed
            return True

    def save(self, checkpoint_path: str) -> None:
        # the ledger is our resume record (README "Nothing is lost on a crash"), not Tune's experiment state
        with open(checkpoint_path, "w") as f:
            json.dump({"handed_out": self.gate.handed_out}, f)

    def restore(self, checkpoint_path: str) -> None:
        return None

    def __getstate__(self):   # the gate holds a lock and the driver's state: meaningful only in this process
        return {"handed_out": self.gate.handed_out}

    def __setstate__(self, state):
        self.gate = ReadyGate([])
        self.quota, self.handed = None, 0


def producers_waiting() -> bool:
    """Whether a task or actor of the connected Ray cluster waits for resources: the demand the cluster's raylets
    report to the GCS (about once a second), read through Ray's autoscaler SDK as `ray status` reads it. Tune's trials
    ask through placement groups (the gang requests), so in an idle wave these single requests are the producers'
    (render actors, fine-tunes, asset tasks)."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(ray.get_runtime_context().gcs_address)
    return any(b.count > 0 for d in status.resource_demands.ray_task_actor_demand for b in d.bundles_by_count)


class FirstPendingScheduler(FIFOScheduler):
    """Tune's FIFO scheduling (the next trial to start is the first PENDING one in creation order), without walking
    the trials that have finished. Tune's FIFOScheduler asks every trial for its status on every step of its loop,
    finished ones included: quadratic in the trials of a `Tuner.fit`, and at 4,270 short trials the largest single cost
    of the driver's loop (py-spy, docs/notes/2026-11-results-history.md §15). A trial Tune has finished (TERMINATED) or
    given up on (ERROR) never becomes PENDING again within a `fit` (a crashed trial is requeued while RUNNING:
    ray/tune/execution/tune_controller.py `_requeue_trial`), so the finished prefix of Tune's list is skipped for good
    and the choice is the FIFO one (tests/test_waves.py compares the two)."""

    def __init__(self):
        super().__init__()
        self._finished_prefix = 0

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        raise_if_pending()   # Tune's loop asks on every step: a Ctrl-C swallowed by a finalizer stops it here
        trials = tune_controller.get_trials()
        start = self._finished_prefix
        while start < len(trials) and trials[start].status in (Trial.TERMINATED, Trial.ERROR):
            start += 1
        self._finished_prefix = start
        for wanted in (Trial.PENDING, Trial.PAUSED):
            for i in range(start, len(trials)):
                if trials[i].status == wanted:
                    return trials[i]
        return None


class RecordingScheduler(FirstPendingScheduler):
    """The driver's side of every trial, in Tune's scheduler (FIFO order: FirstPendingScheduler): hands each
    finished trial's result to `on_result` exactly once and a trial whose worker crashed (after Tune's retries) to
    `on_crash`.

    A scheduler rather than a Tune callback: to count the callbacks a user passes, Tune imports its MLflow, W&B and
    Comet integrations, MLflow itself included (~40 MB of the driver's memory, docs/notes/2026-11-results-history.md
    §15); with no callback passed it imports nothing. Tune gives the scheduler each result before the callbacks, and
    tells it of a trial's completion and final error where it tells them."""

    def __init__(self, on_result: Callable[[dict[str, Any]], None], on_crash: Callable[[dict[str, Any], str], None]):
        super().__init__()
        self.seen: set[str] = set()
        self.on_result, self.on_crash = on_result, on_crash
        self.crashed = 0    # trials handed to on_crash

    def __getstate__(self):
        # Tune pickles its scheduler into tuner.pkl for Tuner.restore; the hooks hold the driver's ledger, tracker
        # and console, which only mean something in this process. A restored copy records nothing.
        return {**self.__dict__, "seen": set(self.seen), "on_result": _ignore, "on_crash": _ignore}

    def on_trial_result(self, tune_controller, trial, result):
        raise_if_pending()
        if "result_json" in result and trial.trial_id not in self.seen:
            self.seen.add(trial.trial_id)
            self.on_result(json.loads(result["result_json"]))
        return self.CONTINUE

    def on_trial_error(self, tune_controller, trial):
        # Tune tells the scheduler of every crash, also of one it retries (retries left: the trial is marked ERROR,
        # then PENDING again); it gives up on a RUNNING trial with none left (should_recover False) or on a PENDING
        # one (its actor never started): that is the result
        if trial.status != Trial.PENDING and trial.should_recover():
            return
        if trial.trial_id not in self.seen:
            self.seen.add(trial.trial_id)
            self.crashed += 1
            self.on_crash(trial.config["spec"], trial_error_message(trial))


# seconds between saves of Tune's experiment state during a `Tuner.fit` (`_tune_settings_for_many_trials`)
EXPERIMENT_STATE_PERIOD_S = 60


@contextlib.contextmanager
def _tune_settings_for_many_trials():
    """Tune settings read when a `Tuner.fit` starts, set for its duration (a value the user set wins):

    - TUNE_MAX_PENDING_TRIALS_PG: as many pending trials (created, waiting for their placement group) as Tune allows
      its own grid search. Left at "auto", it allows max(200, 1.1 x the cluster's CPUs) for grid/random search but
      **one** for any other search algorithm, ours included (ray/tune/execution/tune_controller.py
      `_get_max_pending_trials`). With one, Tune creates a trial, waits for its placement group, then creates the
      next: trial starts are serialised on the driver, and at thousands of short trials ours ran at half plain Tune's
      rate (docs/notes/2026-11-results-history.md §15). A gated trial is only created once its inputs are ready
      (GatedSearcher), so a pending trial never waits on a render.
    - TUNE_GLOBAL_CHECKPOINT_S: Tune's experiment state (every trial's state as JSON, for `Tuner.restore`; the
      ledger is our resume record) is saved every `EXPERIMENT_STATE_PERIOD_S`, not every 10-20 s as Tune's "auto"
      does: those saves took ~9% of the driver loop's CPU at 4,270 short trials (py-spy,
      docs/notes/2026-11-results-history.md §15). Not only at the start and end either: Tune encodes a trial's state
      when a save first finds it changed, so with no save between, the final save encoded every trial of the wave
      after the last one ended (~1.7 ms a trial on 2 cores: 1.6-1.8 s at 960 trials, the driver idle meanwhile;
      docs/notes/2026-11-29-tune-end.md)."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    cpus = ray.cluster_resources().get("CPU", 1.0) if ray.is_initialized() else 1.0
    wanted = {"TUNE_MAX_PENDING_TRIALS_PG": str(max(200, int(cpus * 1.1))),
              "TUNE_GLOBAL_CHECKPOINT_S": str(EXPERIMENT_STATE_PERIOD_S)}
    ours = {k: v for k, v in wanted.items() if os.environ.get(k, "auto") == "auto"}
    os.environ.update(ours)
    try:
        yield
    finally:
        for k in ours:
            os.environ.pop(k, None)


class TrialsRun(NamedTuple):
    """What `run_trials` did: Tune experiments run (waves), trials handed to Tune, trials Tune gave up on (crashed
    workers after retries), seconds. The ledger holds the results."""
    waves: int
    trials: int
    errors: int
    seconds: float


def run_trials(specs: list[TrialSpec], env: TrialEnvironment | None, *, storage_path: str, name: str,
               cpus_per_trial: float, gpus_per_trial: float, max_failures: int, max_concurrent: int | None,
               on_result: Callable[[dict[str, Any]], None], on_crash: Callable[[dict[str, Any], str], None],
               gate: ReadyGate | None = None, trainable: Callable | None = None, reuse_actors: bool = True,
               wave: int | None = TRIALS_PER_WAVE) -> TrialsRun:
    """Run the trials on the connected Ray cluster, in waves of at most `wave` trials (None: one wave), each a
    `Tuner.fit` named `name`, then `name-w2`, ... under `storage_path`. With a `gate`, trials start as their inputs
    become ready (GatedSearcher; a wave with nothing left to run and nothing ready ends, and the next starts when a
    trial is ready); without one, all of them are ready. Stops when no trial is left or the gate is
    closed; a KeyboardInterrupt propagates. `trainable` replaces `trial_trainable` (benchmarks/cluster_sim.py runs
    the same hand-off with trials that sleep their cost)."""
    if wave is not None and wave < 1:
        raise ValueError(f"wave: at least 1 trial, got {wave}")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    gate = gate if gate is not None else ReadyGate(specs)
    running = TrialsRunning.remote() if trainable is None else None   # the cells in the dashboard (module docstring)
    if running is not None:
        def crashed(spec: dict[str, Any], message: str) -> None:   # Tune gave up on it: its task ends too
            running.finished.remote(TrialSpec.from_dict(spec).key)
            on_crash(spec, message)
        on_crash_here = crashed
    else:
        on_crash_here = on_crash
    fn = trainable or tune.with_parameters(trial_trainable, env=asdict(env), running=running)
    trainable = tune.with_resources(fn, {"cpu": cpus_per_trial, "gpu": gpus_per_trial})
    t0 = time.time()
    # the ledger is our record: with Tune's file loggers off, its ResultGrid cannot read per-trial files and would
    # warn once per trial
    analysis_log = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level = analysis_log.level
    analysis_log.setLevel(logging.ERROR)
    state_logs = [logging.getLogger(n) for n in ("ray.tune.execution.experiment_state", "ray.train._internal.syncer")]
    one_line = OneLineStateErrors()
    for log in state_logs:
        log.addFilter(one_line)
    waves = trials = errors = 0
    try:
        while not gate.closed:
            raise_if_pending()
            left = gate.remaining()
            if left == 0:
                break
            if not gate.wait(timeout=1.0):   # none ready yet: wait here, holding no trial actor (GatedSearcher)
                continue
            if waves:
                # the last wave's Trial objects (the Tuner, searcher and scheduler held them, dropped below): freed
                # before this wave makes its own, and not after the last wave, where the driver is about to finish
                gc.collect()
            quota = left if wave is None else min(wave, left)
            searcher = GatedSearcher(gate, quota)
            scheduler = RecordingScheduler(on_result, on_crash_here)
            waves += 1
            tuner = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(reuse_actors=reuse_actors, max_concurrent_trials=max_concurrent,
                                            search_alg=searcher, scheduler=scheduler,
                                            num_samples=quota,
                                            trial_name_creator=_short_name, trial_dirname_creator=_short_name),
                run_config=tune.RunConfig(name=name if waves == 1 else f"{name}-w{waves}", storage_path=storage_path,
                                          verbose=0, failure_config=tune.FailureConfig(max_failures=max_failures),
                                          callbacks=[]),   # none: see RecordingScheduler
            )
            with _tune_settings_for_many_trials():
                tuner.fit()
            raise_if_pending()
            errors += scheduler.crashed
            handed, ended_idle = searcher.handed, searcher.ended_idle
            trials += handed
            # the Tuner, and the searcher and scheduler Tune handed its trials to, hold this wave's Trial objects:
            # dropped before the next wave starts, not when it replaces them
            del tuner, searcher, scheduler
            if handed < quota and not ended_idle:   # the gate said FINISHED (closed, none left)
                break
    finally:
        analysis_log.setLevel(level)
        for log in state_logs:
            log.removeFilter(one_line)
        if running is not None:
            with contextlib.suppress(Exception):   # Ray already gone (a lost head): nothing to end, keep the error
                ray.kill(running)
    return TrialsRun(waves, trials, errors, time.time() - t0)
