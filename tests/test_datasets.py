"""Loaders of the real datasets' annotation files (docs/faithfulness.md: Datasets), on tiny fixture files written
here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.datasets import DATASETS, DatasetError, create_dataset


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def triples(split):
    return [(p.video_id, p.caption, p.video_path) for p in split.pairs]


def test_registry_lists_every_dataset():
    assert {"msrvtt", "msvd", "lsmdc", "activitynet", "didemo", "synthetic", "synthetic_b"} <= set(DATASETS)
    with pytest.raises(ValueError, match="known datasets"):
        create_dataset("msrvt")


# -- MSRVTT --------------------------------------------------------------------------------------------------------

@pytest.fixture
def msrvtt_root(tmp_path):
    write(tmp_path / "MSRVTT_JSFUSION_test.csv",
          "key,vid_key,video_id,sentence\n"
          "ret0,msr9770,video9770,a person is connecting something to system\n"
          "ret1,msr7606,video7606,\"a little girl does gymnastics, then smiles\"\n"
          "ret2,msr9453,video9453,a man, a woman and a dog walk\n"
          "\n")
    write(tmp_path / "MSRVTT_train.9k.csv", "video_id\nvideo2\nvideo1\n")
    write(tmp_path / "MSRVTT_train.7k.csv", "video_id\nvideo1\n")
    write(tmp_path / "MSRVTT_data.json", json.dumps({"sentences": [
        {"caption": "one a", "video_id": "video1", "sen_id": 0},
        {"caption": "test caption", "video_id": "video9770", "sen_id": 1},
        {"caption": "two a", "video_id": "video2", "sen_id": 2},
        {"caption": "one b", "video_id": "video1", "sen_id": 3},
    ]}))
    return tmp_path


def test_msrvtt_test_split_keeps_file_order(msrvtt_root):
    ds = create_dataset("msrvtt", root=str(msrvtt_root))
    test = ds.test_split()
    assert test.dataset == "msrvtt" and test.name == "test"
    assert triples(test) == [
        ("video9770", "a person is connecting something to system", str(msrvtt_root / "videos/video9770.mp4")),
        ("video7606", "a little girl does gymnastics, then smiles", str(msrvtt_root / "videos/video7606.mp4")),
        ("video9453", "a man, a woman and a dog walk", str(msrvtt_root / "videos/video9453.mp4")),  # unquoted commas
    ]
    assert ds.test_split() is test  # parsed once
    assert test.fingerprint == create_dataset("msrvtt", root=str(msrvtt_root), videos_dir="/elsewhere") \
        .test_split().fingerprint  # paths are not part of the fingerprint


def test_msrvtt_train_split_and_options(msrvtt_root, tmp_path):
    ds = create_dataset("msrvtt", root=str(msrvtt_root))
    # train-list order, then each video's captions in file order (X-Pool); test captions are ignored
    assert [(p.video_id, p.caption) for p in ds.train_split().pairs] == \
           [("video2", "two a"), ("video1", "one a"), ("video1", "one b")]
    seven = create_dataset("msrvtt", root=str(msrvtt_root), train_split="7k")
    assert seven.train_split().video_ids == ["video1", "video1"]
    moved = create_dataset("msrvtt", root=str(msrvtt_root), videos_dir=str(tmp_path / "vids"), video_ext=".webm")
    assert moved.test_split().pairs[0].video_path == str(tmp_path / "vids" / "video9770.webm")
    rel = create_dataset("msrvtt", root=str(msrvtt_root), videos_dir="MSRVTT/all")
    assert rel.test_split().pairs[0].video_path == str(msrvtt_root / "MSRVTT/all/video9770.mp4")


def test_msrvtt_missing_and_malformed_files(msrvtt_root, tmp_path):
    with pytest.raises(DatasetError, match="needs root"):
        create_dataset("msrvtt").test_split()
    with pytest.raises(DatasetError, match="does not exist"):
        create_dataset("msrvtt", root=str(tmp_path / "nope")).test_split()
    with pytest.raises(DatasetError, match="unknown option"):
        create_dataset("msrvtt", root=str(msrvtt_root), video_dir="x")

    (msrvtt_root / "MSRVTT_data.json").unlink()
    ds = create_dataset("msrvtt", root=str(msrvtt_root))
    assert len(ds.test_split()) == 3  # the test split does not need MSRVTT_data.json
    with pytest.raises(DatasetError, match=r"MSRVTT_data\.json.*not found.*msrvtt_data\.zip"):
        ds.train_split()

    write(msrvtt_root / "MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id,sentence\nret0,msr1,video1,ok\nret1,msr2\n")
    with pytest.raises(DatasetError, match=r"MSRVTT_JSFUSION_test\.csv:3: expected 4 fields"):
        create_dataset("msrvtt", root=str(msrvtt_root)).test_split()
    write(msrvtt_root / "MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id,sentence\nret0,msr1,video1,  \n")
    with pytest.raises(DatasetError, match=r"MSRVTT_JSFUSION_test\.csv:2: empty sentence"):
        create_dataset("msrvtt", root=str(msrvtt_root)).test_split()
    write(msrvtt_root / "MSRVTT_JSFUSION_test.csv", "a,b\n1,2\n")
    with pytest.raises(DatasetError, match="header must name"):
        create_dataset("msrvtt", root=str(msrvtt_root)).test_split()
    (msrvtt_root / "MSRVTT_JSFUSION_test.csv").unlink()
    with pytest.raises(DatasetError, match=r"MSRVTT_JSFUSION_test\.csv.*not found"):
        create_dataset("msrvtt", root=str(msrvtt_root)).test_split()


def test_msrvtt_train_video_without_caption(msrvtt_root):
    write(msrvtt_root / "MSRVTT_train.9k.csv", "video_id\nvideo1\nvideo404\n")
    with pytest.raises(DatasetError, match="'video404'.*has no caption"):
        create_dataset("msrvtt", root=str(msrvtt_root)).train_split()


def test_missing_videos_is_offered_not_enforced(msrvtt_root):
    ds = create_dataset("msrvtt", root=str(msrvtt_root))
    write(msrvtt_root / "videos" / "video7606.mp4", "not really a video")
    assert ds.missing_videos("test") == ["video9770", "video9453"]
    assert ds.missing_videos(ds.train_split()) == ["video2", "video1"]  # each id once
    with pytest.raises(DatasetError, match="no split"):
        ds.missing_videos("val")


# -- MSVD ----------------------------------------------------------------------------------------------------------

@pytest.fixture
def msvd_root(tmp_path):
    write(tmp_path / "captions_msvd.json", json.dumps({
        "-4wsuPCjDBc_5_15": ["a squirrel eats", "a chipmunk is eating", "an animal eats"],
        "zv2RIbUsnSw_335_341": ["a man plays guitar", "someone plays"],
        "aaa_1_2": ["train one", "train two"],
        "bbb_3_4": ["train three"],
    }))
    write(tmp_path / "test_list.txt", "zv2RIbUsnSw_335_341\n-4wsuPCjDBc_5_15\n\n")
    write(tmp_path / "train_list.txt", "bbb_3_4\naaa_1_2\n")
    return tmp_path


def test_msvd_first_caption_only_for_test(msvd_root):
    ds = create_dataset("msvd", root=str(msvd_root))
    assert triples(ds.test_split()) == [
        ("zv2RIbUsnSw_335_341", "a man plays guitar", str(msvd_root / "videos/zv2RIbUsnSw_335_341.avi")),
        ("-4wsuPCjDBc_5_15", "a squirrel eats", str(msvd_root / "videos/-4wsuPCjDBc_5_15.avi")),
    ]
    assert [(p.video_id, p.caption) for p in ds.train_split().pairs] == \
           [("bbb_3_4", "train three"), ("aaa_1_2", "train one"), ("aaa_1_2", "train two")]


def test_msvd_errors(msvd_root):
    write(msvd_root / "test_list.txt", "zv2RIbUsnSw_335_341\nmissing_id\n")
    with pytest.raises(DatasetError, match=r"test_list\.txt:2: video 'missing_id' has no entry"):
        create_dataset("msvd", root=str(msvd_root)).test_split()
    write(msvd_root / "test_list.txt", "two ids\n")
    with pytest.raises(DatasetError, match=r"test_list\.txt:1: expected one id per line"):
        create_dataset("msvd", root=str(msvd_root)).test_split()
    write(msvd_root / "test_list.txt", "a\n")
    write(msvd_root / "captions_msvd.json", '{"a": []}')
    with pytest.raises(DatasetError, match=r"captions_msvd\.json: entry 'a' must be a non-empty list"):
        create_dataset("msvd", root=str(msvd_root)).test_split()
    write(msvd_root / "captions_msvd.json", '{"a": ["x"],\n "b": [}')
    with pytest.raises(DatasetError, match=r"captions_msvd\.json:2:\d+: invalid JSON"):
        create_dataset("msvd", root=str(msvd_root)).test_split()
    (msvd_root / "captions_msvd.json").unlink()
    with pytest.raises(DatasetError, match=r"captions_msvd\.json.*not found"):
        create_dataset("msvd", root=str(msvd_root)).test_split()


# -- LSMDC ---------------------------------------------------------------------------------------------------------

LSMDC_TEST = (
    "1010_TITANIC_00.41.32.072-00.41.40.196\t00.41.32.072\t00.41.40.196\t00.41.32.072\t00.41.40.196\tSomeone runs.\n"
    "1012_Unbreakable_00.05.16.065-00.05.21.941\t0\t0\t0\t0\tskipped clip\n"
    "0001_American_Beauty_00.00.51.926-00.00.54.129\t0\t0\t0\t0\tSomeone looks at SOMEONE.\n"
)


def test_lsmdc_order_skip_and_path_rule(tmp_path):
    write(tmp_path / "LSMDC16_challenge_1000_publictect.csv", LSMDC_TEST)
    write(tmp_path / "LSMDC16_annos_training.csv", LSMDC_TEST.splitlines()[0] + "\n")
    ds = create_dataset("lsmdc", root=str(tmp_path))
    assert triples(ds.test_split()) == [
        ("1010_TITANIC_00.41.32.072-00.41.40.196", "Someone runs.",
         str(tmp_path / "videos/1010_TITANIC/1010_TITANIC_00.41.32.072-00.41.40.196.avi")),
        ("0001_American_Beauty_00.00.51.926-00.00.54.129", "Someone looks at SOMEONE.",
         str(tmp_path / "videos/0001_American_Beauty/0001_American_Beauty_00.00.51.926-00.00.54.129.avi")),
    ]
    assert len(ds.train_split()) == 1
    kept = create_dataset("lsmdc", root=str(tmp_path), skip_clips=[])
    assert "1012_Unbreakable_00.05.16.065-00.05.21.941" in kept.test_split().video_ids


def test_lsmdc_bad_row(tmp_path):
    write(tmp_path / "LSMDC16_challenge_1000_publictect.csv", LSMDC_TEST + "clip\tonly\tfour\tfields\n")
    with pytest.raises(DatasetError, match=r"publictect\.csv:4: expected 6 tab-separated fields.*got 4"):
        create_dataset("lsmdc", root=str(tmp_path)).test_split()
    with pytest.raises(DatasetError, match=r"LSMDC16_annos_training\.csv.*not found.*MPII"):
        create_dataset("lsmdc", root=str(tmp_path)).train_split()


# -- ActivityNet ---------------------------------------------------------------------------------------------------

def test_activitynet_jsonl(tmp_path):
    write(tmp_path / "val1_anno.jsonl",
          '{"clip_id": "v_b", "text": "A man talks. He then leaves."}\n\n{"clip_id": "v_a", "text": "Dogs run."}\n')
    ds = create_dataset("activitynet", root=str(tmp_path))
    assert triples(ds.test_split()) == [
        ("v_b", "A man talks. He then leaves.", str(tmp_path / "videos/v_b.mp4")),
        ("v_a", "Dogs run.", str(tmp_path / "videos/v_a.mp4")),
    ]
    with pytest.raises(DatasetError, match=r"train_anno\.jsonl.*not found"):
        ds.train_split()
    write(tmp_path / "train_anno.jsonl", '{"clip_id": "v_c", "text": "x"}\n{"clip_id": "v_d", "txt": "y"}\n')
    with pytest.raises(DatasetError, match=r"train_anno\.jsonl:2: missing key\(s\) text"):
        ds.train_split()
    write(tmp_path / "val1_anno.jsonl", '{"clip_id": "v_b", "text": "ok"}\n{"clip_id": "v_a", "text": }\n')
    with pytest.raises(DatasetError, match=r"val1_anno\.jsonl:2: invalid JSON"):
        create_dataset("activitynet", root=str(tmp_path)).test_split()
    write(tmp_path / "val1_anno.jsonl", '{"clip_id": 7, "text": "ok"}\n')
    with pytest.raises(DatasetError, match=r"val1_anno\.jsonl:1: clip_id must be a string"):
        create_dataset("activitynet", root=str(tmp_path)).test_split()
    write(tmp_path / "val1_anno.jsonl", "\n")
    with pytest.raises(DatasetError, match="test split is empty"):
        create_dataset("activitynet", root=str(tmp_path)).test_split()


# -- DiDeMo --------------------------------------------------------------------------------------------------------

def test_didemo_jsonl_layout(tmp_path):
    write(tmp_path / "test_anno.jsonl", '{"clip_id": "123@N00_456_abc", "text": "the dog jumps. it lands."}\n')
    ds = create_dataset("didemo", root=str(tmp_path))
    assert ds.layout == "jsonl"
    assert triples(ds.test_split()) == [
        ("123@N00_456_abc", "the dog jumps. it lands.", str(tmp_path / "videos/123@N00_456_abc.mp4"))]


def test_didemo_clip4clip_layout_joins_descriptions(tmp_path):
    write(tmp_path / "test_list.txt", "b@N00_2.mov\na@N00_1.mp4\nnodesc@N00_3.avi\n")
    write(tmp_path / "test_data.json", json.dumps([
        {"video": "a@N00_1.mp4", "description": "a girl waves", "times": [[0, 0], [0, 1]]},
        {"video": "other@N00_9.mp4", "description": "not in the list", "times": [[1, 1]]},
        {"video": "b@N00_2.mov", "description": "a car turns", "times": [[2, 3]]},
        {"video": "a@N00_1.mp4", "description": " then she sits ", "times": [[3, 3]]},
        {"video": "a@N00_1.mp4", "description": "camera pans", "times": [[4, 5]]},
    ]))
    ds = create_dataset("didemo", root=str(tmp_path))
    assert ds.layout == "clip4clip"
    # CLIP4Clip order (first description in the JSON), one paragraph per video, ids keep their extension
    assert triples(ds.test_split()) == [
        ("a@N00_1.mp4", "a girl waves then she sits camera pans", str(tmp_path / "videos/a@N00_1.mp4")),
        ("b@N00_2.mov", "a car turns", str(tmp_path / "videos/b@N00_2.mov")),
    ]
    assert ds.skipped["test"] == ["nodesc@N00_3.avi"]
    forced = create_dataset("didemo", root=str(tmp_path), format="jsonl")
    with pytest.raises(DatasetError, match=r"test_anno\.jsonl.*not found"):
        forced.test_split()


def test_didemo_errors(tmp_path):
    with pytest.raises(DatasetError, match=r"neither .*test_anno\.jsonl nor .*test_list\.txt"):
        create_dataset("didemo", root=str(tmp_path)).test_split()
    with pytest.raises(DatasetError, match="option 'format' must be one of auto, jsonl, clip4clip"):
        create_dataset("didemo", root=str(tmp_path), format="csv")
    write(tmp_path / "test_list.txt", "a.mp4\n")
    write(tmp_path / "test_data.json", json.dumps([{"video": "a.mp4", "times": []}]))
    with pytest.raises(DatasetError, match=r"test_data\.json: item \[0\]: each item needs"):
        create_dataset("didemo", root=str(tmp_path)).test_split()


def test_describe_is_json(msrvtt_root):
    info = create_dataset("msrvtt", root=str(msrvtt_root), train_split="7k").describe()
    assert json.loads(json.dumps(info)) == {"name": "msrvtt", "root": str(msrvtt_root), "train_split": "7k"}
