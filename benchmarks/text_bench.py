"""Speed of the text (t2v) perturbations on ONE core: captions per second per type.

    python -m benchmarks.text_bench [--captions tests/data/text_captions.txt] [--n 200] [--encoder-size tiny|base]
        [--no-sentence] [--out FILE] [--smoke]

For every registered type at the authors' severity (character 7, word 2, sentence 1):
- "no retry": the type alone (a similarity-retry type run without an encoder keeps its first attempt);
- "retry, batched": with the similarity retry as implemented here (attempts in blocks, one encoder call per round
  across all pending captions);
- "retry, one by one": the authors' loop (bingqingzhang/vtr_tta, do_text_perturbation.py): caption after caption,
  one encoder call for the original and one per attempt, up to 100 - their slowest step.
Both retry columns use the same encoder and give identical captions (checked here). The encoder is a random MPNet
built offline in the sentence-transformers layout (`--encoder-size tiny`: 2 layers x 32; `base`: 12 x 768, the size
of paraphrase-mpnet-base-v2, for realistic encoder cost); random weights make its acceptance rate unlike the real
model's, so "mean attempts" is shown next to the speeds. Sentence-level types run through tiny random models (their
speed says nothing about the real wmt19 / T5 models; it is the plumbing's overhead).
Captions: a text file of `video_id<TAB>caption` lines ('#' comments) or an annotation CSV with a `sentence` column.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]


def read_captions(path: Path) -> list[str]:
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            return [row["sentence"] for row in csv.DictReader(f)]
    return [line.split("\t")[-1] for line in path.read_text().splitlines() if line and not line.startswith("#")]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captions", default=str(ROOT / "tests" / "data" / "text_captions.txt"))
    ap.add_argument("--n", type=int, default=200, help="captions per type")
    ap.add_argument("--encoder-size", choices=("tiny", "base"), default="tiny")
    ap.add_argument("--no-sentence", action="store_true", help="skip the sentence level (tiny models)")
    ap.add_argument("--out", default=None, help="also write the table here (markdown)")
    ap.add_argument("--smoke", action="store_true", help="seconds: 8 captions per type, no sentence level")
    args = ap.parse_args(argv)
    if args.smoke:
        from benchmarks.provenance import smoke_skips

        args.n, args.no_sentence = 8, True
        smoke_skips("the sentence level", "its tiny random models' beam search takes minutes on 2 cores")

    import torch
    from transformers import MPNetConfig, MPNetModel
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    import workloads.perturbations.text as T
    from workloads.perturbations.text import _engine, _tiny
    from workloads.perturbations.text._encoder import resolve
    from workloads.seeding import stable_seed

    captions = read_captions(Path(args.captions))[: args.n]
    tmp = Path(tempfile.mkdtemp(prefix="text_bench_"))
    encoder_dir = _tiny.build_sentence_encoder(tmp / "encoder", captions)
    if args.encoder_size == "base":  # same tokenizer and layout, paraphrase-mpnet-base-v2's dimensions
        cfg = MPNetConfig.from_pretrained(encoder_dir)
        cfg.update({"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                    "intermediate_size": 3072})
        MPNetModel(cfg).save_pretrained(encoder_dir)
    encoder = resolve(encoder_dir, "cpu")
    models = {}
    if not args.no_sentence:
        models = {"back_translation_models": _tiny.build_back_translation_models(tmp / "wmt19"),
                  "styleformer_models": _tiny.build_styleformer_models(tmp / "styleformer", captions)}
    T.perturb_captions("synonym_replace", captions[:2], 1, dataset="warm-up")  # WordNet load, not timed

    rows = []
    for name in T.NAMES:
        info = T.get(name)
        severity = T.DEFAULT_SEVERITIES[info.level]
        if info.level == "sentence":
            if args.no_sentence:
                continue
            sample = captions[:10]
            assets = {"device": "cpu", **models}
        else:
            sample, assets = captions, {"device": "cpu"}
        T.perturb_captions(name, sample[:2], severity, dataset="warm-up", **assets)
        plain, t_plain = timed(lambda: T.perturb_captions(name, sample, severity, dataset="bench", **assets))
        row = {"name": name, "level": info.level, "severity": severity, "n": len(sample),
               "plain": len(sample) / t_plain}
        if info.similarity_retry:
            with_enc = {**assets, "sentence_encoder": encoder}
            batched, t_b = timed(lambda: T.perturb_captions(name, sample, severity, dataset="bench", **with_enc))
            seeds = [stable_seed("bench", i, name, severity, 0) for i in range(len(sample))]

            def one_by_one():
                return [_engine.run(info, severity, [c], [s], with_enc, blocks=(1,) * 100).texts[0]
                        for c, s in zip(sample, seeds)]

            sequential, t_s = timed(one_by_one)
            if sequential != batched.texts:
                raise SystemExit(f"{name}: the batched retry differs from the one-by-one loop")
            hist = batched.meta["similarity_retry"]["attempts"]
            row.update(batched=len(sample) / t_b, sequential=len(sample) / t_s,
                       attempts=sum(int(k) * v for k, v in hist.items()) / len(sample),
                       exhausted=hist.get("100", 0) / len(sample))
        rows.append(row)

    cmd = "python -m benchmarks.text_bench " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    lines = [f"`{cmd}`", "",
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (1 used), Python "
             f"{platform.python_version()}, torch {torch.__version__}; {len(captions)} captions from "
             f"{Path(args.captions).name}; encoder: random MPNet, {args.encoder_size} size", "",
             "| type | level | severity | captions | no retry (captions/s) | retry, batched | retry, one by one "
             "(authors' loop) | batched / one by one | mean attempts | exhausted |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "batched" in r:
            extra = (f"{r['batched']:.0f} | {r['sequential']:.0f} | {r['batched'] / r['sequential']:.1f}x | "
                     f"{r['attempts']:.1f} | {100 * r['exhausted']:.0f}%")
        else:
            extra = "- | - | - | - | -"
        lines.append(f"| {r['name']} | {r['level']} | {r['severity']} | {r['n']} | {r['plain']:.0f} | {extra} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
