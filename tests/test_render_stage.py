"""The Ray Data render stage through real submissions: all 12 perturbation types, each cache key rendered exactly
once across two submissions but for a cache entry corrupted in between (re-rendered alone), a corrupt source video
failing only its clips."""
import shutil

import pyarrow.parquet as pq
import pytest

from conftest import private_cache, write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.record.ledger import TrialLedger
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.planning.render_sets import render_keys
from orchestrator.run.options import SubmitOptions
from orchestrator.run.submit import submit
from workloads.perturbations.video import NAMES
from workloads.render_cache import RenderCache

pytestmark = pytest.mark.e2e

ALL = "[" + ", ".join(NAMES) + "]"


def cache_files(root):
    return {p: p.stat().st_mtime_ns for p in root.rglob("*.npz")}


def test_all_types_render_once_and_run_as_trials(tmp_path, shared_cache, worker_ray):
    grid_file = write_micro_grid(tmp_path / "all.yaml", name="all12", backbones="[clip4clip]", methods="[source]",
                                 perturbations=ALL, severities="[2]")
    cache = private_cache(tmp_path / "cache", shared_cache, ("datasets", "models"))  # renders counted: its own
    opts = SubmitOptions(results_dir=str(tmp_path / "results"), cache_dir=str(cache), num_cpus=2, dashboard=False)

    first = submit(str(grid_file), opts)
    plan = build_plan(load_grid(grid_file), Paths.make(tmp_path / "results", cache))
    keys = [k for pair in plan.datasets["synthetic"].test.pairs for k in render_keys(plan, "synthetic", pair.video_id)]
    assert len(keys) == len(set(k.digest for k in keys)) == 40 * 13
    assert first.render.rendered == len(keys) and first.render.reused == 0 and first.render.failed == 0
    files = cache_files(cache / "render")
    assert len(files) == len(keys)
    # without assets the three asset-backed types ran on their documented fallbacks, and said so
    assert set(first.render.nonfaithful) >= {"main_object_occlusion", "style_transfer", "event_insertion"}
    assert first.ok == 13 and first.failed == 0
    table = pq.read_table(tmp_path / "results" / "all12" / "trials.parquet").to_pandas()
    assert set(table["perturbation"]) == set(NAMES) | {"clean"}
    ev = table[table.perturbation == "event_insertion"].iloc[0]
    assert ev["faithful_renders"] == 0.0 and "distractor" in ev["fallbacks"]
    # without VLM captions the distractor is chosen from what the query video shows, never from its ground-truth
    # caption (the retrieval target)
    import json
    (choice_file,) = (cache / "prepared" / "event_insertion").glob("synthetic-*.json")
    choices = json.loads(choice_file.read_text())
    assert len(choices) == 40
    assert {c["event_distractor_source"] for c in choices.values()} == {
        "pool=train_split, caption=query_video, embedder=finetuned"}

    # a second submission renders only the entry truncated in between: every other key exactly once over both
    victim = RenderCache(cache / "render").path(keys[7])
    victim.write_bytes(victim.read_bytes()[:100])
    second = submit(str(grid_file), SubmitOptions(**{**opts.__dict__, "rerun": True}))
    assert second.render.rendered == 1 and second.render.reused == len(keys) - 1
    assert RenderCache(cache / "render").is_valid(keys[7])
    after = cache_files(cache / "render")
    assert after.keys() == files.keys() and after[victim] != files[victim]
    assert {p: t for p, t in after.items() if p != victim} == {p: t for p, t in files.items() if p != victim}, \
        "no other cache file was rewritten"
    assert second.ok == 13


def test_corrupt_source_video_fails_its_clips_not_the_grid(tmp_path, worker_ray):
    # real-dataset path: the synthetic files read through the msrvtt loader (the synthetic dataset itself would
    # notice the damage against its manifest and regenerate)
    from workloads.datasets import create_dataset

    src = create_dataset("synthetic", root=str(tmp_path / "gen"), n_train=96, n_test=40, size=32).data_dir
    root = tmp_path / "msrvtt"
    shutil.copytree(src, root)
    test = create_dataset("msrvtt", root=str(root)).test_split()
    victim = test.pairs[5]
    with open(victim.video_path, "wb") as f:  # a truncated download: a header and nothing else
        f.write(b"\x00\x00\x00\x18ftypisom" + b"\x00" * 200)
    grid_file = tmp_path / "bad.yaml"
    grid_file.write_text(f"""
name: badvideo
datasets:
  msrvtt: {{root: {root}}}
models:
  clip_model: mlvp-micro
  finetune: {{steps: 6, batch_size: 32, precision: fp32}}
backbones: [clip4clip]
methods: [source, tent]
query_shift: {{datasets: [msrvtt], perturbations: [gaussian_noise], severities: [3]}}
""")
    paths = Paths.make(tmp_path / "results", tmp_path / "cache")
    report = submit(str(grid_file), SubmitOptions(results_dir=str(paths.results), cache_dir=str(paths.cache),
                                                  num_cpus=2, dashboard=False))
    assert report.render.failed == 2  # its clean and its noisy clip
    assert {f["video_id"] for f in report.render.failures} == {victim.video_id}
    assert all(f["video_path"] == victim.video_path for f in report.render.failures)
    assert report.ok == 4 and report.failed == 0
    ledger = TrialLedger(paths.ledger)
    for t in build_plan(load_grid(grid_file), paths).trials:
        e = ledger.get(t.key)
        assert e["n_queries"] == 39 and e["n_gallery"] == 40
        assert [d["video_id"] for d in e["dropped"]] == [victim.video_id]
        assert "cannot decode" in e["dropped"][0]["reason"]
