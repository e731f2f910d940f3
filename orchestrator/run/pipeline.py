"""The producers of a submission's trial inputs, beside Ray Tune (orchestrator/run/submit.py): the render stream,
the fine-tune tasks and the stage thread (checks, prepared assets, text sets)."""
from __future__ import annotations

import threading
import time
from typing import Any
from dataclasses import dataclass, replace

from rich.console import Console
from rich.markup import escape

from orchestrator.config.assets import dataset_assets
from orchestrator.planning.clean_check import CheckReport, check_cases
from orchestrator.planning.environment import checkpoint_paths, models_to_make
from orchestrator.planning.keys import TEXT_SETS, CheckpointKey, RenderSet
from orchestrator.planning.plan import Plan
from orchestrator.planning.render_sets import cost_ordered_sets, ordered_sets
from orchestrator.planning.resources import first_finetune_cpus, render_actors, trial_slots
from orchestrator.stages.cluster import current_cluster
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.recorder import TrialColumns
from orchestrator.run.options import SubmitOptions, SubmitReport
from orchestrator.stages.assets import prepare_assets, prepares_assets
from orchestrator.stages.check import refuse_misses, run_check
from orchestrator.stages.finetune import first_models, launch_models, model_line
from orchestrator.stages.render import RenderStream
from orchestrator.stages.text_render import render_text_sets
from workloads.spec import CLEAN


@dataclass(frozen=True)
class HeldFineTunes:
    """Fine-tunes held back until the render sets go first (orchestrator/planning/resources.py `first_finetune_cpus`):
    they launch once `needs` (those sets' gate needs) are ready, on `cpus` CPUs each and `first_cpus` for the first."""

    needs: list[str]
    cpus: int
    first_cpus: int


