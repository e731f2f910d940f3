import numpy as np
import pytest

from workloads.render_cache import CacheCorrupt, CacheMiss, RenderCache, RenderKey, render_video
from workloads.video_io import write_mp4


def key(pert="gaussian_noise", sev=3, vid="v0", **kw):
    return RenderKey("ds", "dv1", vid, pert, sev, 0, 12, 32, **kw)


@pytest.fixture
def video(tmp_path):
    frames = np.zeros((20, 48, 64, 3), np.uint8)
    for i in range(20):
        frames[i, 10:30, 2 * i:2 * i + 16] = (200, 60, 60)
    path = tmp_path / "v0.mp4"
    write_mp4(path, frames)
    return str(path)


def test_write_read_probe_and_checksum(tmp_path):
    cache = RenderCache(tmp_path)
    frames = np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)
    k = key()
    with pytest.raises(CacheMiss):
        cache.read(k)
    cache.write(k, frames, {"faithful": True})
    got, meta = cache.read(k)
    np.testing.assert_array_equal(got, frames)
    assert meta["faithful"] and meta["key"]["video_id"] == "v0" and cache.probe(k)["shape"] == [12, 32, 32, 3]
    # keys differ by every field, including the assets version
    assert len({key().digest, key(sev=4).digest, key(vid="v1").digest, key(assets="boxes:1").digest}) == 4
    # truncation is caught by the cheap probe; a flipped byte in the frames by the checksum
    path = cache.path(k)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CacheCorrupt):
        cache.probe(k)
    cache.write(k, frames, {"faithful": True})
    data = bytearray(path.read_bytes())
    data[300] ^= 0xFF  # inside the frames array
    path.write_bytes(bytes(data))
    with pytest.raises(CacheCorrupt):
        cache.read(k)


def test_render_video_shares_one_decode_and_isolates_failures(tmp_path, video):
    cache = RenderCache(tmp_path / "cache")
    keys = [key("clean", 0), key("gaussian_noise", 1), key("gaussian_noise", 5), key("style_transfer", 2),
            key("motion_blur", 2)]
    # style transfer asked for AdaIN weights that do not exist: that clip fails, its siblings render
    out = render_video(video, keys, cache, {"adain_vgg": str(tmp_path / "missing_vgg.pth"),
                                            "adain_decoder": str(tmp_path / "missing_dec.pth")})
    assert [o["status"] for o in out] == ["ok", "ok", "ok", "failed", "ok"]
    assert "missing_vgg.pth" in out[3]["error"]
    fail = cache.failure(keys[3])
    assert fail["video_path"] == video and "missing_vgg.pth" in fail["error"]
    clean, _ = cache.read(keys[0])
    noisy, meta = cache.read(keys[2])
    assert clean.shape == noisy.shape == (12, 32, 32, 3)
    assert meta["faithful"] is True
    assert np.abs(noisy.astype(int) - clean).mean() > np.abs(cache.read(keys[1])[0].astype(int) - clean).mean()
    # a later success replaces the failure record
    render_video(video, [keys[3]], cache, {})
    assert cache.failure(keys[3]) is None and cache.is_valid(keys[3])


def test_corrupt_video_fails_every_key_with_its_path(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video" * 100)
    cache = RenderCache(tmp_path / "cache")
    keys = [key("clean", 0), key("fog", 2)]
    out = render_video(str(bad), keys, cache)
    assert [o["status"] for o in out] == ["failed", "failed"]
    assert all("cannot decode" in o["error"] for o in out)
    assert cache.failure(keys[1])["video_path"] == str(bad)


def test_render_is_deterministic(tmp_path, video):
    a, b = RenderCache(tmp_path / "a"), RenderCache(tmp_path / "b")
    keys = [key(p, 3) for p in ("gaussian_noise", "impulse_noise", "snow", "h264_compression", "temporal_scrambling")]
    render_video(video, keys, a)
    render_video(video, keys, b)
    for k in keys:
        np.testing.assert_array_equal(a.read(k)[0], b.read(k)[0])
