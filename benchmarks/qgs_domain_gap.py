"""Why the zero-shot model can beat cross-dataset models on the synthetic domains: each QGS model evaluated on a
target's clean test videos with the target's own captions, and with the same videos described in the other domain's
phrasing (same attributes, other words). If rephrasing closes the gap, the caption vocabulary is the cause; if not,
the visual domain gap is. Clean retrieval as the fine-tune's evaluation (workloads/backbones/finetune.py `evaluate`).

    python benchmarks/qgs_domain_gap.py --results-dir results     # after `mlvp submit qgs_quickstart` ran there
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--clip-model", default="mlvp-tiny")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from workloads.backbones import create_backbone
    from workloads.backbones.finetune import evaluate
    from workloads.datasets import create_dataset
    from workloads.datasets.synthetic import DOMAINS
    from workloads.video_io import read_frames, resize_center_crop

    cache = Path(args.results_dir) / "cache"

    def checkpoint(dataset: str) -> str:
        found = sorted((cache / "models").glob(f"clip4clip-{args.clip_model}-{dataset}-*.pt"))
        if not found:
            raise SystemExit(f"no clip4clip checkpoint for {dataset} under {cache / 'models'}: run "
                             "grids/qgs_quickstart.yaml with this results directory first")
        return str(found[-1])

    print(f"python benchmarks/qgs_domain_gap.py --results-dir {args.results_dir}")
    print("| target | model | own captions v2t / t2v R@1 | other domain's phrasing v2t / t2v R@1 |")
    print("|---|---|---|---|")
    for target, source, other in (("synthetic_b", "synthetic", "a"), ("synthetic", "synthetic_b", "b")):
        ds = create_dataset(target, root=str(cache / "datasets"))
        test = ds.test_split()
        frames = np.stack([resize_center_crop(read_frames(p.video_path, 12), 64) for p in test.pairs])
        own = [p.caption for p in test.pairs]
        rephrased = [DOMAINS[other].caption(a, 0) for a in ds.attributes("test")]
        for label, path in ((f"fine-tuned on {source} (cross-dataset)", checkpoint(source)),
                            ("pretrained on synthetic_c (zero-shot)", checkpoint("synthetic_c"))):
            model = create_backbone("clip4clip", args.clip_model, pretrained=path, clip_only=True)
            a, b = evaluate(model, frames, own), evaluate(model, frames, rephrased)
            print(f"| {target} | {label} | {a['v2t_R1']:.1f} / {a['t2v_R1']:.1f} | {b['v2t_R1']:.1f} / "
                  f"{b['t2v_R1']:.1f} ({other.upper()}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