class Pipeline:
    """The producers of a submission's trial inputs, beside Ray Tune (module docstring): the render stream, the
    fine-tune tasks and the stage thread (checks, prepared assets, text sets)."""

    def __init__(self, plan: Plan, gate, ledger: TrialLedger, console: Console, progress, opts: SubmitOptions,
                 report: SubmitReport, submission: str):
        self.plan, self.gate, self.ledger, self.console, self.progress = plan, gate, ledger, console, progress
        self.opts, self.report, self.submission = opts, report, submission
        self.checkpoints = checkpoint_paths(plan)
        self.checked = 0                    # clean source cells of the list to run that `check` ran
        self.text = None
        self.error: BaseException | None = None
        self._stopped = threading.Event()
        self.stream = None
        self.slots = 1.0                    # trials at once on the cluster (`trial_slots`), set by `start`
        self.deferred: list = []
        self.model_refs: dict[str, Any] = {}
        self.to_make: set[str] = set()      # checkpoint paths this submission makes, set by `start` before launching
        # set by `start` where the first fine-tunes wait for the render sets (they take the node); None once launched
        self.held: HeldFineTunes | None = None
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._stage, name="submit-stages", daemon=True)

    def start(self) -> None:
        plan = self.plan
        rt = plan.grid.runtime
        cluster = current_cluster()
        self.slots = trial_slots(rt, cluster)
        actors = render_actors(rt, cluster)
        finetune_cpus = max(1, int(cluster.cpus) - actors)
        first = first_models(plan)
        self.to_make = {str(plan.model_path(key)) for key in models_to_make(plan)}
        gating = all(self.checkpoints[CheckpointKey.of(t).name]["path"] in self.to_make
                     for t in self.gate.specs())
        first_cpus = first_finetune_cpus(rt, cluster, len(first), gating)
        if first_cpus:   # nothing else has work until the render sets and the first fine-tunes are done: both
            actors = cluster.largest_node_cpus   # take the node, the sets first, so the trials start as those end
        sets = cost_ordered_sets(plan, ordered_sets(plan, self.gate.specs()), self.gate.specs(),
                                 render_cpus=actors, trial_slots=self.slots)
        self.deferred = [rs for rs in sets if prepares_assets(rs.perturbation)]
        self.stream = RenderStream(plan, self.gate.ready, actors=actors, progress=self.progress,
                                   assets={n: dataset_assets(plan.grid, n) for n in plan.renders})
        now = [rs for rs in sets if rs not in self.deferred]
        self.stream.add(now)
        self.t0 = time.time()
        if first_cpus:
            self.held = HeldFineTunes([rs.need for rs in now], finetune_cpus, first_cpus)
            names, many = " and ".join(f"{k.backbone}/{k.source}" for k in first), len(first) > 1
            self.console.print(f"  no trial can start before {names} {'are' if many else 'is'} fine-tuned: rendering "
                               f"first on {actors} CPUs, then the fine-tune{'s' if many else ''} on {first_cpus} CPUs"
                               f"{' each' if many else ''}")
        else:
            self.model_refs = launch_models(plan, self.console, cpus=finetune_cpus)
        self._thread.start()

    # -- the stage thread ----------------------------------------------------------------------------------------
    def _stage(self) -> None:
        try:
            self._stages()
        except BaseException as err:  # noqa: BLE001 - handed to the driver: no new trials, raised after Tune ends
            if not self._stopped.is_set():
                self.error = err
            self.gate.close(err)
            if self.stream is not None:
                self.stream.stop()

    def _stages(self) -> None:
        import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

        plan = self.plan
        pending = dict(self.model_refs)                    # checkpoint path -> task
        made: set[str] = {m["path"] for m in self.checkpoints.values() if m["path"] not in self.to_make}
        groups = list(dict.fromkeys(c.checkpoint for c in check_cases(plan)))
        reports: list = []
        embedders = {self.checkpoints[k.name]["path"] for d, (k, _, _) in plan.embedders.items()
                     if k is not None and any(rs.dataset == d for rs in self.deferred)}
        stand_ins = {self.checkpoints[j.stand_in.name]["path"] for j in plan.text_sets
                     if j.stand_in is not None}
        assets_done, text_done = not self.deferred, not plan.text_sets
        while not self._stopped.is_set():
            if self.held is not None and self._ready(self.held.needs):
                self.model_refs = launch_models(plan, self.console, cpus=self.held.cpus,
                                                first_cpus=self.held.first_cpus)
                pending.update(self.model_refs)
                self.held = None
            for group in [g for g in groups if self.checkpoints[g.name]["path"] in made]:
                groups.remove(group)
                reports.append(self._check(group))
                self.report.check = _merge(reports, self.opts.tolerance)
            if not assets_done and embedders <= made:
                assets_done = True
                self._prepare_assets()
            if not text_done and stand_ins <= made:
                text_done = True
                self._text_sets()
            if not groups and assets_done and text_done and self.held is None:
                break
            if not pending:
                if self.held is not None:
                    time.sleep(0.2)
                    continue
                raise RuntimeError(f"internal: checks {groups} wait for checkpoints that are not being made")
            done, _ = ray.wait(list(pending.values()), num_returns=1, timeout=1.0)
            for path, ref in list(pending.items()):
                if ref in done:
                    record = ray.get(ref)   # a failed fine-tune raises here: the submission stops
                    del pending[path]
                    made.add(path)
                    self.console.print(model_line(plan, path, record, time.time() - self.t0))
        if self.stream is not None:
            self.stream.close()

    def _wait(self, needs: list[str]) -> None:
        while not self._ready(needs):
            time.sleep(0.1)

    def _ready(self, needs: list[str]) -> bool:
        """Whether these render sets are ready; raises where they never will be (stopped, the stream broken)."""
        if all(self.gate.is_ready(n) for n in needs):
            return True
        if self._stopped.is_set():
            raise KeyboardInterrupt
        if self.stream.error is not None or not self.stream.alive():
            self.stream.join(0)      # re-raises the render stream's error
            missing = [n for n in needs if not self.gate.is_ready(n)]
            raise RuntimeError(f"render stream ended before {missing[:3]}")
        return False

    def _check(self, group: CheckpointKey):
        """The check of one checkpoint (all its targets), once its clean render sets are ready; then the gate. A
        target whose grid renders no clean set (`clean: false` with v2t queries only) has none to wait for:
        `run_check` renders the clean clips it reads itself (orchestrator/stages/check.py `render_clean`)."""

        trials = [t for t in self.plan.trials if CheckpointKey.of(t) == group]
        targets = list(dict.fromkeys(t.dataset for t in trials))
        self._wait([RenderSet(d, CLEAN, 0).need for d in targets if (CLEAN, 0) in self.plan.renders.get(d, [])])
        report = run_check(replace(self.plan, trials=trials), self.checkpoints, self.ledger, self.console,
                           self.opts.tolerance, submission=self.submission, columns=TrialColumns.for_plan(self.plan))
        refuse_misses(report, self.opts.force, self.console)
        fresh = {c.case.specs[c.direction].key for c in report.comparisons
                 if c.metrics is not None and not c.case.reused.get(c.direction)}
        self.checked += self.gate.drop(fresh)
        self.gate.ready(group.need)
        return report

    def _prepare_assets(self) -> None:
        renders = {d: [c for c in cells if RenderSet(d, *c) in self.deferred]
                   for d, cells in self.plan.renders.items()}
        sub = replace(self.plan, renders={d: c for d, c in renders.items() if c})
        _, video_assets = prepare_assets(sub, self.checkpoints, self.console)
        self.stream.add(self.deferred, video_assets)

    def _text_sets(self) -> None:

        self.text = render_text_sets(self.plan, self.checkpoints, self.console, progress=self.progress)
        self.gate.ready(TEXT_SETS)

    # -- the driver's side -------------------------------------------------------------------------------------
    def finish(self) -> None:
        """After Tune: wait for what no remaining trial needed (render sets of cells already done), then raise what
        stopped a stage (CheckFailed, a failed fine-tune)."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        if self.gate.error is not None:
            raise self.gate.error
        self.stream.join()

    def stop(self) -> None:
        self._stopped.set()
        self.gate.close()
        if self.stream is not None:
            self.stream.stop()

    def print_render(self, console: Console) -> None:
        summary = self.stream.summary
        console.print(summary.line())
        if self.text is not None:
            console.print(self.text.line())
            for f in self.text.failures[:10]:
                console.print(f"  [red]text set failed[/] {f['set']}: {escape(f['error'])}")
        for f in summary.failures[:10]:
            console.print(f"  [red]render failed[/] {f['dataset']}/{f['video_id']} {f['perturbation']}/"
                          f"{f['severity']} ({f['video_path']}): {f['error']}")
        if summary.nonfaithful:
            console.print("  fallbacks used (non-faithful renders): " +
                          ", ".join(f"{k} x{v}" for k, v in summary.nonfaithful.items()))


def _merge(reports: list, tolerance: float):

    return CheckReport([c for r in reports for c in r.comparisons], tolerance, sum(r.seconds for r in reports))


