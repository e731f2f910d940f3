"""Every clip of a synthetic dataset config: `sample_clips` describes them (JSON-able dicts, test first then train,
in file order) and `render_clip` draws one; each by the config's generator version (1: scenes.py and drawing.py,
2: v2.py, 3: text.py)."""
from __future__ import annotations

import numpy as np

from workloads.datasets.synthetic import text, v2
from workloads.datasets.synthetic.config import SyntheticConfig
from workloads.datasets.synthetic.drawing import render_clip_v1
from workloads.datasets.synthetic.scenes import sample_clips_v1


def sample_clips(config: SyntheticConfig) -> list[dict]:
    """The full description of every clip: video_id, split, background, objects, noise_seed and captions."""
    if config.version == 3:
        return text.sample_clips(config)
    return v2.sample_clips(config) if config.version == 2 else sample_clips_v1(config)


def render_clip(clip: dict, config: SyntheticConfig) -> np.ndarray:
    """The frames of one clip of `sample_clips`, uint8 [num_frames, size, size, 3] RGB (version 2: at its split's size
    and rate)."""
    if config.version == 3:
        return text.render_clip(clip, config)
    return v2.render_clip(clip, config) if config.version == 2 else render_clip_v1(clip, config)
