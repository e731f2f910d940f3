"""How much the similarity retry's encoder decides the difficulty of the word-level text perturbations.

    python benchmarks/text_retry_effect.py [--results-dir results] [--severities 2 7]

After the quickstart (its synthetic dataset, CLIP4Clip checkpoint and clean render cache are read, nothing is
trained or rendered). For each word-level type and severity, the test captions are perturbed three ways and the
Source model's t2v R@1 against the clean gallery is printed side by side:
- "no retry": the first attempt kept (what a run without any sentence encoder does);
- "stand-in retry": the retry with the retrieval model's own text encoder (what a grid without
  assets.sentence_encoder does, flagged unfaithful): it accepts only edits the retrieval model itself finds similar;
- "independent retry": the retry with an encoder trained apart from the retrieval model (the text tower of the
  zero-shot CLIP that grids/qgs_quickstart.yaml pretrains from scratch on domain C: run that grid first),
  the situation of the authors' paraphrase-mpnet-base-v2.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from orchestrator.config.grid import load_grid
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.planning.render_sets import render_keys
from workloads.backbones import create_backbone  # noqa: E402
from workloads.perturbations.text import TEXT_PERTURBATIONS, perturb_captions  # noqa: E402
from workloads.render_cache import RenderCache  # noqa: E402
from workloads.text_queries import BackboneTextEncoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results-dir", default=str(ROOT / "results"))
    ap.add_argument("--severities", type=int, nargs="+", default=[2, 7])
    args = ap.parse_args()
    torch.set_num_threads(1)

    plan = build_plan(load_grid(ROOT / "grids" / "text_t2v.yaml"), Paths.make(args.results_dir))
    test = plan.datasets["synthetic"].test
    ckpt = {b: str(plan.model_path(CheckpointKey(b, "synthetic"))) for b in ("clip4clip", "xpool")}
    for b, p in ckpt.items():
        if not Path(p).is_file():
            sys.exit(f"no {b} checkpoint at {p}: run the quickstart first (python -m orchestrator submit "
                     "grids/quickstart.yaml)")
    model = create_backbone("clip4clip", plan.grid.models.clip_model, pretrained=ckpt["clip4clip"]).eval()
    cache = RenderCache(plan.paths.render)
    clips = np.stack([cache.read(next(k for k in render_keys(plan, "synthetic", p.video_id)
                                      if k.perturbation == "clean"))[0] for p in test.pairs])
    with torch.inference_mode():
        frames = model.encode_frames(model.preprocess_frames(torch.from_numpy(clips)))

    def r1(captions: list[str]) -> float:
        with torch.inference_mode():
            scores = model.similarity(model.encode_text(model.tokenize(captions)).float(), frames)   # [text, video]
        ranks = scores.argmax(1).numpy()
        return 100.0 * float(np.mean(ranks == np.arange(len(captions))))

    captions = [p.caption for p in test.pairs]
    ids = [p.video_id for p in test.pairs]
    qgs = build_plan(load_grid(ROOT / "grids" / "qgs_quickstart.yaml"), Paths.make(args.results_dir))
    independent = qgs.model_path(CheckpointKey("clip4clip", "pretrained"))
    if not independent.is_file():
        sys.exit(f"no zero-shot CLIP at {independent}: run grids/qgs_quickstart.yaml first")
    encoders = {"no retry": None,
                "stand-in retry": BackboneTextEncoder("clip4clip", plan.grid.models.clip_model, ckpt["clip4clip"]),
                "independent retry": BackboneTextEncoder("clip4clip", plan.grid.models.clip_model, str(independent),
                                                         clip_only=True)}
    print(f"Source CLIP4Clip t2v R@1 (%) on {len(captions)} synthetic test captions; clean {r1(captions):.1f}")
    print("| type | severity | " + " | ".join(encoders) + " | captions changed (no retry / stand-in) |")
    print("|---|---:|" + "---:|" * len(encoders) + "---:|")
    t0 = time.time()
    for name in TEXT_PERTURBATIONS.names():
        if TEXT_PERTURBATIONS.info(name)["level"] != "word":
            continue
        for sev in args.severities:
            scores, changed = [], []
            for label, enc in encoders.items():
                assets = {} if enc is None else {"sentence_encoder": enc}
                out = perturb_captions(name, captions, sev, dataset="synthetic", seed=0, video_ids=ids, **assets)
                scores.append(r1(out.texts))
                changed.append(sum(a != b for a, b in zip(out.texts, captions)))
            print(f"| {name} | {sev} | " + " | ".join(f"{s:.1f}" for s in scores)
                  + f" | {changed[0]} / {changed[1]} |")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
