"""Clean retrieval of fine-tuned backbones on a synthetic dataset (issue #35: a first check of HVP-Net and of TCD with
and without OCR), without the Ray grid: each backbone fine-tuned through workloads/backbones/finetune.py
`ensure_finetuned` (cached by content under --cache) and evaluated on the test split, one caption per clip.

    python benchmarks/backbone_finetune.py --dataset synthetic --option n_train=400 --option n_test=40 \
        --option size=32 hvp_net clip4clip
    python benchmarks/backbone_finetune.py --dataset synthetic_text --option n_train=400 --option n_test=32 \
        --option size=96 --train-frames 8 --eval-frames 4 tcd:ocr=true tcd:ocr=false clip4clip

A backbone is `name` or `name:key=value,...` (its options, as `create_backbone` takes them; values are JSON). Prints
t2v / v2t R@1 and R@5 (%) and the training time per backbone. Figures: docs/notes/2026-11-27-backbones-first-check.md.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backbones", nargs="+")
    ap.add_argument("--cache", default="/tmp/mlvp-backbone-finetune")
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("--option", action="append", default=[], help="dataset option key=value")
    ap.add_argument("--clip-model", default="mlvp-micro")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--train-frames", type=int, default=16)
    ap.add_argument("--eval-frames", type=int, default=12)
    args = ap.parse_args(argv)

    import torch

    from workloads.backbones.finetune import FinetuneConfig, ensure_finetuned
    from workloads.datasets import create_dataset

    torch.set_num_threads(1)
    options = {k: _value(v) for k, v in (o.split("=", 1) for o in args.option)}
    ds = create_dataset(args.dataset, root=str(Path(args.cache) / "data"), **options)
    for item in args.backbones:
        name, _, rest = item.partition(":")
        kwargs = {k: _value(v) for k, v in (kv.split("=", 1) for kv in rest.split(",") if kv)}
        cfg = FinetuneConfig(backbone=name, clip_model=args.clip_model, steps=args.steps, batch_size=args.batch_size,
                             precision="fp32", train_frames=args.train_frames, eval_frames=args.eval_frames,
                             pooling_kwargs=kwargs)
        _, record = ensure_finetuned(cfg, ds.train_split(), ds.test_split(), Path(args.cache) / "models",
                                     ds.version(), log=lambda m: None)
        m = record["metrics"]
        print(f"{item:24s} t2v R@1 {m['t2v_R1']:5.1f} R@5 {m['t2v_R5']:5.1f}   v2t R@1 {m['v2t_R1']:5.1f} "
              f"R@5 {m['v2t_R5']:5.1f}   trained in {record['train_seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
