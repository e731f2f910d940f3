"""The command line: `mlvp COMMAND ...` (or `python -m orchestrator COMMAND ...`), `--help` on each; what each
command does is orchestrator/cli/commands.py. Errors a user can fix come out as one line on stderr with exit 2."""
from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from orchestrator.config.errors import GridError
from orchestrator.planning.clean_check import DEFAULT_TOLERANCE
from orchestrator.record.mlflow_store import TrackingUnavailable
from orchestrator.record.results_lock import ResultsFolderLocked
from orchestrator.run.interrupts import handle_signals, stopped_by_sigterm, taken
from orchestrator.run.ray_env import ClusterError
from workloads.versions import software_versions

GRID_HELP = ("a grid: a YAML file, the name of a grid shipped with mlvp (`mlvp grids` lists them), or the name of a "
             "grid with results under --results-dir")

EXAMPLES = {
    "submit": """examples:
  mlvp submit quickstart                                   # the embedded default, on this machine
  mlvp submit full_mlvp --address HEAD_IP:6379 --cache-dir /shared/cache --results-dir /shared/results
  mlvp submit my_grid.yaml --dry-run                       # the plan, nothing started
  mlvp submit full_mlvp --tolerance 3     # refuse if a checkpoint misses its paper R@1 by more than 3 points
Ray, Ray Tune and MLflow write to results/<grid>/logs/; --verbose shows them here.""",
    "resume": """examples:
  mlvp resume quickstart                # failed, damaged and never-run cells
  mlvp resume quickstart --only-failed  # failed cells only
  mlvp resume quickstart --incomplete   # also cells done with dropped queries""",
    "check": """the clean R@1/5/10 (v2t and t2v, source model) of every (backbone, checkpoint, dataset) the grid uses,
beside the published clean rows (workloads/paper.py); exit status 1 when one misses by more than --tolerance.
Results already in the ledger are compared again without running anything (no Ray when nothing is missing).
examples:
  mlvp check quickstart
  mlvp check qgs_cross --tolerance 3 --address auto""",
    "plan": """writes nothing: trials by scenario, render sets, checkpoints, what submit would generate or train, the
paths not on disk, and the estimated GPU-hours and CPU-hours of what remains to run (the render cost from the
size of your videos where they are on disk: up to 16 headers read per dataset; else typical sizes, said so).
examples:
  mlvp plan quickstart
  MLVP_DATA=/data/mlvp mlvp plan full_mlvp --verbose      # and every figure of the cost model with its source
  MLVP_DATA=/data/mlvp mlvp plan full_mlvp --gpus 8       # and its wall time on one 8-GPU node""",
    "status": """exit status: 0 every cell done, 1 some failed or damaged, 3 some never run (none failed).
examples:
  mlvp status quickstart
  mlvp status full_mlvp --results-dir /shared/results --all""",
    "sync": """examples:
  mlvp sync quickstart                                      # the local sqlite store
  mlvp sync full_mlvp --tracking-uri http://127.0.0.1:5000""",
    "report": """writes results/<grid>/report/index.html (tables and plots, self-contained), report.md,
report_tables.parquet and plots/*.png, and logs them to the grid's newest MLflow parent run.
examples:
  mlvp report quickstart
  mlvp report quickstart --metric hub_skewness
  mlvp report my_grid.yaml --results-dir /shared/results --no-mlflow""",
    "render": """examples:
  mlvp render quickstart                                   # fill the render cache only
  mlvp render --contact-sheet contact_sheet.png            # one frame per type x severity""",
    "grids": """examples:
  mlvp grids                           # the grids shipped with mlvp
  cp "$(mlvp grids --path quickstart)" my_grid.yaml        # a copy to edit""",
    "convert-checkpoint": """formats read (detected from the content): the X-Pool / HAT-VTR authors' checkpoints
({"state_dict": ...} with clip.* and pool_frames.*), a Hugging Face CLIPModel folder, OpenAI's TorchScript
ViT-B-32.pt, an open_clip state dict. OpenAI-derived weights need a QuickGELU config (ViT-B-32-quickgelu, not ViT-B-32).
examples:
  mlvp convert-checkpoint xpool_msrvtt9k/model_best.pth ckpt/xpool-msrvtt.pt \\
      --clip-model ViT-B-32-quickgelu --backbone xpool
  mlvp convert-checkpoint clip-vit-base-patch32/ ckpt/clip-zero-shot.pt --backbone clip4clip""",
}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results-dir", default="results", help="where the ledger, tables, MLflow store and caches "
                   "live (default: ./results)")
    p.add_argument("--cache-dir", default=None, help="caches (datasets, models, renders, galleries); "
                   "default: RESULTS_DIR/cache. Put it on shared storage for a multi-node cluster")


