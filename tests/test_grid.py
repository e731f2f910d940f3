import copy
from pathlib import Path

import pytest
import yaml

from orchestrator.config.errors import GridError
from orchestrator.config.grid import PathCheck, load_grid, parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "name": "t",
    "datasets": {"synthetic": {}},
    "backbones": ["clip4clip"],
    "methods": ["source"],
    "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise"], "severities": [1]},
}


def grid_with(**changes):
    g = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = g
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return g


def error_of(data) -> str:
    with pytest.raises(GridError) as info:
        parse_grid(data, "g.yaml")
    msg = str(info.value)
    assert "\n" not in msg, "errors are one line"
    return msg


def test_quickstart_grid_is_valid_and_plans_the_issue_matrix():
    grid = load_grid(ROOT / "grids" / "quickstart.yaml")
    # the paper's story in four rows (issue #30 item 7): no adaptation, entropy minimisation, TCR, HAT-VTR
    assert grid.backbones == ["clip4clip", "xpool"] and grid.methods == ["source", "tent", "tcr", "hat_vtr"]
    plan = build_plan(grid, Paths.make("/tmp/mlvp-grid-test"))
    # (clean + 2 perturbations at severity 5) x 2 backbones x 4 methods
    assert len(plan.trials) == (1 + 2) * 2 * 4
    assert {t.direction for t in plan.trials} == {"v2t"}
    assert len({t.key for t in plan.trials}) == len(plan.trials)
    assert plan.renders["synthetic"][0] == ("clean", 0) and len(plan.renders["synthetic"]) == 3


