"""docs/grid_reference.md is generated from the grid schema (orchestrator/config/reference.py): it lists every key
load_grid accepts, and this test fails when the file is stale."""
from pathlib import Path

from orchestrator.config.reference import field_comments, grid_reference
from orchestrator.config.schema import RuntimeSpec

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_is_current():
    assert (ROOT / "docs" / "grid_reference.md").read_text() == grid_reference(), \
        "docs/grid_reference.md is stale: python -m orchestrator.config.reference > docs/grid_reference.md"


def test_every_runtime_key_is_in_the_reference_with_its_range_and_comment():
    text = grid_reference()
    for key in RuntimeSpec.__dataclass_fields__:
        assert f"| `{key}` |" in text, key
    assert "| `gpus_per_trial` | float | `0.0` | >= 0; <= 1 |" in text
    assert field_comments(RuntimeSpec)["hub_k"].startswith("at most the gallery size")
