"""The loaders on the authors' real annotation files (tests/data/annotations, from bingqingzhang/vtr_tta data/):
the paper's test sizes, the files' query order, the MSVD protocols, and a missing-video report, without videos
(listing a split never touches a video file; a few stand-in mp4s show the report and paths resolve)."""
import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workloads.datasets import DatasetError, create_dataset, missing_video_report
from workloads.video_io import read_frames, write_mp4

ANNOTATIONS = Path(__file__).parent / "data" / "annotations"


def dataset(name, folder, tmp_path, **options):
    # videos under a fresh, empty folder: the loaders must list every split without them
    return create_dataset(name, root=ANNOTATIONS / folder, videos_dir=str(tmp_path / "videos"), **options)


def test_msrvtt_1ka_test_split(tmp_path):
    ds = dataset("msrvtt", "MSRVTT", tmp_path)
    split = ds.test_split()
    assert len(split) == 1000 and len(set(split.video_ids)) == 1000
    first, last = split.pairs[0], split.pairs[-1]
    assert (first.video_id, first.caption) == ("video9770", "a person is connecting something to system")
    assert (last.video_id, last.caption) == ("video9871", "bearded guy in grey tshirt talking to the camera")
    # the whole order and text as the authors read the file (pandas.read_csv)
    df = pd.read_csv(ANNOTATIONS / "MSRVTT/MSRVTT_JSFUSION_test.csv")
    assert split.video_ids == df["video_id"].tolist() and split.captions == df["sentence"].tolist()
    assert first.video_path == str(tmp_path / "videos" / "video9770.mp4")


def test_msrvtt_train_lists_with_a_stand_in_caption_file(tmp_path):
    # MSRVTT_data.json (train captions) is not in the authors' public snapshot: a stand-in with two captions per
    # train video exercises the real id lists (9k: 9,000 ids, 7k: 7,010)
    with pytest.raises(DatasetError, match="MSRVTT_data.json"):
        dataset("msrvtt", "MSRVTT", tmp_path).train_split()
    data = tmp_path / "MSRVTT_data.json"
    ids = [f"video{i}" for i in range(10000)]
    data.write_text(json.dumps({"sentences": [{"video_id": v, "caption": f"{v} caption {j}"}
                                              for j in range(2) for v in ids]}))
    for split_name, n in (("9k", 9000), ("7k", 7010)):
        train = dataset("msrvtt", "MSRVTT", tmp_path, data_json=str(data), train_split=split_name).train_split()
        listed = pd.read_csv(ANNOTATIONS / f"MSRVTT/MSRVTT_train.{split_name}.csv")["video_id"].tolist()
        assert len(listed) == n and len(train) == 2 * n
        assert train.video_ids[::2] == listed and train.captions[:2] == [f"{listed[0]} caption 0",
                                                                         f"{listed[0]} caption 1"]
        assert not set(listed) & set(dataset("msrvtt", "MSRVTT", tmp_path).test_split().video_ids)


def test_msvd_first_caption_protocol_and_all_captions(tmp_path):
    captions = json.loads((ANNOTATIONS / "MSVD/captions_msvd.json").read_text())
    test_ids = (ANNOTATIONS / "MSVD/test_list.txt").read_text().split()
    first = dataset("msvd", "MSVD", tmp_path).test_split()
    assert len(first) == 670 and first.video_ids == test_ids
    assert (first.pairs[0].video_id, first.pairs[0].caption) == ("eyhzdC936uk_15_27", "a boy playing with dog")
    assert (first.pairs[-1].video_id, first.pairs[-1].caption) == ("zzit5b_-ukg_5_20",
                                                                   "a boy is doing exercise by cycle")
    assert first.captions == [captions[v][0].strip() for v in test_ids]
    assert first.pairs[0].video_path.endswith("videos/eyhzdC936uk_15_27.avi")

    full = dataset("msvd", "MSVD", tmp_path, captions="all").test_split()
    assert len(full) == 27763 and len(set(full.video_ids)) == 670
    assert [(p.video_id, p.caption) for p in full.pairs] == [(v, c.strip()) for v in test_ids for c in captions[v]]
    assert full.pairs[36].caption == "a man and dog are playing pattycake with their handspaws"  # video 1's 37th
    assert full.pairs[-1].caption == "the boy is exercising" and full.video_ids.count("kWLNZzuo3do_48_53") == 81
    assert full.fingerprint != first.fingerprint
    # the train split is every caption whatever the test protocol
    train = dataset("msvd", "MSVD", tmp_path, captions="first").train_split()
    assert len(set(train.video_ids)) == 1200 and len(train) == sum(
        len(captions[v]) for v in (ANNOTATIONS / "MSVD/train_list.txt").read_text().split())
    with pytest.raises(DatasetError, match="option 'captions' must be one of first, all, got 'every'"):
        dataset("msvd", "MSVD", tmp_path, captions="every")


