"""The benchmarks: each module measures one figure of benchmarks/RESULTS.md and is run from the repository root as
`python -m benchmarks.NAME` (its docstring has its options); `--smoke` runs it at a size that takes seconds, which
tests/test_benchmarks.py does for every one listed in MAINTAINED. Shared helpers (provenance, timers, paths) are in
benchmarks/provenance.py.

A new benchmark is added to MAINTAINED with the lines its smoke run must print; a module that is neither maintained
nor a helper fails tests/test_benchmarks.py. One-off investigations are dated notes in docs/notes/, not modules here
(docs/notes/2026-12-02-retired-benchmarks.md lists those that were).

Standard library only: `.ci/run` imports this package (`python3.11 -m benchmarks.provenance`) before the virtualenv
exists.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """A maintained benchmark: its module `benchmarks.<name>`, the regular expressions (multiline) its `--smoke`
    output must match (its figures' lines), and whether its smoke run is an integration test (it starts Ray, or takes
    more than ~20 s on 2 cores: docs/testing.md's tiers)."""

    name: str
    figures: tuple[str, ...]
    integration: bool = False


MAINTAINED: tuple[Benchmark, ...] = (
    Benchmark("cluster_sim", (r"^side by side: overlap [\d.]+ s \| staged [\d.]+ s",), integration=True),
    Benchmark("cuda_check", (r"^Largest \|R@1 CUDA fp32 - CPU fp32\|: [\d.]+ points",), integration=True),
    Benchmark("decoder_check", (r"^\| \S+ \| \d+ / \d+ / \d+ / \d+ \| ",)),
    Benchmark("dress_rehearsal", (r"^\| gaussian_noise \| 2 \| 0 \| ", r"^\| source gaussian_noise-1 \| \d+ \| "),
              integration=True),
    Benchmark("finetune_feed", (r"^\| xpool \| fp32 \| [\d.]+ \| 1 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+% \|",),
              integration=True),
    Benchmark("finetune_precision", (r"^\| mlvp-micro \| \d+M \| 4 \| [\d.]+ \(",), integration=True),
    Benchmark("finetune_threads", (r"^\| 2 \| [\d.]+ \([\d./]+\) \| [\d.]+x \| ",), integration=True),
    Benchmark("gpu_busy", (r"^\| all \| 0 \| \d+ \| \d+ \| ",)),
    Benchmark("gpu_trial", (r"^\| clip4clip \| tent \| fp32 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|",
                            r"^\| fp32 \| 1 \| [\d.]+ \| [\d.]+ \| 1\.00x \|",
                            r"^\| clip4clip \| fp32 \| \d+ x \d+ \| "),
              integration=True),
    Benchmark("h264_psnr", (r"^\| 5 \| \d+k \| [\d.]+ / \d+k / [-+][\d.]+ \| ",)),
    Benchmark("long_video_memory", (r"^\| gaussian_noise \| [\d.]+ \| [\d.]+ \| [\d.]+ \| yes \|",), integration=True),
    Benchmark("methods_diagnostics", (r"^\| clip4clip \| tent \| [\d.]+",), integration=True),
    Benchmark("ocr_engines", (r"^rapidocr\S* +clean +word acc +[\d.]+%",), integration=True),
    Benchmark("orchestration_overhead", (r"^wall time ratio ours / plain Tune: [\d.]+x",), integration=True),
    Benchmark("plan_scale", (r"^ +[\d,]+ trials: build +[\d.]+ s, select +[\d.]+ s, print +[\d.]+ s, total ",)),
    Benchmark("read_ahead", (r"^\| bf16 \| \d+ \| 2 \| [\d.]+ \| [\d.]+ \| [\d.]+% \|",)),
    Benchmark("real_video", (r"^render_video, 60 renderings .*\*\*[\d.]+ s CPU\*\*", r"^\| 3min_1280x720 \| "),
              integration=True),
    Benchmark("report_bench", (r"^write_report: [\d.]+s, \d+ files",), integration=True),
    Benchmark("text_bench", (r"^\| \w+ \| character \| \d+ \| 8 \| \d+ \|",), integration=True),
    Benchmark("tta_cost", (r"^\| hat_vtr \| [\d.]+ \| [\d.]+ \|",), integration=True),
)

# modules that measure nothing themselves: the shared helpers
HELPERS: tuple[str, ...] = ("provenance",)
