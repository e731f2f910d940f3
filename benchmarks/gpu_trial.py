"""Full-size trials on one GPU: fp32 vs bf16, and how many trials to pack per GPU (`runtime.gpus_per_trial`).

    python -m benchmarks.gpu_trial [--model ViT-B-32] [--backbones clip4clip,xpool] [--methods tent,hat_vtr]
        [--queries 1000] [--gallery 1000] [--frames 12] [--precisions fp32,bf16] [--pack 1,2,4,8]
        [--pack-precisions fp32] [--pack-method tent] [--pack-backbone clip4clip] [--finetune-steps 20]
        [--device cuda] [--out benchmarks/gpu_trial_results.md] [--smoke]

One trial here is the GPU work of `workloads.trial.run` at full size: a randomly initialised model (no weights can
be downloaded; timing does not depend on the weights), the gallery (G captions, v2t) encoded once with the
unadapted model, then the online stream of `--queries` video queries (12 x 224 x 224 uint8 clips, batch 16, 3
adaptation steps per batch) through the same `run_stream` the trials use, in fp32 or bf16 autocast. The clips sit
in host memory as uint8 (what the render cache holds) and are moved and normalised per batch as in a trial; the
render-cache disk read is not part of it.

Table 1: each (backbone, method, precision) alone on the GPU: trial seconds, ms per query, peak GPU memory. Table 2: K
identical trials started together in K processes on the one GPU (Ray Tune with gpus_per_trial = 1/K): wall time of the
slowest, aggregate queries per second, speed-up over K = 1, peak memory per trial. Table 3: seconds per fine-tuning step
(orchestrator/planning/cost_model.py `finetune_s_per_step`), per backbone and precision.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

POOL_BATCHES = 8  # distinct query batches held in host memory, cycled through the stream


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_trial(cfg: dict, barrier=None) -> dict:
    """Build the model and gallery, warm up one batch, (wait for the other packed trials,) time the whole stream."""
    import torch

    from workloads.backbones import create_backbone
    from workloads.methods import Gallery, QueryBatch, create_method, run_stream

    device = torch.device(cfg["device"])
    torch.manual_seed(0)
    model = create_backbone(cfg["backbone"], cfg["model"], device=device)
    size, bs = model.image_size, 16
    g = torch.Generator().manual_seed(0)
    pool = torch.randint(0, 256, (POOL_BATCHES, bs, cfg["frames"], size, size, 3), dtype=torch.uint8, generator=g)
    if device.type == "cuda":
        pool = pool.pin_memory()
    captions = [f"a {c} {s} moving {m} number {i}" for i, (c, s, m) in
                enumerate((("red", "blue", "green")[i % 3], ("disc", "square")[i % 2], ("left", "up")[i % 2])
                          for i in range(cfg["gallery"]))]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg["precision"] == "bf16")

    def batches(n):
        for b, start in enumerate(range(0, n, bs)):
            clips = pool[b % POOL_BATCHES][:min(bs, n - start)]
            yield QueryBatch(b, model.preprocess_frames(clips))

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad(), autocast:
        feats = torch.cat([model.encode_text(model.tokenize(captions[s:s + 64])) for s in range(0, len(captions), 64)])
    gallery = Gallery("v2t", feats.float())
    _sync(device)
    gallery_s = time.perf_counter() - t0
    method = create_method(cfg["method"], model, "v2t", gallery, precision=cfg["precision"])
    run_stream(method, batches(bs))  # warm-up: kernels, allocator, autograd graph (not timed)
    if barrier is not None:
        barrier.wait()
    _sync(device)
    start = time.time()
    t0 = time.perf_counter()
    scores = run_stream(method, batches(cfg["queries"]))
    _sync(device)
    stream_s = time.perf_counter() - t0
    return {"gallery_s": gallery_s, "stream_s": stream_s, "start": start, "end": start + stream_s,
            "ms_per_query": 1e3 * stream_s / cfg["queries"], "n": int(scores.shape[0]),
            "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")}


def finetune_steps(cfg: dict, barrier=None) -> dict:
    """Fine-tuning at full size: `workloads.backbones.finetune.train_step` (the step `finetune` runs) on random
    clips and captions of FinetuneConfig's default batch, after two untimed steps; seconds per step."""
    import torch

    from workloads.backbones import create_backbone
    from workloads.backbones.finetune import FinetuneConfig, optimizer, train_step

    device = torch.device(cfg["device"])
    torch.manual_seed(0)
    config = FinetuneConfig(backbone=cfg["backbone"], clip_model=cfg["model"], steps=cfg["steps"] + 2)
    model = create_backbone(config.backbone, config.clip_model, clip_only=True, device=device).train()
    opt, sched = optimizer(model, config)
    size, bs = model.image_size, config.batch_size
    g = torch.Generator().manual_seed(0)
    clips = torch.randint(0, 256, (bs, config.frames_per_clip, size, size, 3), dtype=torch.uint8, generator=g)
    tokens = model.tokenize([f"caption number {i} of a moving shape" for i in range(bs)])
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg["precision"] == "bf16")
    for _ in range(2):
        train_step(model, opt, sched, autocast, tokens, clips)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        train_step(model, opt, sched, autocast, tokens, clips)
    _sync(device)
    seconds = time.perf_counter() - t0
    return {"s_per_step": seconds / cfg["steps"], "batch": bs, "frames": config.frames_per_clip,
            "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")}


def _worker(cfg, barrier, queue):
    try:
        queue.put((finetune_steps if cfg.get("job") == "finetune" else one_trial)(cfg, barrier))
    except Exception as err:  # report, and free the others from the barrier
        barrier.abort()
        queue.put({"error": f"{type(err).__name__}: {err}"})