def test_activitynet_val1(tmp_path):
    ds = dataset("activitynet", "ActivityNet", tmp_path)
    split = ds.test_split()
    lines = [json.loads(line) for line in open(ANNOTATIONS / "ActivityNet/val1_anno.jsonl")]
    assert len(split) == 4917 == len(lines) and len(set(split.video_ids)) == 4917
    assert split.pairs[0].video_id == "v_uqiMw7tQ1Cc" and split.pairs[-1].video_id == "v_5nOc03oiFvk"
    assert split.pairs[0].caption.startswith("A weight lifting tutorial is given.")
    assert split.pairs[-1].caption.startswith("A camera pans around several shots of a mountain")
    # paragraphs as written (outer whitespace stripped; the tokenizer drops it anyway)
    assert split.video_ids == [o["clip_id"] for o in lines] and split.captions == [o["text"].strip() for o in lines]
    with pytest.raises(DatasetError, match="train_anno.jsonl"):
        ds.train_split()  # not in the public snapshot


def test_missing_video_report_lists_the_first_ten_at_once(tmp_path):
    ds = dataset("msrvtt", "MSRVTT", tmp_path)
    report = missing_video_report(ds)
    assert report.startswith("dataset 'msrvtt': 1000 of 1000 test videos missing: video9770 (")
    assert report.count(".mp4)") == 10 and report.endswith("... (990 more)")
    assert str(tmp_path / "videos" / "video9770.mp4") in report

    # stand-in videos for all but three test videos (tiny real H.264 files), written once and shared by hard links
    split = ds.test_split()
    (tmp_path / "videos").mkdir()
    frames = np.zeros((4, 16, 16, 3), np.uint8)
    frames[:, 4:12, 4:12] = (200, 30, 30)
    source = tmp_path / "stand_in.mp4"
    write_mp4(source, frames)
    for pair in split.pairs[3:]:
        Path(pair.video_path).hardlink_to(source)
    report = missing_video_report(ds)
    assert report == ("dataset 'msrvtt': 3 of 1000 test videos missing: " + ", ".join(
        f"{p.video_id} ({p.video_path})" for p in split.pairs[:3]))
    assert read_frames(split.pairs[3].video_path, 12).shape == (12, 16, 16, 3)
    for pair in split.pairs[:3]:
        Path(pair.video_path).hardlink_to(source)
    assert missing_video_report(ds) is None

    # a repeated video (MSVD, every caption) counts once
    msvd = dataset("msvd", "MSVD", tmp_path / "msvd", captions="all")
    assert missing_video_report(msvd).startswith("dataset 'msvd': 670 of 670 test videos missing: eyhzdC936uk_15_27 (")


def test_annotation_files_are_the_authors(tmp_path):
    # kept unchanged with their licence and a note of their source
    assert (ANNOTATIONS / "LICENSE").read_text().startswith("MIT License")
    assert "bingqingzhang/vtr_tta" in (ANNOTATIONS / "README.md").read_text()
    rows = list(csv.reader(open(ANNOTATIONS / "MSRVTT/MSRVTT_JSFUSION_test.csv")))
    assert rows[0] == ["key", "vid_key", "video_id", "sentence"] and len(rows) == 1001


def test_paper_numbers_fit_the_query_counts_of_these_splits(tmp_path):
    # every clean percentage the paper prints is (hits / queries) for the authors' test sizes, which the loaders
    # produce from these files; a mistyped number or a different protocol (e.g. MSVD's 27,763 captions) would not fit
    from workloads.paper import CLEAN, N_QUERIES, clean_r1, clean_results

    sizes = {"msrvtt": ("MSRVTT", {}), "activitynet": ("ActivityNet", {}), "msvd": ("MSVD", {"captions": "first"})}
    for name, (folder, options) in sizes.items():
        assert len(dataset(name, folder, tmp_path, **options).test_split()) == N_QUERIES[name]
    for row in CLEAN:
        n = N_QUERIES[row.dataset]
        for value in (row.r1, row.r5, row.r10):
            if value is not None:
                assert abs(round(value * n / 100) * 100 / n - value) <= 0.0051, (row, value)
    assert len(clean_results(setting="cross_dataset")) == 48 and len(clean_results(setting="zero_shot")) == 8
    assert clean_r1("activitynet", "v2t", "xpool", "cross_dataset", source="msrvtt") == 29.79
    assert clean_r1("msrvtt", "t2v", "clip", "zero_shot") == 30.10
    assert clean_r1("didemo", "v2t", "xpool", "cross_dataset", source="msrvtt") is None
    with pytest.raises(ValueError, match="several published R@1"):
        clean_r1("msrvtt", "t2v", "xpool", "in_domain")  # the 9k and the 7k checkpoints
