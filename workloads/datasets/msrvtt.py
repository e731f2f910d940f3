"""MSRVTT (1k-A test split, "JSFUSION"), as the authors' code reads it (bingqingzhang/vtr_tta, its dataset loaders).

Files under root (names are options, defaults are the real ones):
- `MSRVTT_JSFUSION_test.csv` (option `test_csv`): header `key,vid_key,video_id,sentence`, one caption per video,
  1,000 rows; query order = file order.
- `MSRVTT_train.9k.csv` / `MSRVTT_train.7k.csv` (option `train_csv`, or `train_split="9k"|"7k"`): header `video_id`,
  one id per row.
- `MSRVTT_data.json` (option `data_json`): {"sentences": [{"caption", "video_id", ...}, ...]}; read for the train
  split only. Train pairs follow X-Pool: train-list order, then each video's captions in file order.
- videos `{root}/{videos_dir}/{video_id}.mp4` (options `videos_dir`, default "videos", and `video_ext`).

The annotation files come from CLIP4Clip's msrvtt_data.zip; the videos from the MSRVTT release.
"""
from __future__ import annotations

import csv
import io

from workloads.datasets.base import (
    AnnotatedDataset,
    DatasetError,
    VideoTextPair,
    read_json,
    read_text,
    register_dataset,
    text_field,
)

TRAIN_CSV = {"9k": "MSRVTT_train.9k.csv", "7k": "MSRVTT_train.7k.csv"}


def _read_csv(path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank row; csv quoting honoured."""
    text = read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:
        for fields in reader:
            if fields and any(f.strip() for f in fields):
                rows.append((reader.line_num, fields))
    except csv.Error as err:
        raise DatasetError(f"{path}:{reader.line_num}: malformed CSV ({err})") from err
    return rows


@register_dataset("msrvtt", order=0)
class MSRVTTDataset(AnnotatedDataset):
    video_ext = ".mp4"
    option_choices = {"train_split": tuple(TRAIN_CSV)}
    option_defaults = {
        **AnnotatedDataset.option_defaults,
        "test_csv": "MSRVTT_JSFUSION_test.csv",
        "train_split": "9k",
        "train_csv": None,  # default: TRAIN_CSV[train_split]
        "data_json": "MSRVTT_data.json",
    }
    provide = ("put MSRVTT_JSFUSION_test.csv, MSRVTT_train.9k.csv and MSRVTT_data.json (CLIP4Clip's "
               "msrvtt_data.zip) in the dataset root and the videos in <root>/videos/<video_id>.mp4")

    def _load_test(self) -> list[VideoTextPair]:
        path = self.annotation_file("test_csv", "the 1k-A test captions")
        rows = _read_csv(path)
        if not rows:
            raise DatasetError(f"{path}: empty file; expected a header key,vid_key,video_id,sentence and rows")
        header_line, header = rows[0]
        header = [h.strip().lower() for h in header]
        if "video_id" not in header or "sentence" not in header:
            raise DatasetError(f"{path}:{header_line}: header must name the columns video_id and sentence "
                               f"(key,vid_key,video_id,sentence), got {','.join(header)}")
        i_vid, i_sent = header.index("video_id"), header.index("sentence")
        pairs = []
        for lineno, fields in rows[1:]:
            where = f"{path}:{lineno}"
            if len(fields) < len(header):
                raise DatasetError(f"{where}: expected {len(header)} fields ({','.join(header)}), got {len(fields)}")
            if len(fields) > len(header):
                if i_sent != len(header) - 1:
                    raise DatasetError(f"{where}: expected {len(header)} fields, got {len(fields)}")
                # an unquoted comma inside the sentence (the last column): keep it as part of the caption
                fields = fields[:i_sent] + [",".join(fields[i_sent:])]
            video_id = text_field(fields[i_vid], where, "video_id")
            pairs.append(self.pair(video_id, text_field(fields[i_sent], where, "sentence")))
        return pairs

    def _train_csv_name(self) -> str:
        if self.option("train_csv"):
            return self.option("train_csv")
        split = self.option("train_split")
        if split not in TRAIN_CSV:
            raise DatasetError(f"dataset {self.name!r}: train_split must be one of {sorted(TRAIN_CSV)}, got {split!r}")
        return TRAIN_CSV[split]

    def _load_train(self) -> list[VideoTextPair]:
        list_path = self.annotation_file("train_csv", "the train video list", name=self._train_csv_name())
        rows = _read_csv(list_path)
        start = 1 if rows and [f.strip().lower() for f in rows[0][1]] == ["video_id"] else 0
        train_ids: list[str] = []
        for lineno, fields in rows[start:]:
            if len(fields) != 1:
                raise DatasetError(f"{list_path}:{lineno}: expected one column (video_id), got {len(fields)}")
            train_ids.append(text_field(fields[0], f"{list_path}:{lineno}", "video_id"))

        json_path = self.annotation_file("data_json", "the train captions")
        data = read_json(json_path)
        if not isinstance(data, dict) or not isinstance(data.get("sentences"), list):
            raise DatasetError(f"{json_path}: expected an object with a list under 'sentences'")
        wanted = set(train_ids)
        captions: dict[str, list[str]] = {}
        for i, item in enumerate(data["sentences"]):
            where = f"{json_path}: sentences[{i}]"
            if not isinstance(item, dict) or "video_id" not in item or "caption" not in item:
                raise DatasetError(f"{where}: each sentence needs 'video_id' and 'caption'")
            vid = text_field(item["video_id"], where, "video_id")
            if vid in wanted:
                captions.setdefault(vid, []).append(text_field(item["caption"], where, "caption"))
        pairs = []
        for vid in train_ids:
            if vid not in captions:
                raise DatasetError(f"{json_path}: train video {vid!r} (listed in {list_path}) has no caption")
            pairs.extend(self.pair(vid, c) for c in captions[vid])
        return pairs