def packed(cfg: dict, k: int) -> list[dict]:
    """K trials of `cfg` in K processes, streams started together."""
    ctx = mp.get_context("spawn")  # CUDA cannot be forked
    barrier, queue = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(cfg, barrier, queue)) for _ in range(k)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"packed run K={k} failed: {errors[0]}")
    return results


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="ViT-B-32", help="open_clip config, random init")
    ap.add_argument("--backbones", default="clip4clip,xpool")
    ap.add_argument("--methods", default="source,tent,hat_vtr")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--gallery", type=int, default=1000)
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--pack", default="1,2,4,8", help="numbers of trials packed on the GPU; '' to skip")
    ap.add_argument("--pack-precisions", default=None, help="precisions of the packing table (default: --precisions)")
    ap.add_argument("--pack-method", default="tent")
    ap.add_argument("--pack-backbone", default="clip4clip")
    ap.add_argument("--finetune-steps", type=int, default=20,
                    help="timed fine-tuning steps per backbone and precision (0: no fine-tuning table)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=str(Path(__file__).with_name("gpu_trial_results.md")))
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: mlvp-micro on the CPU, one Tent trial of 16 queries, K = 1, one fine-tuning step, "
                         "the table in a temporary folder (no GPU run)")
    args = ap.parse_args(argv)
    if args.smoke:
        import tempfile

        from benchmarks.provenance import smoke_skips

        args.model, args.backbones, args.methods, args.device = "mlvp-micro", "clip4clip", "tent", "cpu"
        args.queries, args.gallery, args.frames, args.precisions, args.pack = 16, 16, 2, "fp32", "1"
        args.finetune_steps = 1
        args.out = str(Path(tempfile.mkdtemp(prefix="mlvp-gpu-trial-smoke-")) / "gpu_trial_results.md")
        smoke_skips("the GPU trials and bf16", "needs a GPU: the CPU runs mlvp-micro in fp32")
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    base = {"model": args.model, "queries": args.queries, "gallery": args.gallery, "frames": args.frames,
            "device": args.device}

    import torch

    dev = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor() or "CPU"
    cmd = "python -m benchmarks.gpu_trial " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                              else sys.argv[1:]))
    header = [f"## {args.model}, random init, v2t, {args.queries} queries x {args.frames} frames, G = {args.gallery}",
             "", f"Command: `{cmd.strip()}`  ", f"Device: {dev}; torch {torch.__version__}.", "",
             "### One trial alone on the GPU", "",
             "| backbone | method | precision | gallery s | stream s | ms / query | peak GPU GiB | bf16 speed-up |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    lines: list[str] = []
    out = Path(args.out)

    def say(*new: str) -> None:
        """Print and keep: the results file is rewritten after every row, so a run stopped by a time limit (a lent
        GPU's lease) keeps every row it measured."""
        lines.extend(new)
        print("\n".join(new), flush=True)
        out.write_text("# Full-size trials on a GPU (benchmarks/gpu_trial.py)\n\n" + __doc__.split("\n\n", 2)[2]
                       + "\n" + "\n".join(lines) + "\n")

    say(*header)
    for backbone in split(args.backbones):
        for method in split(args.methods):
            fp32_s = None
            for precision in split(args.precisions):
                r = packed({**base, "backbone": backbone, "method": method, "precision": precision}, 1)[0]
                if precision == "fp32":
                    fp32_s = r["stream_s"]
                speed = f"{fp32_s / r['stream_s']:.2f}x" if precision == "bf16" and fp32_s else "-"
                line = (f"| {backbone} | {method} | {precision} | {r['gallery_s']:.2f} | {r['stream_s']:.2f} | "
                        f"{r['ms_per_query']:.2f} | {r['peak_gib']:.2f} | {speed} |")
                say(line)
    ks = [int(k) for k in split(args.pack)]
    if ks:
        head = ["", f"### Trials packed per GPU ({args.pack_backbone} / {args.pack_method}, K processes started "
                    "together)", "",
                "| precision | K | slowest trial s | aggregate queries / s | throughput vs K = 1 | "
                "median ms / query per trial | peak GPU GiB per trial |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        say(*head)
        for precision in split(args.pack_precisions or args.precisions):
            one = None
            for k in ks:
                rs = packed({**base, "backbone": args.pack_backbone, "method": args.pack_method,
                             "precision": precision}, k)
                wall = max(r["end"] for r in rs) - min(r["start"] for r in rs)
                qps = k * args.queries / wall
                one = qps if k == 1 else one   # no K = 1 in --pack: no ratio
                line = (f"| {precision} | {k} | {wall:.2f} | {qps:.1f} | {f'{qps / one:.2f}x' if one else '-'} | "
                        f"{statistics.median(r['ms_per_query'] for r in rs):.2f} | "
                        f"{max(r['peak_gib'] for r in rs):.2f} |")
                say(line)
    if args.finetune_steps > 0:
        say("", f"### Fine-tuning steps (FinetuneConfig's batch and frames per clip, {args.finetune_steps} timed "
                "steps after 2 untimed)", "",
            "| backbone | precision | batch x frames | s / step | peak GPU GiB | bf16 speed-up |",
            "|---|---|---|---:|---:|---:|")
        for backbone in split(args.backbones):
            fp32_s = None
            for precision in split(args.precisions):
                r = packed({**base, "job": "finetune", "backbone": backbone, "precision": precision,
                            "steps": args.finetune_steps}, 1)[0]
                fp32_s = r["s_per_step"] if precision == "fp32" else fp32_s
                speed = f"{fp32_s / r['s_per_step']:.2f}x" if precision == "bf16" and fp32_s else "-"
                say(f"| {backbone} | {precision} | {r['batch']} x {r['frames']} | {r['s_per_step']:.3f} | "
                    f"{r['peak_gib']:.2f} | {speed} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
