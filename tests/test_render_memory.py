"""Rendering a long HD clip holds a few frames, not the clip (issue #33 item 1): every type renders a 60 s 1280x720
30 fps H.264 video (1,800 frames: 5 GB as RGB) in a process of its own whose peak RSS stays under 2 GB and under
what the memory model (workloads/render_memory.py `render_bytes`) declares for it. The 3-minute figure and the time
per type are benchmarks/long_video_memory.py's."""
from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from workloads.perturbations.video import NAMES
from workloads.render_memory import measure, render_bytes, worker_bytes

pytestmark = pytest.mark.integration

LIMIT = 2 << 30
SECONDS, WIDTH, HEIGHT, FPS = 60, 1280, 720, 30


def write_clip(path, n: int, w: int, h: int, fps: int, seed: int = 0) -> None:
    """An H.264 mp4 (PyAV's libx264, ultrafast) of a still colour texture with a disc moving over it, the frames
    made in yuv420p so that nothing converts them: cheap to write and to re-encode. A render's memory does not
    depend on the content; its time does, and H.264's re-encode of the 1,800 frames is the test's largest cost."""
    import av

    rng = np.random.default_rng(seed)
    planes = [cv2.resize(rng.integers(16, 236, (h // 8, w // 8), dtype=np.uint8), (pw, ph),
                         interpolation=cv2.INTER_CUBIC) for pw, ph in ((w, h), (w // 2, h // 2), (w // 2, h // 2))]
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.thread_count = 1
        stream.options = {"preset": "ultrafast", "crf": "23", "threads": "1", "x264-params": "keyint=150"}
        for i in range(n):
            x, y = 0.5 + 0.4 * math.sin(i / 25), 0.5 + 0.3 * math.cos(i / 33)
            frame = [p.copy() for p in planes]
            for plane, value in zip(frame, (81, 90, 240)):  # a red disc (BT.601 limited)
                ph, pw = plane.shape
                cv2.circle(plane, (int(pw * x), int(ph * y)), ph // 8, value, -1)
            yuv = np.concatenate([frame[0].ravel(), frame[1].ravel(), frame[2].ravel()]).reshape(h * 3 // 2, w)
            for packet in stream.encode(av.VideoFrame.from_ndarray(yuv, format="yuv420p")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


@pytest.fixture(scope="session")
def long_hd_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("long_hd") / "60s_1280x720.mp4"
    write_clip(path, SECONDS * FPS, WIDTH, HEIGHT, FPS)
    return path


def test_every_type_renders_a_60s_720p_clip_under_2gb(long_hd_clip):
    # each type as a render row is (one video x one type x its severities), in a fresh process: the other types at
    # severities 1 and 5, H.264 at severity 5 alone (its encode of the 1,800 frames is most of the test's time; its
    # side-by-side passes are the 3-minute benchmark's). All types in ONE render_video call (not a row's shape: it
    # shares one decode and every type's memo) peaked at 2.33 GB in CI (2026-11-27).
    types = ["clean", *NAMES]
    frames = SECONDS * FPS
    results = {}
    for name in types:
        severities = (5,) if name == "h264_compression" else (1, 5)
        r = measure(long_hd_clip, [name], severities)
        assert set(r["status"]) == {name} and all(set(s) == {"ok"} for s in r["status"].values()), r["errors"]
        assert r["peak_bytes"] <= LIMIT, (name, r)
        assert r["peak_bytes"] <= render_bytes(WIDTH, HEIGHT, frames, name), (name, r)
        results[name] = r
    # the clip as RGB would be 5 GB: a render held a small part of it
    assert max(r["peak_bytes"] - r["base_bytes"] for r in results.values()) < frames * WIDTH * HEIGHT * 3 / 4


def test_a_measured_peak_is_the_childs_own_not_the_parents(tmp_path):
    # Linux carries a parent's high-water RSS across fork and exec into the child's getrusage ru_maxrss: from a
    # pytest worker that had grown to 2.3 GB, a 1-second clean render "peaked" at 2.36 GB (CI, 2026-11-27).
    clip = tmp_path / "small.mp4"
    write_clip(clip, 30, 160, 96, FPS)
    ballast = np.ones(LIMIT // 8)  # this process now holds 2 GB more than the child can need
    r = measure(clip, ["clean"], (1,))
    assert ballast.sum() == LIMIT // 8
    assert r["status"] == {"clean": ["ok"]}
    assert r["base_bytes"] < r["peak_bytes"] < LIMIT // 2, r


def test_a_ray_data_render_worker_peaks_under_what_its_task_reserves(tmp_path):
    # Where the figure is used: the render stage's task function (orchestrator/stages/render.py `render_rows`) in one
    # Ray Data worker that renders every type in turn, a row each (a video x a type x its severities) as
    # RenderStream runs them, under the `memory=` that `render_task_memory` gives for this clip (`worker_bytes`;
    # tests/test_cost_model.py checks the two agree). Such a worker holds
    # ~125 MiB more than a fresh process after the same imports, and its RSS stays at an earlier type's peak:
    # reserving the fresh process's figure (render_bytes), workers peaked at 1.10-1.18x of it
    # (workloads/render_memory.py, "Where it is declared").
    import json

    import ray

    from orchestrator.run.ray_env import start_ray
    from orchestrator.stages.render import render_rows

    w, h, seconds = 320, 240, 3   # MSRVTT's size; a row's working set does not grow with the length
    clip = tmp_path / "small.mp4"
    write_clip(clip, seconds * FPS, w, h, FPS)
    declared = worker_bytes(w, h, seconds * FPS)
    types = ["clean", *NAMES]
    rows = [{"dataset": "small", "data_version": "v", "video_id": name, "video_path": str(clip),
             "requests": json.dumps([[name, s, "", 0] for s in (1, 2, 3, 4, 5)]), "extra_assets": "{}"}
            for name in types]

    def measured_rows(batch, **kwargs):   # a nested function: Ray ships it by value (this module is not importable)
        import os

        from workloads.render_memory import status_bytes

        out = render_rows(batch, **kwargs)
        n = len(out["status"])
        reserved = ray.get_runtime_context().get_assigned_resources().get("memory", 0)
        return {**out, "pid": [os.getpid()] * n, "hwm": [status_bytes("VmHWM")] * n, "reserved": [reserved] * n}

    start_ray(None, 1, dashboard=False)
    try:
        ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            measured_rows, batch_size=1, compute=ray.data.TaskPoolStrategy(size=1), num_cpus=1, memory=declared,
            fn_kwargs={"cache_root": str(tmp_path / "cache"), "seed": 0, "num_frames": 12, "resolution": 224})
        out = list(ds.iter_rows())
    finally:
        ray.shutdown()
    assert len(out) == 5 * len(types) and {r["status"] for r in out} == {"ok"}, [r["error"] for r in out][:3]
    assert all(r["reserved"] == pytest.approx(declared, rel=1e-6) for r in out)   # what Ray granted each task
    peaks: dict[int, int] = {}
    for r in out:
        peaks[r["pid"]] = max(peaks.get(r["pid"], 0), r["hwm"])
    assert max(peaks.values()) <= declared, {pid: (peak / 2**20, declared / 2**20) for pid, peak in peaks.items()}
