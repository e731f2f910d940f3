"""The embedded default's whole workload path on a CUDA GPU, checked against the CPU in the same run.

    python -m benchmarks.cuda_check [--cache /tmp/mlvp-cuda-check] [--n-train 3000] [--n-test 256]
        [--steps 500] [--xpool-steps 150] [--methods source,tent,read,sar,eata,tcr,hat_vtr]
        [--perturbation gaussian_noise] [--severity 5] [--cpu-workers 8] [--cudnn-tf32 default|off]
        [--out benchmarks/cuda_check_results.md] [--smoke]

Runs `workloads` alone (no Ray, no MLflow; they are not on the GPU machine), exactly the functions the orchestrator
calls in its workers: the synthetic dataset generated (H.264 via PyAV), `mlvp-tiny` fine-tuned on the GPU (clip4clip,
then X-Pool from it; bf16 autocast, as the quickstart), the query clips rendered into the render cache (decord
decode), then `workloads.trial.run` for every method x backbone in both directions (v2t under the given perturbation,
t2v clean) three times: on CUDA in fp32, on CUDA in bf16, and on the CPU in fp32 (in parallel worker processes).
Exits 1 when any trial fails or when CUDA fp32 and CPU fp32 disagree by more than --tolerance R@1 points (the same
seed, checkpoint and inputs; only floating-point order differs between the devices).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cpu_trial(args):
    from workloads.trial import run

    spec, ctx = args
    return run(spec, ctx)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default="/tmp/mlvp-cuda-check")
    ap.add_argument("--n-train", type=int, default=3000)
    ap.add_argument("--n-test", type=int, default=256)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--xpool-steps", type=int, default=150)
    ap.add_argument("--methods", default="source,tent,read,sar,eata,tcr,hat_vtr")
    ap.add_argument("--perturbation", default="gaussian_noise")
    ap.add_argument("--severity", type=int, default=5)
    ap.add_argument("--cpu-workers", type=int, default=8)
    ap.add_argument("--tolerance", type=float, default=3.0, help="largest |R@1 CUDA fp32 - CPU fp32| in points")
    ap.add_argument("--device", default="cuda", help="the device under test; 'cpu' only smoke-tests this script")
    ap.add_argument("--cudnn-tf32", choices=("default", "off"), default="default",
                    help="'off': convolutions on CUDA in full fp32 (PyTorch's default, kept by the trials, is TF32: "
                         "docs/notes/2026-11-results-history.md §6 reads the CUDA-CPU difference as its rounding)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("cuda_check_results.md")))
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: a tiny dataset, 2-step fine-tunes, Source and Tent, the CPU standing in for the "
                         "GPU (no CUDA run), results in a temporary folder")
    args = ap.parse_args(argv)
    if args.smoke:
        import tempfile

        from benchmarks.provenance import smoke_skips

        scratch = Path(tempfile.mkdtemp(prefix="mlvp-cuda-check-smoke-"))
        args.cache, args.out, args.device = str(scratch / "cache"), str(scratch / "results.md"), "cpu"
        args.n_train, args.n_test, args.steps, args.xpool_steps = 64, 16, 2, 2
        args.methods, args.cpu_workers, args.tolerance = "source,tent", 1, 100.0
        smoke_skips("the CUDA run and the tolerance (the CPU stands in for the GPU)", "needs a GPU")

    import torch

    from workloads.backbones.finetune import FinetuneConfig, checkpoint_path, ensure_finetuned
    from workloads.datasets import create_dataset
    from workloads.render_cache import RenderCache, render_video
    from workloads.spec import CLEAN, TrialSpec
    from workloads.trial import TrialContext, render_key, run

    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU (--device cpu only smoke-tests the script)", file=sys.stderr)
        return 2
    if args.cudnn_tf32 == "off":
        torch.backends.cudnn.allow_tf32 = False
    cache = Path(args.cache)
    argv = sys.argv[1:] if argv is None else argv
    cmd = " ".join(["python -m benchmarks.cuda_check", *map(shlex.quote, argv)])
    name = torch.cuda.get_device_name(0) if dev == "cuda" else dev
    lines = [f"Command: `{cmd}`", "",
             f"Device: {name}; torch {torch.__version__}; {os.cpu_count()} CPU cores for the CPU side; CUDA "
             f"convolutions in {'TF32' if torch.backends.cudnn.allow_tf32 else 'fp32'}.", ""]

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    t0 = time.time()
    ds = create_dataset("synthetic", root=str(cache / "datasets"), n_train=args.n_train, n_test=args.n_test)
    train, test = ds.train_split(), ds.test_split()
    say(f"- dataset: {len(train)} train / {len(test)} test pairs ({time.time() - t0:.1f}s)")

    checkpoints, versions = {}, {}
    for backbone, steps, init in (("clip4clip", args.steps, None), ("xpool", args.xpool_steps, "clip4clip")):
        cfg = FinetuneConfig(backbone=backbone, clip_model="mlvp-tiny", steps=steps,
                             init=("model:" + versions[init]) if init else "")
        t1 = time.time()
        reused = checkpoint_path(cfg, "synthetic", ds.version(), cache / "models").is_file()
        path, record = ensure_finetuned(cfg, train, test, cache / "models", ds.version(),
                                        init_path=checkpoints.get(init), log=lambda s: None, device=dev)
        checkpoints[backbone], versions[backbone] = str(path), "ft:" + cfg.key("synthetic", ds.version())
        m = record["metrics"]
        say(f"- fine-tuned {backbone} ({steps} steps, {record['precision']}) on {record['device']}: "
            f"{record['train_seconds']:.1f}s training, clean R@1 v2t {m['v2t_R1']:.1f} / t2v {m['t2v_R1']:.1f}"
            + (" (cached checkpoint)" if reused else f" ({time.time() - t1:.1f}s with decode and evaluation)"))

    base = dict(dataset="synthetic", scenario="query_shift", seed=0, clip_model="mlvp-tiny",
                data_version=ds.version(), resolution=64)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    specs = [TrialSpec(direction=d, perturbation=p, severity=s, method=m, backbone=b,
                       model_version=versions[b], **base)
             for d, p, s in (("v2t", args.perturbation, args.severity), ("t2v", CLEAN, 0))
             for b in ("clip4clip", "xpool") for m in methods]

    render = RenderCache(cache / "render")
    render_root = str(cache / "render")
    t1 = time.time()
    failed_renders = 0
    for pair in test.pairs:
        keys = [render_key(specs[0], pair.video_id), render_key(specs[0], pair.video_id, CLEAN, 0)]
        failed_renders += sum(r["status"] != "ok" for r in render_video(pair.video_path, keys, render))
    say(f"- rendered {len(test)} x ({args.perturbation}/{args.severity}, clean) clips, {failed_renders} failed "
        f"({time.time() - t1:.1f}s)")

    def ctx(spec, device):
        return TrialContext(render_cache=render_root, checkpoint=checkpoints[spec.backbone],
                            dataset_root=str(cache / "datasets"),
                            dataset_options={"n_train": args.n_train, "n_test": args.n_test},
                            gallery_cache=str(cache / f"gallery-{device}"), device=device,
                            threads=2 if device == "cpu" else None)

    t1 = time.time()
    with ProcessPoolExecutor(args.cpu_workers, mp_context=get_context("spawn")) as pool:
        cpu_futures = [pool.submit(_cpu_trial, (s, ctx(s, "cpu"))) for s in specs]
        cuda = {s.key: run(s, ctx(s, dev)) for s in specs}                      # meanwhile, on the GPU
        bf16 = {s.key: run(replace(s, precision="bf16"), ctx(s, dev)) for s in specs}
        cuda_s = time.time() - t1
        cpu = {s.key: f.result() for s, f in zip(specs, cpu_futures)}
    say(f"- {len(specs)} trials per device: CUDA fp32 + bf16 {cuda_s:.0f}s, CPU fp32 (in {args.cpu_workers} "
        f"processes, 2 threads each, alongside) {time.time() - t1:.0f}s")
    say()
    say("| direction | backbone | method | R@1 CPU fp32 | R@1 CUDA fp32 | R@1 CUDA bf16 | skew CPU | skew CUDA fp32 | "
        "ms/query CPU | ms/query CUDA fp32 | ms/query CUDA bf16 |")
    say("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst, problems = 0.0, []
    for s in specs:
        a, g, h = cpu[s.key], cuda[s.key], bf16[s.key]
        for name, r in (("cpu", a), ("cuda", g), ("cuda bf16", h)):
            if r.status != "ok":
                problems.append(f"{s.label} on {name}: {r.error}")
            elif name != "cpu" and r.environment.get("device") != dev:
                problems.append(f"{s.label}: ran on {r.environment.get('device')}, not {dev}")
        if a.status != "ok" or g.status != "ok" or h.status != "ok":
            continue
        worst = max(worst, abs(a.metrics["R1"] - g.metrics["R1"]))
        say(f"| {s.direction} | {s.backbone} | {s.method} | {a.metrics['R1']:.1f} | {g.metrics['R1']:.1f} | "
            f"{h.metrics['R1']:.1f} | {a.metrics['hub_skewness']:.2f} | {g.metrics['hub_skewness']:.2f} | "
            f"{a.timings['per_query_ms']:.1f} | {g.timings['per_query_ms']:.1f} | {h.timings['per_query_ms']:.1f} |")
    say()
    say(f"Largest |R@1 CUDA fp32 - CPU fp32|: {worst:.2f} points (tolerance {args.tolerance}).")
    if worst > args.tolerance:
        problems.append(f"CUDA and CPU disagree by {worst:.2f} R@1 points")
    for p in problems:
        say(f"- PROBLEM: {p}")
    Path(args.out).write_text("# The workload path on CUDA vs the CPU (benchmarks/cuda_check.py)\n\n"
                              + __doc__.split("\n\n", 2)[2] + "\n" + "\n".join(lines) + "\n")
    return 1 if problems or failed_renders else 0


if __name__ == "__main__":
    sys.exit(main())
