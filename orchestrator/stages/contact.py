"""`render --contact-sheet OUT.png`: every perturbation type x severity of one synthetic clip on one page."""
from __future__ import annotations

from pathlib import Path

from workloads.datasets.synthetic import SyntheticConfig, render_clip, sample_clips


def write_contact_sheet(out: str | Path, seed: int = 0, size: int = 128, num_frames: int = 48) -> Path:
    """Draw the contact sheet of a synthetic clip (rendered in memory at `size` px, `num_frames` frames at 8 fps;
    larger than the training clips so the perturbations are visible) and save it as a PNG."""
    # OpenCV: only when a contact sheet is drawn
    from workloads.perturbations.video.contact_sheet import contact_sheet, save_png

    config = SyntheticConfig(n_train=40, n_test=4, size=size, num_frames=num_frames, seed=seed)
    clip = sample_clips(config)[0]
    image = contact_sheet(render_clip(clip, config), seed=seed, num_frames=12, fps=float(config.fps))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(out, image)
    return out
