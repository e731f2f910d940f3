"""Grids take a Hugging Face CLIP folder (config.json + model.safetensors / pytorch_model.bin) wherever they take a
weights file (models.pretrained, models.checkpoints): validated when the grid loads, versioned by content when it is
planned (workloads/backbones/convert.py reads the folder; tests/test_convert.py checks the features)."""
import pytest

from orchestrator.config.errors import GridError
from orchestrator.config.grid import load_grid
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.config.scenarios.base import PRETRAINED


def _hf_folder(path, weights=b"weights v1", name="model.safetensors"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"model_type": "clip"}')
    (path / name).write_bytes(weights)   # planning digests the files; it never loads them
    return path


def test_hf_clip_folder_as_models_pretrained(mlvp_env, monkeypatch):
    folder = _hf_folder(mlvp_env / "clip-vit-base-patch32")
    monkeypatch.setenv("MLVP_WEIGHTS", str(folder))
    plan = build_plan(load_grid("grids/qgs_zero_shot.yaml"), Paths.make(mlvp_env / "results"))
    model = plan.models[CheckpointKey("clip4clip", PRETRAINED)]
    assert model.given_path == str(folder) and model.version.startswith("file:")
    assert {t.model_version for t in plan.trials} == {model.version}
    # the version follows the weights' content (and the config's), not the folder's name
    _hf_folder(folder, b"weights v2")
    again = build_plan(load_grid("grids/qgs_zero_shot.yaml"), Paths.make(mlvp_env / "results"))
    assert again.models[CheckpointKey("clip4clip", PRETRAINED)].version != model.version
    # the older layout (pytorch_model.bin) is a folder too
    bin_folder = _hf_folder(mlvp_env / "hf_bin", name="pytorch_model.bin")
    monkeypatch.setenv("MLVP_WEIGHTS", str(bin_folder))
    assert load_grid("grids/qgs_zero_shot.yaml").models.pretrained == str(bin_folder)


def test_a_folder_without_weights_is_a_one_line_grid_error(mlvp_env, monkeypatch):
    empty = mlvp_env / "not-weights"
    empty.mkdir()
    monkeypatch.setenv("MLVP_WEIGHTS", str(empty))
    with pytest.raises(GridError, match=r"^grids/qgs_zero_shot.yaml: models.pretrained: .*not-weights: "
                                        r"not a weights folder; expected config.json \+ model.safetensors") as err:
        load_grid("grids/qgs_zero_shot.yaml")
    assert "\n" not in str(err.value)
    no_config = mlvp_env / "no-config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"x")
    monkeypatch.setenv("MLVP_WEIGHTS", str(no_config))
    with pytest.raises(GridError, match="model.safetensors without config.json"):
        load_grid("grids/qgs_zero_shot.yaml")


def test_hf_clip_folder_as_a_checkpoint(mlvp_env, tmp_path):
    folder = _hf_folder(mlvp_env / "xpool-hf")
    grid = tmp_path / "g.yaml"
    grid.write_text(f"""
name: g
datasets:
  msrvtt: {{root: "{mlvp_env}/data/MSRVTT"}}
models:
  clip_model: ViT-B-32-quickgelu
  checkpoints: {{clip4clip: {{msrvtt: {folder}}}}}
backbones: [clip4clip]
methods: [source]
query_shift: {{datasets: [msrvtt], directions: [t2v], perturbations: [], clean: true}}
runtime: {{hub_k: 1}}
""")
    plan = build_plan(load_grid(grid), Paths.make(tmp_path / "results"))
    assert plan.models[CheckpointKey("clip4clip", "msrvtt")].given_path == str(folder)
    assert plan.model_path(CheckpointKey("clip4clip", "msrvtt")) == folder