# One table of bad grids: each change to a valid grid, and what its one-line error must say. Nothing starts: these
# fail in parse_grid, which `plan`, `submit --dry-run` and `submit` all call first.
BAD_GRIDS = [
    # unknown keys, with a did-you-mean
    ({"query_shift__perturbation": ["fog"]}, "query_shift.perturbation: unknown key (did you mean 'perturbations'?)"),
    ({"bogus": 1}, "bogus: unknown key; allowed keys: name, datasets, backbones"),
    ({"runtime__batchsize": 8}, "runtime.batchsize: unknown key (did you mean 'batch_size'?)"),
    ({"query_gallery_shift": {"zero_shot": {"datasets": ["synthetic"]}, "direction": ["v2t"]}},
     "query_gallery_shift.direction: unknown key (did you mean 'directions'?)"),
    # wrong types
    ({"runtime__batch_size": "sixteen"}, "runtime.batch_size: expected an integer, got 'sixteen'"),
    ({"faithful": "yes"}, "faithful: expected true/false"),
    ({"methods": "tent"}, "methods: expected a list of strings"),
    ({"query_shift__severities": [1.5]}, "query_shift.severities[0]: expected an integer"),
    # ranges, checked at load (not inside a trial)
    ({"query_shift__severities": [6]}, "query_shift.severities[0]: unknown severity 6"),
    ({"runtime__steps": 0}, "runtime.steps: must be an integer >= 1, got 0"),
    ({"runtime__precision": "fp16"}, "runtime.precision: must be one of fp32, bf16, got 'fp16'"),
    ({"runtime__resolution": -64}, "runtime.resolution: must be an integer >= 16, got -64"),
    ({"runtime__gpus_per_trial": -0.5}, "runtime.gpus_per_trial: must be a number >= 0 and <= 1, got -0.5"),
    ({"runtime__gpus_per_trial": 2}, "runtime.gpus_per_trial: must be a number >= 0 and <= 1, got 2.0"),
    ({"runtime__trials_per_wave": 0}, "runtime.trials_per_wave: must be an integer >= 1, got 0"),
    ({"seed": -1}, "seed: must be an integer >= 0, got -1"),
    ({"models__finetune__steps": -5}, "models.finetune.steps: must be an integer >= 1, got -5"),
    ({"models__finetune__lr": 0}, "models.finetune.lr: must be a number > 0, got 0.0"),
    ({"models__finetune__frames_per_clip": 20}, "models.finetune.frames_per_clip: must be between 1 and train_frames"),
    # dataset options: names, kinds, choices and the generator's ranges, at load
    ({"datasets": {"synthetic": {"options": {"n_tset": 5}}}},
     "datasets.synthetic.options: dataset 'synthetic': unknown option(s) n_tset (did you mean 'n_test'?)"),
    ({"datasets": {"synthetic": {"options": {"n_test": "x"}}}}, "option 'n_test' must be an integer, got 'x'"),
    ({"datasets": {"synthetic": {"options": {"n_test": -5}}}}, "need n_train >= 1 and n_test >= 1"),
    ({"query_gallery_shift": {"zero_shot": {"datasets": ["synthetic"]}},
      "models__zero_shot_pretrain": {"dataset": "synthetic_c", "options": {"size": "big"}}},
     "models.zero_shot_pretrain.options: dataset 'synthetic_c': option 'size' must be an integer"),
    # text perturbations
    ({"query_shift__directions": ["v2t", "t2v"], "query_shift__text_perturbations": ["ocrr"]},
     "query_shift.text_perturbations[0]: unknown text perturbation 'ocrr' (did you mean 'ocr'?)"),
    ({"query_shift__directions": ["v2t", "t2v"], "query_shift__text_perturbations": ["ocr"],
      "query_shift__text_severities": {"character": [9]}}, "query_shift.text_severities.character[0]: unknown"),
    ({"assets__back_translation_models": ["/only/one"]}, "assets.back_translation_models: give two folders"),
    ({"assets__sentence_encoder": "/no/encoder"}, "assets.sentence_encoder: directory not found: /no/encoder"),
    # unknown names list the allowed ones
    ({"methods": ["source", "tnet"]}, "methods[1]: unknown method or variant 'tnet' (did you mean 'tent'?)"),
    ({"backbones": ["xpol"]},
     "backbones[0]: unknown backbone 'xpol' (did you mean 'xpool'?); allowed: clip4clip, xpool"),
    ({"query_shift__perturbations": ["gaussian"]}, "unknown video perturbation 'gaussian'"),
    ({"datasets": {"msrvt": {}}}, "datasets[0]: unknown dataset 'msrvt' (did you mean 'msrvtt'?)"),
    ({"query_shift__datasets": ["msrvtt"]}, "declare it under datasets"),
    ({"query_shift__directions": ["v2t", "back"]}, "query_shift.directions[1]: unknown direction 'back'"),
    # bad method options, checked at validation with the method's ranges
    ({"methods": ["sar"], "method_options": {"sar": {"margin": 1.5}}},
     "method_options.sar: method 'sar': option 'margin' is a fraction of the batch in faithful mode and must be "
     "in (0, 1]"),
    ({"methods": ["tcr"], "method_options": {"tcr": {"queue_size": 0}}}, "option 'queue_size' must be an integer >= 1"),
    ({"methods": ["tent"], "method_options": {"tent": {"lr": "fast"}}},
     "method_options.tent: method 'tent': option 'lr' must be a number > 0, got 'fast'"),
    ({"methods": ["v"], "variants": {"v": {"method": "hat_vtr", "options": {"hsm": False}}}},
     "variants.v.options: method 'hat_vtr': unknown option(s) 'hsm'"),
    ({"methods": ["v"], "variants": {"v": {"method": "hatvtr"}}},
     "variants.v.method: 'hatvtr' is not allowed (did you mean 'hat_vtr'?)"),
    ({"variants": {"tent": {"method": "tent"}}}, "cannot take a method's name"),
    ({"methods": ["source", "source"]}, "methods: duplicate method or variant 'source'"),
    # missing paths
    ({"models__checkpoints": {"clip4clip": {"synthetic": "/nope.pt"}}}, "checkpoint file not found: /nope.pt"),
    ({"datasets": {"synthetic": {"root": "/no/such/dir"}}}, "datasets.synthetic.root: directory not found"),
    ({"models__pretrained": "/no/clip.bin"}, "models.pretrained: weights file not found: /no/clip.bin"),
    ({"assets__style_images": "/no/styles"}, "assets.style_images: path not found"),
    # empty axes
    ({"methods": []}, "methods: list at least one method"),
    ({"backbones": []}, "backbones: list at least one backbone"),
    ({"query_shift__perturbations": [], "query_shift__clean": False}, "query_shift: no cells"),
    # scenarios
    ({"query_shift": None, "query_gallery_shift": {}},
     "query_gallery_shift: name at least one of cross_dataset, zero_shot"),
    ({"query_gallery_shift": {"cross_dataset": {"pairs": [["synthetic", "msrvtt"]]}}},
     "query_gallery_shift.cross_dataset.pairs[0][1]: unknown dataset (declare it under datasets:) 'msrvtt'"),
    ({"query_gallery_shift": {"cross_dataset": {"pairs": [["synthetic"]]}}},
     "query_gallery_shift.cross_dataset.pairs[0]: a pair is [source, target], got ['synthetic']"),
    ({"query_gallery_shift": {"cross_dataset": {"pairs": "every"}}},
     "query_gallery_shift.cross_dataset.pairs: expected a list of [source, target] pairs or 'all'"),
    ({"query_gallery_shift": {"zero_shot": {"datasets": ["synthetic"]}}},
     "query_gallery_shift.zero_shot: zero-shot cells adapt CLIP weights never fine-tuned for retrieval: set "
     "models.pretrained"),
    ({"query_gallery_shift": {"zero_shot": {"datasets": ["synthetic"]}},
      "models__zero_shot_pretrain": {"dataset": "synthetic_z"}},
     "models.zero_shot_pretrain.dataset: 'synthetic_z' is not allowed"),
    # names a user mistypes, and values no run can use
    ({"models__clip_model": "ViT-Q-99"}, "models.clip_model: unknown open_clip config 'ViT-Q-99'"),
    ({"runtime__num_frames": 100000000}, "runtime.num_frames: must be an integer >= 1 and <= 128, got 100000000"),
    # a grid's name is a folder under the results: it cannot leave them or take one of theirs
    ({"name": ".."}, "name: '..': a name of dots only would point outside the results folder"),
    ({"name": "."}, "name: '.': a name of dots only"),
    ({"name": "ledger"}, "name: 'ledger': 'ledger' is a folder the results folder keeps for itself"),
    ({"name": "cache"}, "is a folder the results folder keeps for itself"),
    ({"name": "a/b"}, "name: 'a/b': use letters, digits"),
]