def _ray(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=None, help="join a running Ray cluster, e.g. HEAD_IP:6379 or auto "
                   "(default: start a local one on 127.0.0.1)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--verbose", "-v", action="store_true", help="show Ray's, Tune's and MLflow's own output here "
                   "instead of in results/<grid>/logs/")


def _break_lock(p: argparse.ArgumentParser) -> None:
    p.add_argument("--break-lock", action="store_true", help="take the results folder's lock even when it is "
                   "recorded as held by a driver on another host (which this host cannot check): only once that "
                   "driver is gone (orchestrator/record/results_lock.py)")


def _tolerance(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="POINTS",
                   help=f"R@1 points a clean result may fall below the paper's (default {DEFAULT_TOLERANCE:g})")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlvp",
        description="MLVP orchestrator: test-time adaptation of video-text retrieval under distribution shift; "
                    "perturbations rendered with Ray Data, trials scheduled with Ray Tune, tracked in MLflow. "
                    "`python -m orchestrator` is the same command.",
        epilog="start with: mlvp submit quickstart (the embedded default: no GPU, no data, no downloads)")
    parser.add_argument("--version", action="store_true", help="the versions of mlvp, Python, torch, Ray, MLflow "
                        "and CUDA, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, epilog=EXAMPLES.get(name),
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    for name, help_ in (("submit", "run a grid: fine-tune, render, trials, tables and report (skips cells done)"),
                        ("resume", "rerun the failed, damaged and never-run cells of a grid")):
        p = add(name, help_)
        p.add_argument("grid", help=GRID_HELP)
        _common(p)
        p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///RESULTS_DIR/"
                       "mlflow.db); e.g. http://127.0.0.1:5000 for an mlflow server")
        _ray(p)
        p.add_argument("--no-dashboard", action="store_true", help="start local Ray without its dashboard")
        _tolerance(p)
        _break_lock(p)
        p.add_argument("--force", action="store_true", help="run the grid even when a checkpoint's clean R@1 "
                       "misses the paper's by more than --tolerance (see the check command)")
        if name == "submit":
            p.add_argument("--dry-run", action="store_true", help="print the plan (trials, render jobs) and exit "
                           "without starting Ray")
            p.add_argument("--rerun", action="store_true", help="run every cell again, even the successful ones")
        else:
            p.add_argument("--only-failed", action="store_true", help="rerun failed cells only, not never-run ones")
            p.add_argument("--incomplete", action="store_true", help="also rerun cells that finished with dropped "
                           "queries (videos that could not be decoded, e.g. fixed since)")

    p = add("plan", "what a grid would run (trials, render sets, checkpoints, ledger state, cost); writes nothing")
    p.add_argument("grid", help=GRID_HELP)
    _common(p)
    p.add_argument("--verbose", "-v", action="store_true", help="also every figure of the cost model and where it "
                   "was measured (orchestrator/planning/cost_model.py)")
    p.add_argument("--gpus", type=_positive_int, default=None, metavar="N", help="also the wall time of what remains "
                   "on a cluster of N GPUs, in fp32 and bf16, from the cost model")
    p.add_argument("--cpus", type=_positive_int, default=None, metavar="C", help="the CPUs that render beside those "
                   "GPUs (default: 16 per GPU, as on one H200 node)")

    p = add("check", "clean retrieval of every checkpoint the grid uses, beside the paper's clean numbers (fine-"
            "tunes missing checkpoints and renders clean clips first; results go to the ledger and gallery cache)")
    p.add_argument("grid", help=GRID_HELP)
    _common(p)
    _tolerance(p)
    _ray(p)
    _break_lock(p)

    p = add("status", "ledger state of a grid: done / failed / damaged / never run, with each failure's error")
    p.add_argument("grid", help=GRID_HELP)
    _common(p)
    p.add_argument("--all", action="store_true", help="list every failure, not just the first 20")

    p = add("report", "rebuild a grid's tables from the ledger, write its HTML report with plots "
               "(results/<grid>/report/index.html) and print its tables")
    p.add_argument("grid", help=GRID_HELP)
    _common(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow store whose newest parent run of the grid gets the "
                   "report (default: sqlite:///RESULTS_DIR/mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="write the files only")
    _break_lock(p)
    p.add_argument("--metric", default="R1", help="metric of the printed tables: R1, R5, R10, MdR, MnR, "
                   "hub_skewness, ... (default R1)")

    p = add("sync", "log to an MLflow store every trial of a grid the ledger holds and the store lacks (no "
               "duplicates): after a store was down, or to fill a second store")
    p.add_argument("grid", help=GRID_HELP)
    _common(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///RESULTS_DIR/"
                   "mlflow.db)")
    _break_lock(p)

    p = add("render", "fill the render cache for a grid (no trials), or draw a contact sheet of all 12 types")
    p.add_argument("grid", nargs="?", help=GRID_HELP + " (omit with --contact-sheet)")
    _common(p)
    p.add_argument("--contact-sheet", metavar="OUT.png", default=None,
                   help="draw one frame per perturbation type x severity of a synthetic clip into OUT.png")
    _ray(p)

    p = add("grids", "the grids shipped with mlvp: names, what each is, and their files")
    p.add_argument("--path", metavar="NAME", default=None, help="print the file of this shipped grid only")

    p = add("convert-checkpoint", "convert a foreign checkpoint (X-Pool/HAT-VTR, Hugging Face, OpenAI, open_clip) "
            "to this tool's format once, for models.checkpoints / models.pretrained")
    p.add_argument("input", help="checkpoint file or Hugging Face folder")
    p.add_argument("output", help="where to write the converted checkpoint (.pt)")
    p.add_argument("--clip-model", default="ViT-B-32-quickgelu", help="open_clip config of the weights "
                   "(default: ViT-B-32-quickgelu, OpenAI's ViT-B/32)")
    p.add_argument("--backbone", required=True, help="pooling head: clip4clip (mean pooling) or xpool")
    p.add_argument("--clip-only", action="store_true", help="take only the CLIP weights (an X-Pool head then "
                   "starts at its identity initialisation)")
    return parser


def version_lines() -> list[str]:
    """`mlvp --version`: the versions every trial also records (workloads/versions.py)."""
    v = software_versions(with_cuda=True)
    return [f"mlvp {v['mlvp']}",
            f"python {v['python']}, torch {v['torch']} (CUDA {v['cuda']}; GPU: {v['gpu']}), torchvision "
            f"{v['torchvision']}, open_clip {v['open_clip']}",
            f"ray {v['ray']}, mlflow {v['mlflow']}, numpy {v['numpy']}, PyAV {v['pyav']}"]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        print("\n".join(version_lines()))
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    handle_signals()
    # the commands import pandas and the registries (~1 s): after the arguments parse, so --help answers at once
    from orchestrator.cli import commands

    try:
        return commands.dispatch(args)
    except GridError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:   # a submission has said what is kept and how to resume (run/submit.py)
        taken()
        if stopped_by_sigterm(err):
            print("stopped by SIGTERM", file=sys.stderr)
            return 143
        print("interrupted", file=sys.stderr)
        return 130
    # one-line errors: grid, plan, store, disk, a results folder another driver holds
    except (OSError, ValueError, TrackingUnavailable, ClusterError, ResultsFolderLocked) as err:
        if isinstance(err, OSError) and (err.errno == errno.ENOSPC or "[errno 28]" in str(err).lower()):
            where = " or ".join(dict.fromkeys(str(Path(d).resolve()) for d in (
                getattr(args, "results_dir", None), getattr(args, "cache_dir", None)) if d))
            print(f"error: disk full under {where or 'the results directory'} (No space left on device); the ledger "
                  "keeps every result written so far: free space and run resume", file=sys.stderr)
            return 2
        print(f"error: {err}", file=sys.stderr)
        return 2
