"""The planned trials as rows: one row per trial the grid asks for, with its status (ok / failed / damaged /
missing) and what the ledger holds of it. Every table (orchestrator/config/tables.py), `trials.parquet` and the
report's plots read these rows, so a trial that did not run is a row that says so, never an absent one, and one whose
entry is damaged says `damaged`, with its file in `why` (orchestrator/record/ledger.py `damaged_files`)."""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import pandas as pd

from orchestrator.config.tables import TableOrder
from orchestrator.record.ledger import DAMAGED
from workloads.metrics import DIAGNOSTIC_METRICS
from workloads.perturbations.text import TEXT_PERTURBATIONS
from workloads.perturbations.video import VIDEO_PERTURBATIONS
from workloads.spec import SPEC_FIELDS, TrialSpec

QS = "query_shift"
# every field of a trial spec is a column (a new field appears here, in MLflow params and in the ledger by itself);
# so is every metric and timing a trial reports: these first, in this order, then the others by name (the diagnostics
# of workloads/metrics.py, a method's own statistics)
METRICS = ["R1", "R5", "R10", "MdR", "MnR"]
HUB = ["hub_skewness", "hub_truncated_skewness", "hub_atkinson", "hub_robin_hood", "hub_antihub_occurrence",
       "hub_hub_occurrence", "hub_max_k_occurrence", "hub_antihub_count"]
TIMINGS = ["gallery_s", "adapt_s", "input_wait_s", "total_s", "per_query_ms"]
# the label-free selection signals of a trial (workloads/selection.py) and TCR's diagnostics (workloads/metrics.py)
SIGNALS = ["pred_entropy", "snd", "source_R1", *DIAGNOSTIC_METRICS]


def trial_rows(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per ledger entry: the spec's fields, `row` (the table row: variant name, else method),
    `backbone_label` (the table's backbone: a backbone variant's name, else the backbone), every metric and timing,
    and what the trial said of itself."""
    rows = []
    for e in entries:
        spec, metrics, timings = e["spec"], e.get("metrics") or {}, e.get("timings") or {}
        row = {"key": e["key"], "status": e["status"], **{c: spec.get(c) for c in SPEC_FIELDS}}
        row["row"] = spec.get("variant") or spec["method"]
        row["backbone_label"] = spec.get("backbone_variant") or spec["backbone"]
        row.update(protocol_columns(spec, e.get("protocol")))
        # a multi-segment trial's R@1 per segment, in stream order (read by orchestrator/report/protocols.py)
        row["segment_R1"] = [s.get("R1") for s in e["segments"]] if e.get("segments") else None
        row["running_R1"] = e.get("running_R1")   # [queries scored, R@1 so far] pairs: the streams' plots
        row.update({m: metrics.get(m) for m in METRICS + HUB + SIGNALS})
        row.update({m: metrics[m] for m in sorted(metrics) if m not in row})
        row["query_R1"] = e.get("query_R1")   # per query (a list, or compact: TrialLedger.entries(lists=False))
        row.update({t: timings.get(t) for t in TIMINGS})
        row.update({t: timings[t] for t in sorted(timings) if t not in row})
        row.update({"n_queries": e.get("n_queries"), "n_gallery": e.get("n_gallery"),
                    "n_dropped": len(e.get("dropped") or []), "faithful_renders": e.get("faithful_renders"),
                    "method_faithful": e.get("method_faithful"), "fallbacks": "; ".join(e.get("fallbacks") or []),
                    "notes": "; ".join(e.get("notes") or []), "error": e.get("error"),
                    "failed_batch": e.get("failed_batch"), "mlflow_runs": json.dumps(e.get("mlflow_runs") or {}),
                    "recorded_at": e.get("recorded_at"), "why": None})
        rows.append(row)
    return rows


def protocol_columns(spec: dict[str, Any], ran: dict[str, Any] | None) -> dict[str, Any]:
    """`protocol_label`: the trial's stream protocol with the default spelled out (docs/protocols.md; entries before
    protocols ran the default); `protocol_k`: the relative cost a budgeted trial ran at (None otherwise, and for a
    trial not run)."""
    return {"protocol_label": spec.get("protocol") or "reset_each_shift", "protocol_k": (ran or {}).get("k")}


def planned_rows(specs: Iterable[TrialSpec], entries: list[dict[str, Any]], lists: bool = True,
                 damaged: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per planned trial: its axes, `status` (ok / failed / damaged / missing) and what the ledger holds;
    with `lists`, also its per-query lists and score file (what the report's plots read). `damaged`: trial key ->
    its damaged entry's file and why (`TrialLedger.damaged_files`), for the trials without an entry: their status is
    damaged and `why` says where the file is; the others are missing."""
    by_key = {e["key"]: e for e in entries}
    damaged = damaged or {}
    rows = []
    for spec in specs:
        e = by_key.get(spec.key)
        if e is None:
            d = spec.to_dict()
            why = damaged.get(spec.key)
            row = {"key": spec.key, "status": "missing" if why is None else DAMAGED, **d,
                   "row": d.get("variant") or d["method"], "backbone_label": spec.backbone_label,
                   "why": None if why is None else f"damaged ledger entry {why}", **protocol_columns(d, None)}
        else:
            row = trial_rows([e])[0]
            if lists:
                row["k_occurrence"] = e.get("k_occurrence") or []
                row["batch_R1"] = e.get("batch_R1") or []
                row["scores_path"] = e.get("scores_path")
                row["traceback"] = e.get("traceback")
        rows.append(row)
    return pd.DataFrame(rows)


def table_order(grid) -> TableOrder:
    """The orders every table of the grid follows: its backbones (as it names them: variants by their labels) and
    method rows, the registries' types and levels."""
    video, text = list(VIDEO_PERTURBATIONS.names()), list(TEXT_PERTURBATIONS.names())
    return TableOrder(backbones=list(grid.backbones), methods=list(grid.methods),
                      perturbations={"v2t": video, "t2v": text},
                      levels={"v2t": {n: VIDEO_PERTURBATIONS.static_info(n)["level"] for n in video},
                              "t2v": {n: TEXT_PERTURBATIONS.static_info(n)["level"] for n in text}})


def method_rows(grid) -> list[str]:
    """Method rows: Source first, then the grid's order."""
    return sorted(grid.methods, key=lambda m: m != "source")


def levels(direction: str) -> dict[str, str]:
    """The paper's level of each perturbation of a direction's query modality (registry metadata)."""
    reg = VIDEO_PERTURBATIONS if direction == "v2t" else TEXT_PERTURBATIONS
    return {n: reg.static_info(n)["level"] for n in reg.names()}
