"""Scientific check of every TTA method on the embedded default, without the orchestrator (issue #32, item 6).

    python -m benchmarks.methods_diagnostics [--cache DIR] [--types gaussian_noise,impulse_noise,motion_blur,fog]
        [--methods all] [--backbones clip4clip,xpool] [--directions v2t] [--variants] [--json FILE] [--prepare-only]
        [--smoke]

Uses workloads only, in this one process:
  1. the embedded default's dataset (`synthetic`, default options: 3,000 train / 256 test videos) generated into
     DIR/datasets, and its fine-tuned mlvp-tiny checkpoints (CLIP4Clip 500 steps, X-Pool 150 steps from it: the
     grids' defaults, so the content keys and files are the ones `submit` makes and reuses with MLVP_CACHE_DIR=DIR);
  2. the clean clips and each type at severity 5 rendered into DIR/render (workloads/render_cache.py render_video,
     the render stage's function);
  3. one `workloads.trial.run` per (direction, backbone, cell, method): R@1, k-occurrence skewness (k = 10), Robin
     Hood index, antihub count, TCR's uniformity and modality gap of the clean / shifted / adapted queries, TITAN's
     pseudo-label accuracy (re-matched and plain argmax) and DeYO's selection, printed as tables.
`--variants all` (or a list) adds TITAN with each component switched off (the paper's Table 2) and with a 100x
learning rate, and training-free TCR with one of its two moves only.
`--directions t2v` runs text queries: clean, and each of `--text-types` (default char_insert, the strongest
character-level shift here: docs/notes/2026-11-results-history.md §8) at severity 7, its text set rendered with
workloads/text_queries.py as the text stage does (character-level types need no models).
DIR defaults to $MLVP_CACHE_DIR or ~/.cache/mlvp. One thread (run it nice'd on a shared machine).
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


DEFAULT_TYPES = ("gaussian_noise", "impulse_noise", "motion_blur", "fog")
COLUMNS = ("R1", "hub_skewness", "hub_robin_hood", "hub_antihub_count", "uniformity_shifted", "uniformity_adapted",
           "modality_gap_shifted", "modality_gap_adapted")
VARIANTS = {"titan_no_rematch": ("titan", {"rematch": False}),
            "titan_no_counterfactual": ("titan", {"counterfactual": False}),
            "titan_no_head": ("titan", {"bias_correction": False}),
            "titan_none": ("titan", {"rematch": False, "counterfactual": False, "bias_correction": False}),
            "titan_lr1e-3": ("titan", {"lr": 1e-3}),
            "titan_lr1e-3_no_rematch": ("titan", {"lr": 1e-3, "rematch": False}),
            # training-free TCR's two moves apart: Eq. 13 (gap) alone, Eq. 12 (scaling) alone
            "tcr_untrained_gap_only": ("tcr_untrained", {"scale": 1.0}),
            "tcr_untrained_scale_only": ("tcr_untrained", {"update_batches": 0})}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# the embedded default's sizes, and `--smoke`'s: the dataset's options and the CLIP4Clip / X-Pool fine-tuning steps
DEFAULT_SIZES = {"options": {}, "steps": (500, 150)}
SMOKE_SIZES = {"options": {"n_train": 64, "n_test": 16}, "steps": (2, 2)}


def prepare(cache: Path, types: list[str], backbones: list[str], sizes: dict = DEFAULT_SIZES):
    """Dataset, checkpoints and renders; returns (dataset, data version, {backbone: (checkpoint, model version)})."""
    from workloads.datasets import create_dataset
    from workloads.render_cache import RenderCache, render_video
    from workloads.spec import CLEAN

    t0 = time.time()
    ds = create_dataset("synthetic", root=str(cache / "datasets"), **sizes["options"])
    clip4clip_steps, xpool_steps = sizes["steps"]
    test, train = ds.test_split(), ds.train_split()
    version = ds.version()
    log(f"dataset: {len(train)} train / {len(test)} test pairs ({time.time() - t0:.0f}s)")
    models: dict[str, tuple[str, str]] = {}
    for backbone in sorted(backbones, key=lambda b: b != "clip4clip"):
        init, init_path, steps = "", None, clip4clip_steps
        if backbone == "xpool":   # the grids' default: X-Pool starts from the fine-tuned mean-pooling model
            if "clip4clip" not in models:
                models["clip4clip"] = prepare_model("clip4clip", "", None, clip4clip_steps, train, test, cache,
                                                    version)
            init, init_path, steps = "model:" + models["clip4clip"][1], models["clip4clip"][0], xpool_steps
        models[backbone] = prepare_model(backbone, init, init_path, steps, train, test, cache, version)
    t0 = time.time()
    render = RenderCache(cache / "render")
    cells = [(CLEAN, 0)] + [(t, 5) for t in types]
    for pair in test.pairs:
        keys = [key for key in (_render_key(version, pair.video_id, p, s) for p, s in cells)
                if not render.is_valid(key)]
        if keys:
            statuses = render_video(pair.video_path, keys, render)
            bad = [s for s in statuses if s["status"] != "ok"]
            if bad:
                raise RuntimeError(f"render failed: {bad[0]}")
    log(f"renders: {len(cells)} cells x {len(test)} clips ready ({time.time() - t0:.0f}s)")
    return ds, version, models


def prepare_text_sets(cache: Path, ds, version: str, types: list[str]) -> None:
    """The t2v text sets (perturbed captions of the test split) at severity 7, as the text stage renders them."""
    from workloads.text_queries import TextSetKey, TextSetMissing, read_text_set, render_text_set

    test = ds.test_split()
    for t in types:
        key = TextSetKey("synthetic", version, t, 7, 0, "")
        try:
            read_text_set(key, cache / "render", len(test))
        except TextSetMissing:
            render_text_set(key, cache / "render", test.captions, test.video_ids, {})
            log(f"text set {t}-7 rendered")


def prepare_model(backbone, init, init_path, steps, train, test, cache, version):
    from workloads.backbones.finetune import ensure_finetuned
    from workloads.backbones.finetune_config import FinetuneConfig

    cfg = FinetuneConfig(backbone=backbone, clip_model="mlvp-tiny", init=init, steps=steps, batch_size=64, lr=1e-3,
                         weight_decay=0.2, train_frames=16, frames_per_clip=4, eval_frames=12, precision="auto",
                         seed=0)
    t0 = time.time()
    path, record = ensure_finetuned(cfg, train, test, cache / "models", version, init_path=init_path, log=log)
    log(f"{backbone}: {path.name}, clean R@1 v2t {record['metrics']['v2t_R1']:.1f} / t2v "
        f"{record['metrics']['t2v_R1']:.1f} ({time.time() - t0:.0f}s)")
    return str(path), "ft:" + cfg.key("synthetic", version)


def _render_key(version: str, video_id: str, perturbation: str, severity: int):
    from workloads.trial import render_key

    return render_key(_spec(version, "", "v2t", "clip4clip", "source", "clean", 0), video_id, perturbation, severity)


def _spec(version, model_version, direction, backbone, method, perturbation, severity, options=None, variant=""):
    from workloads.spec import TrialSpec

    return TrialSpec(dataset="synthetic", direction=direction, scenario="query_shift", perturbation=perturbation,
                     severity=severity, method=method, backbone=backbone, seed=0, faithful=True,
                     source_dataset="synthetic", clip_model="mlvp-tiny", model_version=model_version,
                     data_version=version, options=json.dumps(options or {}), variant=variant)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.environ.get("MLVP_CACHE_DIR") or str(Path("~/.cache/mlvp").expanduser()))
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--methods", default="all")
    ap.add_argument("--backbones", default="clip4clip,xpool")
    ap.add_argument("--directions", default="v2t")
    ap.add_argument("--text-types", default="char_insert", help="t2v text shifts at severity 7 (character level)")
    ap.add_argument("--variants", default="", help="comma-separated rows of VARIANTS to add (TITAN's ablation rows "
                                                   "and a 100x learning rate), or 'all'")
    ap.add_argument("--json", default="", help="write every result here")
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: 64 train / 16 test clips, 2-step fine-tunes, Source and Tent on CLIP4Clip at "
                         "gaussian_noise, in a new cache folder")
    args = ap.parse_args(argv)
    sizes = DEFAULT_SIZES
    if args.smoke:
        import tempfile

        sizes = SMOKE_SIZES
        args.cache = tempfile.mkdtemp(prefix="mlvp-methods-diagnostics-smoke-")
        args.types, args.methods, args.backbones, args.directions = "gaussian_noise", "source,tent", "clip4clip", "v2t"

    import torch

    from workloads.methods import NAMES
    from workloads.spec import CLEAN
    from workloads.trial import TrialContext, run

    torch.set_num_threads(1)
    cache = Path(args.cache).expanduser()
    types = [t for t in args.types.split(",") if t]
    backbones = [b for b in args.backbones.split(",") if b]
    ds, version, models = prepare(cache, types, backbones, sizes)
    text_types = [t for t in args.text_types.split(",") if t] if "t2v" in args.directions else []
    prepare_text_sets(cache, ds, version, text_types)
    if args.prepare_only:
        return 0
    rows = [(m, m, {}) for m in (NAMES if args.methods == "all" else args.methods.split(","))]
    wanted = list(VARIANTS) if args.variants == "all" else [v for v in args.variants.split(",") if v]
    rows += [(name, *VARIANTS[name]) for name in wanted]
    results = []
    for direction in args.directions.split(","):
        cells = [(CLEAN, 0)] + ([(t, 5) for t in types] if direction == "v2t" else [(t, 7) for t in text_types])
        for backbone in backbones:
            checkpoint, model_version = models[backbone]
            ctx = TrialContext(render_cache=str(cache / "render"), checkpoint=checkpoint,
                               dataset_root=str(cache / "datasets"), dataset_options=sizes["options"],
                               gallery_cache=str(cache / "gallery"), threads=1)
            for perturbation, severity in cells:
                for label, method, options in rows:
                    spec = _spec(version, model_version, direction, backbone, method, perturbation, severity, options,
                                 variant=label if label != method else "")
                    r = run(spec, ctx)
                    if r.status != "ok":
                        raise RuntimeError(f"{spec.label}: {r.error}\n{r.traceback}")
                    results.append({"direction": direction, "backbone": backbone, "cell": spec.cell, "row": label,
                                    "metrics": r.metrics, "timings": r.timings, "fallbacks": r.fallbacks,
                                    "notes": r.notes, "method_faithful": r.method_faithful})
                    if args.json:   # after every trial: a long run's results survive an interruption
                        Path(args.json).write_text(json.dumps(results, indent=1))
                    m = r.metrics
                    log(f"{direction} {backbone} {spec.cell:>16} {label:>24}  R@1 {m['R1']:5.1f}  skew "
                        f"{m['hub_skewness']:5.2f}  RH {m['hub_robin_hood']:.3f}  U {m.get('uniformity_clean', 0):.3f}/"
                        f"{m['uniformity_shifted']:.3f}/{m['uniformity_adapted']:.3f}  MG "
                        f"{m.get('modality_gap_clean', 0):.3f}/{m['modality_gap_shifted']:.3f}/"
                        f"{m['modality_gap_adapted']:.3f}  adapt {r.timings['adapt_s']:.1f}s  diag "
                        f"{r.timings['diagnostics_s']:.2f}s"
                        + "".join(f"  {k} {v:.3f}" for k, v in m.items() if k.startswith(("titan_", "deyo_"))))
    print_tables(results)
    return 0


def print_tables(results: list[dict]) -> None:
    """One Markdown table per (direction, metric): rows backbone x method, columns the cells."""
    import pandas as pd

    df = pd.DataFrame([{"direction": r["direction"], "backbone": r["backbone"], "cell": r["cell"], "row": r["row"],
                        **r["metrics"]} for r in results])
    for direction, part in df.groupby("direction", sort=False):
        for metric in [c for c in COLUMNS + ("titan_pseudo_label_acc", "titan_argmax_label_acc") if c in part]:
            table = part.pivot_table(index=["backbone", "row"], columns="cell", values=metric, sort=False)
            if table.isna().all().all():
                continue
            print(f"\n{direction} {metric}\n")
            print("| backbone | method | " + " | ".join(table.columns) + " |")
            print("|---|---|" + "---:|" * len(table.columns))
            digits = 1 if metric == "R1" or "count" in metric else 3
            for (backbone, row), values in table.iterrows():
                print(f"| {backbone} | {row} | " + " | ".join("" if pd.isna(v) else f"{v:.{digits}f}"
                                                               for v in values) + " |")


if __name__ == "__main__":
    sys.exit(main())
