"""ActivityNet Captions (val1 as the test split; video-paragraph retrieval) as the authors read it
(docs/faithfulness.md: Datasets).

Files under root (names are options): `val1_anno.jsonl` (test, 4,917 lines, option `test_file`) and
`train_anno.jsonl` (train, 10,009 lines, option `train_file`); one JSON object per line {"clip_id": "v_xxx",
"text": paragraph}, the paragraph being all of the video's sentences joined. Videos
`{root}/{videos_dir}/{clip_id}.mp4`. Query order = file order.
"""
from __future__ import annotations

from workloads.datasets.base import (
    AnnotatedDataset,
    VideoTextPair,
    read_jsonl,
    register_dataset,
    text_field,
)


class JsonlAnnoDataset(AnnotatedDataset):
    """Shared reader of `{"clip_id", "text"}` jsonl annotation files."""

    def _read_anno(self, key: str) -> list[VideoTextPair]:
        path = self.annotation_file(key, 'one {"clip_id", "text"} JSON object per line')
        pairs = []
        for lineno, obj in read_jsonl(path, required=("clip_id", "text")):
            where = f"{path}:{lineno}"
            clip_id = text_field(obj["clip_id"], where, "clip_id")
            pairs.append(self.pair(clip_id, text_field(obj["text"], where, "text")))
        return pairs


@register_dataset("activitynet", order=1)
class ActivityNetDataset(JsonlAnnoDataset):
    video_ext = ".mp4"
    option_defaults = {
        **AnnotatedDataset.option_defaults,
        "test_file": "val1_anno.jsonl",
        "train_file": "train_anno.jsonl",
    }
    provide = ("put val1_anno.jsonl and train_anno.jsonl ({\"clip_id\", \"text\"} per line) in the dataset root "
               "and the videos in <root>/videos/<clip_id>.mp4")

    def _load_test(self) -> list[VideoTextPair]:
        return self._read_anno("test_file")

    def _load_train(self) -> list[VideoTextPair]:
        return self._read_anno("train_file")
