"""The command line: `mlvp COMMAND ...` or `python -m orchestrator COMMAND ...` (`--help` on each); what each
command does is orchestrator/cli/commands.py."""
from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from orchestrator.cli import commands
from orchestrator.config.errors import GridError
from orchestrator.planning.clean_check import DEFAULT_TOLERANCE
from orchestrator.record.mlflow_store import TrackingUnavailable
from orchestrator.run.ray_env import ClusterError

EXAMPLES = {
    "submit": """examples:
  python -m orchestrator submit grids/quickstart.yaml
  python -m orchestrator submit grids/full_mlvp.yaml --address ray://head:10001 --tracking-uri http://mlflow:5000
  python -m orchestrator submit grids/quickstart.yaml --dry-run
  python -m orchestrator submit grids/full_mlvp.yaml --tolerance 3     # refuse if a checkpoint misses its paper R@1
                                                                       # by more than 3 points (--force: go on)""",
    "check": """the clean R@1/5/10 (v2t and t2v, source model) of every (backbone, checkpoint, dataset) the grid uses,
beside the paper's clean rows (workloads/paper.py); exit status 1 when one misses by more than --tolerance.
Results already in the ledger are compared again without running anything (no Ray when nothing is missing).
examples:
  python -m orchestrator check grids/quickstart.yaml
  python -m orchestrator check grids/qgs_cross.yaml --tolerance 3 --address auto""",
    "plan": "example:\n  python -m orchestrator plan grids/full_mlvp.yaml",
    "status": "example:\n  python -m orchestrator status grids/quickstart.yaml",
    "resume": """examples:
  python -m orchestrator resume grids/quickstart.yaml                # failed + never-run cells
  python -m orchestrator resume grids/quickstart.yaml --incomplete   # also cells done with dropped queries""",
    "sync": """examples:
  python -m orchestrator sync grids/quickstart.yaml                  # the local sqlite store
  python -m orchestrator sync grids/full_mlvp.yaml --tracking-uri http://127.0.0.1:5000""",
    "report": """writes results/<grid>/report/index.html (tables and plots, self-contained), report.md,
report_tables.parquet and plots/*.png, and logs them to the grid's newest MLflow parent run.
examples:
  python -m orchestrator report grids/quickstart.yaml
  python -m orchestrator report quickstart                      # a grid by name, once it has results
  python -m orchestrator report grids/quickstart.yaml --metric hub_skewness""",
    "render": """examples:
  python -m orchestrator render grids/quickstart.yaml                 # fill the render cache only
  python -m orchestrator render --contact-sheet docs/contact_sheet.png  # one frame per type x severity""",
    "convert-checkpoint": """formats read (detected from the content): the X-Pool / HAT-VTR authors' checkpoints
({"state_dict": ...} with clip.* and pool_frames.*), a Hugging Face CLIPModel folder, OpenAI's TorchScript
ViT-B-32.pt, an open_clip state dict. OpenAI-derived weights need a QuickGELU config (ViT-B-32-quickgelu, not ViT-B-32).
examples:
  python -m orchestrator convert-checkpoint xpool_msrvtt9k/model_best.pth ckpt/xpool-msrvtt.pt \\
      --clip-model ViT-B-32-quickgelu --backbone xpool
  python -m orchestrator convert-checkpoint clip-vit-base-patch32/ ckpt/clip-zero-shot.pt --backbone clip4clip""",
}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results-dir", default="results", help="where the ledger, tables, MLflow store and caches "
                   "live (default: ./results)")
    p.add_argument("--cache-dir", default=None, help="caches (datasets, models, renders, galleries); "
                   "default: RESULTS_DIR/cache. Put it on shared storage for a multi-node cluster")


def _tolerance(p: argparse.ArgumentParser) -> None:

    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="POINTS",
                   help=f"R@1 points a clean result may fall below the paper's (default {DEFAULT_TOLERANCE:g})")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator",
        description="MLVP orchestrator: test-time adaptation of video-text retrieval under query shift, "
                    "rendered with Ray Data, scheduled with Ray Tune, tracked in MLflow.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, epilog=EXAMPLES.get(name),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        return p

    for name, help_ in (("submit", "run a grid: render, fine-tune, trials, tables (skips cells already done)"),
                        ("resume", "rerun the failed and never-run cells of a grid")):
        p = add(name, help_)
        p.add_argument("grid", help="grid YAML file, e.g. grids/quickstart.yaml")
        _common(p)
        p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///RESULTS_DIR/"
                       "mlflow.db); e.g. http://127.0.0.1:5000 for an mlflow server")
        p.add_argument("--address", default=None, help="join a running Ray cluster (default: start a local one on "
                       "127.0.0.1)")
        p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
        p.add_argument("--no-dashboard", action="store_true", help="start local Ray without its dashboard")
        _tolerance(p)
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

    p = add("plan", "print what a grid would run (trials, render jobs, checkpoints, ledger state)")
    p.add_argument("grid")
    _common(p)

    p = add("check", "clean retrieval of every checkpoint the grid uses, beside the paper's clean numbers (fine-"
            "tunes missing checkpoints and renders clean clips first; results go to the ledger and gallery cache)")
    p.add_argument("grid", help="grid YAML file, e.g. grids/quickstart.yaml")
    _common(p)
    _tolerance(p)
    p.add_argument("--address", default=None, help="join a running Ray cluster")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")

    p = add("status", "ledger state of a grid: done / failed / missing, with each failure's error")
    p.add_argument("grid")
    _common(p)
    p.add_argument("--all", action="store_true", help="list every failure, not just the first 20")

    p = add("report", "rebuild a grid's tables from the ledger, write its HTML report with plots "
               "(results/<grid>/report/index.html) and print its tables")
    p.add_argument("grid", help="grid YAML file, or the name of a grid whose results exist")
    _common(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow store whose newest parent run of the grid gets the "
                   "report (default: sqlite:///RESULTS_DIR/mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="write the files only")
    p.add_argument("--metric", default="R1", help="metric of the printed tables: R1, R5, R10, MdR, MnR, "
                   "hub_skewness, ... (default R1)")

    p = add("sync", "log to an MLflow store every trial of a grid the ledger holds and the store lacks (no "
               "duplicates): after a store was down, or to fill a second store")
    p.add_argument("grid")
    _common(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///RESULTS_DIR/"
                   "mlflow.db)")

    p = add("render", "fill the render cache for a grid (no trials), or draw a contact sheet of all 12 types")
    p.add_argument("grid", nargs="?", help="grid YAML file (omit with --contact-sheet)")
    _common(p)
    p.add_argument("--contact-sheet", metavar="OUT.png", default=None,
                   help="draw one frame per perturbation type x severity of a synthetic clip into OUT.png")
    p.add_argument("--address", default=None, help="join a running Ray cluster")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")

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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    try:
        return commands.dispatch(args)
    except GridError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, TrackingUnavailable, ClusterError) as err:  # one-line errors: grid, plan, store, disk
        if isinstance(err, OSError) and (err.errno == errno.ENOSPC or "[errno 28]" in str(err).lower()):
            where = " or ".join(dict.fromkeys(str(Path(d).resolve()) for d in (
                getattr(args, "results_dir", None), getattr(args, "cache_dir", None)) if d))
            print(f"error: disk full under {where or 'the results directory'} (No space left on device); the ledger "
                  "keeps every result written so far: free space and run resume", file=sys.stderr)
            return 2
        print(f"error: {err}", file=sys.stderr)
        return 2

