"""Calibration of the embedded default against the paper's Table 1 (issue #12), without the Ray grid.

    python benchmarks/calibrate_default.py [--grid grids/all_perturbations.yaml] [--dataset synthetic_v2]
        [--option size=160 ...] [--queries N] [--types gaussian_noise,...] [--severities 1,2,3,4,5] [--steps N]

Builds the grid's plan (orchestrator/planning/plan.py: the same dataset, fine-tuning config, render keys and cache paths
as `python -m orchestrator submit GRID` with the same MLVP_CACHE_DIR), then, in this one process:
  1. generates the dataset and fine-tunes the grid's CLIP4Clip checkpoint (workloads/backbones/finetune.py
     ensure_finetuned; cached, shared with `submit`);
  2. prepares event insertion's distractors as `submit` does (orchestrator/config/assets.py, the same cache file);
  3. renders every (type, severity) of the plan for the first N test videos with `render_video`
     (workloads/render_cache.py: decode -> perturb at the native size -> resize to the model input -> cache), the
     function the render stage's actors call, into the grid's render cache (so `submit` reuses the clips);
  4. encodes them with the fine-tuned model and prints Source v2t R@1 (%) per type x severity (queries: the first N
     test videos; gallery: every test caption, so chance stays 1/n_test), the k-occurrence skewness (k=10), the
     ratios sev-5 / clean beside the paper's (MLVP Table 1, CLIP4Clip on MSRVTT-1kA, the ratios issue #12 lists) and
     their Spearman rank correlation.
`--option key=value` overrides a dataset option of the grid (e.g. size=160: test clips drawn at 160 px). Any option
changes the dataset digest, hence the checkpoint key; `--reuse-checkpoint PATH` evaluates with an existing model
instead (valid where the train clips are unchanged: same seed, counts, train_size, train_fps and duration; the
renders then go to a temporary cache, and the distractors are chosen again with that model).
One core is enough (`taskset -c 1`); times are printed per stage.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# MLVP Table 1 (CLIP4Clip, MSRVTT-1kA): severity-5 R@1 / clean, as issue #12 lists them
PAPER_RATIO = {"gaussian_noise": 0.20, "impulse_noise": 0.12, "fog": 0.62, "snow": 0.35, "elastic_distortion": 0.23,
               "h264_compression": 0.61, "motion_blur": 0.57, "video_defocus": 0.12, "main_object_occlusion": 0.52,
               "style_transfer": 0.11, "event_insertion": 0.52, "temporal_scrambling": 0.76}


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def _grid(path: str, dataset: str, options: dict, types, severities, tmp: Path) -> Path:
    from orchestrator.config.grid import read_yaml

    raw = read_yaml(path)   # within the bounds a grid file is read with (orchestrator/config/grid.py)
    if dataset not in raw["datasets"] and len(raw["datasets"]) == 1:
        # the grid's one dataset replaced by `dataset` (all_perturbations.yaml names the default, `synthetic`)
        (only,) = raw["datasets"]
        raw["datasets"] = {dataset: raw["datasets"][only]}
        raw["query_shift"]["datasets"] = [dataset]
    ds = raw["datasets"].get(dataset) or {}
    if options:
        opts = dict(ds.get("options", {})) if "options" in ds else dict(ds)
        opts.update(options)
        raw["datasets"][dataset] = {"options": opts} if opts else {}
    if types:
        raw["query_shift"]["perturbations"] = types
    if severities:
        raw["query_shift"]["severities"] = severities
    raw["backbones"] = ["clip4clip"]
    raw["methods"] = ["source"]
    out = tmp / "grid.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", default="grids/all_perturbations.yaml")
    ap.add_argument("--dataset", default="synthetic_v2",
                    help="the dataset to calibrate, in place of the grid's (default: generator version 2)")
    ap.add_argument("--option", action="append", default=[], help="dataset option key=value (repeatable)")
    ap.add_argument("--queries", type=int, default=0, help="first N test videos as queries (0: all)")
    ap.add_argument("--types", default="", help="comma-separated perturbation types (default: the grid's)")
    ap.add_argument("--severities", default="", help="comma-separated severities (default: the grid's)")
    ap.add_argument("--reuse-checkpoint", default="", help="evaluate with this checkpoint instead of fine-tuning")
    ap.add_argument("--json", default="", help="write the table here as JSON")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from orchestrator.stages.assets import _prepare_task
    from orchestrator.config.assets import dataset_assets
    from orchestrator.config.grid import load_grid
    from orchestrator.planning.keys import CheckpointKey
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.planning.render_sets import render_keys
    from workloads.atomic import atomic_write_text
    from workloads.backbones import create_backbone
    from workloads.backbones.finetune import ensure_finetuned
    from workloads.backbones.model import cosine_similarity
    from workloads.metrics import hubness, retrieval_metrics
    from workloads.perturbations.video import get as perturbation_info
    from workloads.render_cache import RenderCache, render_video
    from workloads.spec import CLEAN

    torch.set_num_threads(1)
    options = {}
    for kv in args.option:
        k, v = kv.split("=", 1)
        options[k] = yaml.safe_load(v)
    tmp = Path(tempfile.mkdtemp(prefix="mlvp-calib-"))
    grid = load_grid(str(_grid(args.grid, args.dataset, options,
                               [t for t in args.types.split(",") if t],
                               [int(s) for s in args.severities.split(",") if s], tmp)))
    cache_dir = os.environ.get("MLVP_CACHE_DIR") or str(Path("~/.cache/mlvp").expanduser())
    paths = Paths.make(tmp / "results", cache_dir)
    plan = build_plan(grid, paths)
    name = args.dataset
    dsp = plan.datasets[name]
    ds = dsp.dataset
    times = {}

    t0 = time.time()
    test = ds.test_split()
    train = ds.train_split()
    times["generate"] = time.time() - t0
    print(f"dataset {name}: {dsp.version} ({len(test)} test, {len(train)} train pairs) in {times['generate']:.1f}s",
          flush=True)

    m = plan.models[CheckpointKey("clip4clip", name)]
    t0 = time.time()
    if args.reuse_checkpoint:
        ckpt = args.reuse_checkpoint
    else:
        ckpt, record = ensure_finetuned(m.finetune, train, test, str(plan.paths.models), dsp.version, init_path=None,
                                        log=lambda s: print("  " + s, flush=True), device="cpu")
        print(f"checkpoint {Path(ckpt).name}: clean R@1 v2t {record['metrics']['v2t_R1']:.1f}", flush=True)
    times["finetune"] = time.time() - t0

    # per-dataset and per-video assets, as orchestrator/run/submit.py prepare_assets (same cache file as `submit`)
    assets = dataset_assets(plan.grid, name)
    video_assets: dict[str, dict] = {}
    t0 = time.time()
    for pert in dict.fromkeys(p for p, _ in plan.renders[name]):
        needs = perturbation_info(pert).assets if pert != CLEAN else None
        if needs is None or needs.prepare is None:
            continue
        version = plan.render_assets[(name, pert)]
        cache = plan.paths.cache / "prepared" / pert / f"{name}-{version.split(':', 1)[-1]}.json"
        if cache.is_file() and not args.reuse_checkpoint:
            chosen = json.loads(cache.read_text())
        else:
            from orchestrator.config.assets import asset_paths

            _, _, kind = plan.embedders[name]
            ap_ = asset_paths(plan.grid, name)
            chosen = _prepare_task(pert, name, dsp.root, dsp.options, {k: ap_.get(k) for k in needs.keys},
                                   (plan.grid.models.clip_model, str(ckpt), kind), plan.grid.runtime.num_frames, "cpu")
            if not args.reuse_checkpoint:
                atomic_write_text(cache, json.dumps(chosen))
        for vid, extra in chosen.items():
            video_assets.setdefault(vid, {}).update(extra)
    times["assets"] = time.time() - t0

    # render exactly as the render stage does (orchestrator/stages/render.py render_rows -> render_video)
    render_root = plan.paths.render if not args.reuse_checkpoint else tmp / "render"
    rcache = RenderCache(render_root)
    pairs = list(test.pairs)
    queries = pairs[:args.queries] if args.queries else pairs
    t0 = time.time()
    statuses = []
    for i, p in enumerate(queries):
        keys = render_keys(plan, name, p.video_id)
        todo = [k for k in keys if not rcache.is_valid(k)]
        if todo:
            statuses += render_video(p.video_path, todo, rcache,
                                     {**assets, **video_assets.get(p.video_id, {}), "video_id": p.video_id,
                                      "video_path": p.video_path})
        if (i + 1) % 32 == 0:
            print(f"  rendered {i + 1}/{len(queries)} videos ({time.time() - t0:.0f}s)", flush=True)
    times["render"] = time.time() - t0
    failed = [s for s in statuses if s["status"] != "ok"]
    print(f"render: {len(statuses)} clips in {times['render']:.1f}s, {len(failed)} failed", flush=True)

    # encode and score (Source: no adaptation)
    t0 = time.time()
    model = create_backbone("clip4clip", plan.grid.models.clip_model, pretrained=str(ckpt))
    model.eval()
    caps = [p.caption for p in pairs]
    qidx = np.array([pairs.index(p) for p in queries])
    with torch.no_grad():
        text = torch.cat([model.encode_text(model.tokenize(caps[i:i + 64])) for i in range(0, len(caps), 64)])
        table: dict[tuple[str, int], dict] = {}
        for pert, sev in plan.renders[name]:
            clips = np.stack([rcache.read(k)[0] for p in queries for k in render_keys(plan, name, p.video_id)
                              if (k.perturbation, k.severity) == (pert, sev)])
            feats = torch.cat([model.encode_frames(model.preprocess_frames(torch.from_numpy(clips[i:i + 32])))
                               for i in range(0, len(clips), 32)])
            sims = cosine_similarity(text, model.pool(text, F.normalize(feats, dim=-1))).t().numpy()  # v2t
            r = retrieval_metrics(sims, qidx)
            table[(pert, sev)] = {"R1": r["R1"], "skew": hubness(sims, k=10)["skewness"]}
    times["score"] = time.time() - t0

    clean = table[(CLEAN, 0)]["R1"]
    types = list(dict.fromkeys(p for p, _ in plan.renders[name] if p != CLEAN))
    sevs = sorted({s for p, s in plan.renders[name] if p != CLEAN})
    print(f"\n{name} ({dsp.version}), {len(queries)} queries x {len(pairs)} captions (chance "
          f"{100 / len(pairs):.1f}%), Source CLIP4Clip v2t R@1 (%); clean {clean:.1f}, skew "
          f"{table[(CLEAN, 0)]['skew']:.2f}")
    print("| type | " + " | ".join(f"s{s}" for s in sevs) + " | ratio s5/clean | paper | skew s1 / s3 / s5 |")
    print("|---|" + "---:|" * len(sevs) + "---:|---:|---|")
    ours, ref = [], []
    for t in types:
        row = [table[(t, s)]["R1"] for s in sevs]
        top = max(sevs)
        ratio = table[(t, top)]["R1"] / clean if clean else float("nan")
        skew = " / ".join(f"{table[(t, s)]['skew']:.2f}" for s in (1, 3, 5) if (t, s) in table)
        paper = PAPER_RATIO.get(t)
        print(f"| {t} | " + " | ".join(f"{v:.1f}" for v in row) + f" | {ratio:.2f} | "
              f"{paper if paper is not None else '-'} | {skew} |")
        if paper is not None:
            ours.append(ratio)
            ref.append(paper)
    rho = spearman(ours, ref) if len(ours) >= 3 else float("nan")
    print(f"\nSpearman (ratios vs paper, {len(ours)} types): {rho:.3f}")
    print("times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in times.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"dataset": dsp.version, "queries": len(queries), "clean": clean,
                                               "table": {f"{p}/{s}": v for (p, s), v in table.items()},
                                               "spearman": rho, "times": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
