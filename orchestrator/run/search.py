"""TPE search while the grid runs: Optuna's TPE sampler through Ray Tune's `OptunaSearch`, one search per stream (a
method's grid-configuration trial in one cell, backbone and seed: orchestrator/planning/search.py `tpe_streams`).

Each proposal is a normal trial: a TrialSpec (the stream's, with the proposed options and steps, `config`
"tpe-<n>"), added to the `ReadyGate` (orchestrator/run/gate.py `add`), so it waits for its inputs like every
trial, is keyed and recorded in the ledger and logged to MLflow as a child run. Proposals within a stream are
sequential (TPE proposes from the results before it); the streams of all cells run side by side.

Resume: every proposal is written to the stream's record (results/<grid>/search/tpe-*.json) before its trial is
handed out. A later submission re-reads the record: proposals with a ledger entry are told to a fresh `OptunaSearch`
as evaluated points (`points_to_evaluate` with `evaluated_rewards`), those without one are handed out again (the same
keys), and the search goes on until `search.budget`. TPE's later proposals depend on that history and the sampler's
seed (`search.seed` and the stream), not on which submission made them.
"""
from __future__ import annotations

import json
import math
import threading
from typing import Any

from orchestrator.config.schema import SURROGATES
from orchestrator.config.search import Domain, method_domains
from orchestrator.planning.search import (
    SearchedConfig,
    read_tpe_record,
    split_config,
    tpe_record_path,
    tpe_spec,
    tpe_streams,
)
from workloads.atomic import atomic_write_text
from workloads.seeding import stable_seed
from workloads.spec import TrialSpec

METRIC = "objective"


def tune_domain(d: Domain):
    """Ray Tune's search-space domain for one searched option, the space OptunaSearch proposes from."""
    from ray import tune   # Ray Tune: only for a grid with a TPE search

    if d.is_list:
        return tune.choice(list(d.values))
    if d.distribution == "uniform":
        return tune.uniform(d.low, d.high)
    if d.distribution == "loguniform":
        return tune.loguniform(d.low, d.high)
    return tune.randint(int(d.low), int(d.high) + 1)     # Tune's upper bound is exclusive; ours is inclusive


class TPEStream:
    """One stream's search: its OptunaSearch, its record and the proposals in flight."""

    def __init__(self, plan, stream: TrialSpec, ledger):
        import optuna   # Optuna and Ray Tune: only for a grid with a TPE search
        from optuna.samplers import TPESampler
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)   # a line per study created: one per stream

        self.plan, self.stream, self.search = plan, stream, plan.grid.search
        self.path = tpe_record_path(plan, stream)
        self.configs = read_tpe_record(self.path)[:self.search.budget]
        done, rewards, self.pending = [], [], []
        for c in self.configs:
            entry = ledger.get(tpe_spec(stream, c).key)
            if entry is None:
                self.pending.append(c)
            else:
                done.append(self._point(c))
                rewards.append(self.reward(entry))
        keep = [i for i, r in enumerate(rewards) if r is not None]   # failed ones: nothing to tell TPE
        space = {d.name: tune_domain(d) for d in method_domains(plan.grid, stream.method_label)}
        self.searcher = OptunaSearch(
            space=OptunaSearch.convert_search_space(space),   # Tune's domains as Optuna's distributions
            metric=METRIC, mode="max",
            sampler=TPESampler(seed=stable_seed("tpe", self.search.seed, stream.key) % 2**32),
            points_to_evaluate=[done[i] for i in keep] or None,
            evaluated_rewards=[rewards[i] for i in keep] or None)
        self.in_flight: dict[str, str] = {}    # trial key -> Optuna's trial id

    @staticmethod
    def _point(c: SearchedConfig) -> dict[str, Any]:
        return {**c.options, **({"steps": c.steps} if c.steps is not None else {})}

    def reward(self, entry: dict[str, Any]) -> float | None:
        """The objective of a finished trial (None: failed, or the signal is missing)."""
        value = entry.get("metrics", {}).get(self.search.objective) if entry.get("status") == "ok" else None
        if value is None or not math.isfinite(float(value)):
            return None

        return float(value) if SURROGATES.get(self.search.objective, True) else -float(value)

    def left(self) -> int:
        """Proposals still to make (not counting the pending ones)."""
        return self.search.budget - len(self.configs)

    def propose(self) -> TrialSpec | None:
        """The next configuration, recorded before its trial is handed out; None when the budget is spent."""
        if self.left() <= 0:
            return None
        trial_id = f"{self.stream.key[:12]}-{len(self.configs) + 1}"
        raw = self.searcher.suggest(trial_id)
        if not isinstance(raw, dict):   # Searcher.FINISHED or None: the searcher has nothing more
            return None
        config = split_config(f"tpe-{len(self.configs) + 1}", raw)
        self.configs.append(config)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"stream": self.stream.key, "configs": [
            {"name": c.name, "options": c.options, "steps": c.steps} for c in self.configs]}, indent=1))
        spec = tpe_spec(self.stream, config)
        self.in_flight[spec.key] = trial_id
        return spec

    def finished(self, entry: dict[str, Any]) -> None:
        trial_id = self.in_flight.pop(entry["key"], None)
        if trial_id is None:
            return
        reward = self.reward(entry)
        self.searcher.on_trial_complete(trial_id, None if reward is None else {METRIC: reward},
                                        error=reward is None)


class TPESearches:
    """Every TPE stream of a plan, feeding a gate: `start` hands out each stream's pending proposals (or its first
    new one) and promises the rest; `on_result` tells a stream's searcher a result and hands out its next proposal."""

    def __init__(self, plan, ledger, gate):
        self.gate = gate
        self.streams = {s.key: TPEStream(plan, s, ledger) for s in tpe_streams(plan)}
        self._owner: dict[str, TPEStream] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        for stream in self.streams.values():
            self.gate.promise(stream.left() + len(stream.pending))
            for c in stream.pending:
                spec = tpe_spec(stream.stream, c)
                stream.in_flight[spec.key] = ""   # proposed earlier: nothing to tell this searcher of it
                self._hand_out(stream, spec)
            if not stream.pending:
                self._next(stream)

    def _hand_out(self, stream: TPEStream, spec: TrialSpec) -> None:
        self._owner[spec.key] = stream
        self.gate.add(spec)

    def _next(self, stream: TPEStream) -> None:
        spec = stream.propose()
        if spec is None:
            self.gate.withdraw(stream.left())
            return
        self._hand_out(stream, spec)

    def on_result(self, entry: dict[str, Any]) -> None:
        """A finished trial (ok or failed): if it is a TPE proposal, its stream proposes the next one."""
        with self._lock:
            stream = self._owner.pop(entry.get("key"), None)
            if stream is None:
                return
            if stream.in_flight.get(entry["key"]) == "":   # proposed by an earlier submission: told as a point
                stream.in_flight.pop(entry["key"])
                config = next(c for c in stream.configs if tpe_spec(stream.stream, c).key == entry["key"])
                reward = stream.reward(entry)
                if reward is not None:
                    stream.searcher.add_evaluated_point(stream._point(config), reward)
            else:
                stream.finished(entry)
            if not stream.in_flight:
                self._next(stream)

    def specs(self) -> list[TrialSpec]:
        return [tpe_spec(s.stream, c) for s in self.streams.values() for c in s.configs]