@pytest.mark.parametrize("changes,expected", BAD_GRIDS, ids=[str(i) for i in range(len(BAD_GRIDS))])
def test_bad_grid_fails_at_load_with_one_line_naming_the_key(changes, expected):
    g = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = g
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last)
        else:
            node[last] = value
    msg = error_of(g)
    assert msg.startswith("g.yaml: ") and expected in msg, msg


def test_yaml_syntax_errors_and_duplicate_keys_name_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nbackbones: [clip4clip\nmethods: [source]\n")
    with pytest.raises(GridError, match=r"bad.yaml: not valid YAML: line 3, column \d+"):
        load_grid(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text(yaml.safe_dump(BASE) + "methods: [tent]\n")
    with pytest.raises(GridError, match=r"dup.yaml: line \d+, column 1: duplicate key 'methods' \(first at line \d+\)"):
        load_grid(dup)


def test_load_grid_file_errors(tmp_path):
    with pytest.raises(GridError, match="grid file not found"):
        load_grid(tmp_path / "none.yaml")
    with pytest.raises(GridError, match="is a folder, not a grid file"):
        load_grid(tmp_path)
    binary = tmp_path / "grid.bin"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(GridError, match=r"grid.bin: not a text file \(byte 0 is not UTF-8\): a grid is a YAML file"):
        load_grid(binary)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(GridError, match="not valid YAML"):
        load_grid(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert load_grid(good).source == str(good)


def test_every_shipped_grid_is_valid(mlvp_env):
    # grids on real data name it through the environment: mlvp_env points it at stand-in annotation files
    paths = sorted((ROOT / "grids").glob("*.yaml"))
    assert len(paths) >= 5
    for path in paths:
        load_grid(path)


def test_missing_paths_are_recorded_only_by_the_load_that_asks(tmp_path, monkeypatch):
    """Sizing (`load_grid(..., missing=[...])`) records each path that is not on disk, once per key, in its own list;
    every other load raises on the same grid, before, after and in between (no state outlives a load)."""
    monkeypatch.delenv("MLVP_NOWHERE", raising=False)
    data = grid_with(datasets__synthetic__root=str(tmp_path / "absent"),
                     assets__wordnet="${MLVP_NOWHERE}/wordnet", models__pretrained=str(tmp_path / "clip.pt"))
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(GridError, match="assets.wordnet: environment variable MLVP_NOWHERE is not set"):
        load_grid(path)
    first, second = [], []
    load_grid(path, missing=first)
    assert [m.key for m in first] == ["assets.wordnet", "models.pretrained", "datasets.synthetic.root"]
    assert "MLVP_NOWHERE is not set" in first[0].fix
    with pytest.raises(GridError, match="environment variable MLVP_NOWHERE is not set"):
        parse_grid(copy.deepcopy(data), "g.yaml")
    parse_grid(copy.deepcopy(data), "g.yaml", PathCheck(second))
    assert second == first and len(first) == 3


def test_method_variants_become_their_own_rows_with_their_options():
    g = grid_with(methods=["source", "hat_vtr", "no_hsm", "fixed"],
                  variants={"no_hsm": {"method": "hat_vtr", "options": {"hsm_target": False, "hsm_rerank": False}},
                            "fixed": {"method": "hat_vtr", "faithful": False}})
    plan = build_plan(parse_grid(g, "g.yaml"), Paths.make("/tmp/mlvp-grid-test"))
    by_label = {}
    for t in plan.trials:
        by_label.setdefault(t.method_label, []).append(t)
    assert set(by_label) == {"source", "hat_vtr", "no_hsm", "fixed"}
    no_hsm = by_label["no_hsm"][0]
    assert no_hsm.method == "hat_vtr" and no_hsm.method_options == {"hsm_target": False, "hsm_rerank": False}
    assert by_label["fixed"][0].faithful is False and by_label["hat_vtr"][0].faithful is True
    assert len({t.key for t in plan.trials}) == len(plan.trials)


def test_method_options_every_method_accepts_lr_weight_decay_temperature():
    for method in ("tent", "sar", "hat_vtr"):
        parse_grid(grid_with(methods=[method], method_options={method: {"lr": 1e-4, "temperature": 0.01}}), "g.yaml")
    # the corrected mode reads SAR's margin as a factor of ln(G): 1.5 is fine there
    parse_grid(grid_with(methods=["sar"], faithful=False, method_options={"sar": {"margin": 1.5}}), "g.yaml")


def test_video_perturbations_shift_v2t_and_text_perturbations_t2v():
    plan = build_plan(parse_grid(grid_with(query_shift__directions=["v2t", "t2v"],
                                           query_shift__text_perturbations=["ocr"]), "g.yaml"),
                      Paths.make("/tmp/mlvp-grid-test"))
    cells = {(t.direction, t.perturbation) for t in plan.trials}
    assert cells == {("v2t", "clean"), ("v2t", "gaussian_noise"), ("t2v", "clean"), ("t2v", "ocr")}
    assert "video perturbations shift video queries" in error_of(
        grid_with(query_shift__directions=["t2v"]))
    # t2v without text perturbations and without the clean row has no cells of its own: still valid (v2t has)
    plan = build_plan(parse_grid(grid_with(query_shift__directions=["v2t", "t2v"], query_shift__clean=False),
                                 "g.yaml"), Paths.make("/tmp/mlvp-grid-test"))
    assert {t.direction for t in plan.trials} == {"v2t"}


def test_paths_that_are_the_wrong_kind_of_thing(tmp_path):
    """A dataset root that is a file, and a checkpoint of random bytes, are refused when the grid loads with what
    they are, not later as 'directory not found' or in every trial (a torch error after the checkpoint is read)."""
    root = tmp_path / "MSRVTT"
    root.write_text("a file")
    noise = tmp_path / "ckpt.pt"
    noise.write_bytes(bytes(range(7, 250)))
    for changes, expected in (
            ({"datasets": {"synthetic": {"root": str(root)}}},
             f"datasets.synthetic.root: {root} is a file; give the folder that holds synthetic"),
            ({"models": {"checkpoints": {"clip4clip": {"synthetic": str(noise)}}}},
             f"models.checkpoints.clip4clip.synthetic: {noise}: not a weights file")):
        g = copy.deepcopy(BASE)
        g.update(changes)
        msg = error_of(g)
        assert expected in msg and "\n" not in msg, msg
