"""TPE proposals on the driver's side (orchestrator/run/search.py) with a real plan, gate and ledger: each proposal is
recorded before it is handed out, the next comes when a result does, and a later submission finds every proposal
again (results told to the new searcher, unfinished ones handed out with the same keys). The results are written
here as the driver would record them; tests/test_hp_selection_e2e.py runs the trials themselves."""
from __future__ import annotations

import json

from orchestrator.config.grid import parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.planning.search import tpe_streams
from orchestrator.record.ledger import TrialLedger
from orchestrator.run.gate import ReadyGate
from orchestrator.run.search import TPESearches

GRID = {"name": "tpe", "models": {"clip_model": "mlvp-micro"}, "seeds": [0, 1],
        "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
        "backbones": ["clip4clip"], "methods": ["source", "tent"],
        "search": {"algorithm": "tpe", "budget": 3, "objective": "snd",
                   "methods": {"tent": {"lr": {"loguniform": [1e-5, 1e-2]}, "steps": [1, 2]}}},
        "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise"], "severities": [5],
                        "clean": False}}


def plan_at(tmp_path):
    return build_plan(parse_grid(GRID, "tpe.yaml"), Paths.make(tmp_path / "results", tmp_path / "cache"))


def finish(ledger, gate, searches, spec, snd):
    result = {"key": spec.key, "spec": spec.to_dict(), "status": "ok", "metrics": {"R1": 10.0, "snd": snd}}
    ledger.put(result)
    searches.on_result(result)


def drain(gate):
    """Every trial the gate would hand Tune now."""
    out = []
    while (spec := gate.pop()) not in (None, ReadyGate.DONE):
        out.append(spec)
    return out


def test_proposals_are_recorded_sequential_and_found_again(tmp_path):
    plan = plan_at(tmp_path)
    ledger = TrialLedger(plan.paths.ledger)
    gate = ReadyGate([])
    searches = TPESearches(plan, ledger, gate)
    searches.start()
    streams = tpe_streams(plan)
    assert len(streams) == 2                          # tent's own trial at seeds 0 and 1
    first = drain(gate)
    # one proposal per stream at a time; the rest are promised, so the gate is not done
    assert [s.config for s in first] == ["tpe-1", "tpe-1"] and gate.promised == 4 and gate.pop() is None
    assert {s.seed for s in first} == {0, 1} and all(s.method == "tent" for s in first)
    records = sorted((plan.paths.grid_dir("tpe") / "search").glob("tpe-*.json"))
    assert len(records) == 2 and all(len(json.loads(r.read_text())["configs"]) == 1 for r in records)

    # a result brings that stream's next proposal
    finish(ledger, gate, searches, first[0], 0.5)
    (second,) = drain(gate)
    assert second.config == "tpe-2" and second.seed == first[0].seed and gate.promised == 3

    # a new submission: the finished proposal is told to the searcher, the unfinished ones come out again, same keys
    plan2 = plan_at(tmp_path)
    assert {t.key for t in plan2.trials} >= {first[0].key, first[1].key, second.key}   # the plan reads the records
    gate2 = ReadyGate([])
    again = TPESearches(plan2, TrialLedger(plan2.paths.ledger), gate2)
    again.start()
    handed = drain(gate2)
    assert sorted(s.key for s in handed) == sorted([first[1].key, second.key])
    assert gate2.promised == 3                       # what is left of the budgets: 1 (seed 0) + 2 (seed 1)
    for spec in handed:
        finish(ledger, gate2, again, spec, 0.7)
    third = drain(gate2)
    assert sorted(s.config for s in third) == ["tpe-2", "tpe-3"] and gate2.promised == 1
    for spec in third:
        finish(ledger, gate2, again, spec, 0.6)
    (last,) = drain(gate2)
    assert last.config == "tpe-3" and gate2.promised == 0
    finish(ledger, gate2, again, last, 0.4)
    assert gate2.pop() == ReadyGate.DONE               # every stream spent its budget of 3
    assert len(again.specs()) == 6 and len({s.key for s in again.specs()}) == 6
