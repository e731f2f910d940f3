"""DiDeMo (test split, video-paragraph retrieval). Not in the authors' code (bingqingzhang/vtr_tta); two layouts:

1. "jsonl" (recommended, like ActivityNet): `test_anno.jsonl` / `train_anno.jsonl` with one {"clip_id", "text"} per
   line; videos `{root}/{videos_dir}/{clip_id}.mp4`.
2. "clip4clip" (CLIP4Clip / collaborative-experts files): `test_list.txt` (+ `train_list.txt`) and
   `test_data.json` (+ `train_data.json`), a JSON list of {"video", "description", "times"}. As CLIP4Clip does,
   all descriptions of a video are joined by single spaces into one paragraph (in file order) and the whole video
   is used (`times` ignored); videos are ordered by their first description in the JSON, keeping only ids in the
   list (listed ids without any description are skipped and reported in `skipped[split]`). Ids carry their file
   extension, so the video path is `{root}/{videos_dir}/{video_id}` (unless option `video_ext` is given).

Option `format` = "auto" (default: jsonl when test_anno.jsonl exists, else clip4clip), "jsonl" or "clip4clip".
"""
from __future__ import annotations

from workloads.datasets.activitynet import JsonlAnnoDataset
from workloads.datasets.base import (
    AnnotatedDataset,
    DatasetError,
    VideoTextPair,
    read_id_list,
    read_json,
    register_dataset,
    text_field,
)

FORMATS = ("auto", "jsonl", "clip4clip")


@register_dataset("didemo", order=4)
class DiDeMoDataset(JsonlAnnoDataset):
    video_ext = ".mp4"
    option_choices = {"format": FORMATS}
    option_defaults = {
        **AnnotatedDataset.option_defaults,
        "format": "auto",
        "test_file": "test_anno.jsonl",
        "train_file": "train_anno.jsonl",
        "test_list": "test_list.txt",
        "train_list": "train_list.txt",
        "test_json": "test_data.json",
        "train_json": "train_data.json",
    }
    provide = ("put test_anno.jsonl ({\"clip_id\", \"text\"} per line, like ActivityNet) or CLIP4Clip's "
               "test_list.txt + test_data.json in the dataset root, and the videos in <root>/videos/")

    def __init__(self, root=None, **options):
        super().__init__(root=root, **options)
        self.skipped: dict[str, list[str]] = {}

    @property
    def layout(self) -> str:
        """The annotation layout in use: "jsonl" or "clip4clip"."""
        fmt = self.option("format")
        if fmt != "auto":
            return fmt
        if self.path(self.option("test_file")).is_file():
            return "jsonl"
        if self.path(self.option("test_list")).is_file() and self.path(self.option("test_json")).is_file():
            return "clip4clip"
        raise DatasetError(f"dataset 'didemo': found neither {self.path(self.option('test_file'))} nor "
                           f"{self.path(self.option('test_list'))} + {self.path(self.option('test_json'))}; "
                           f"{self.provide}")

    def video_path(self, video_id: str) -> str:
        if self.layout == "clip4clip" and self.option("video_ext") is None:
            return str(self.videos_dir / video_id)
        return super().video_path(video_id)

    def _load_clip4clip(self, split: str) -> list[VideoTextPair]:
        list_path = self.annotation_file(f"{split}_list", f"the {split} video ids (with extension)")
        json_path = self.annotation_file(f"{split}_json", 'a JSON list of {"video", "description", "times"}')
        listed_order = [vid for _, vid in read_id_list(list_path)]
        listed = set(listed_order)
        data = read_json(json_path)
        if not isinstance(data, list):
            raise DatasetError(f"{json_path}: expected a JSON list of {{video, description, times}} objects")
        paragraphs: dict[str, list[str]] = {}
        for i, item in enumerate(data):
            where = f"{json_path}: item [{i}]"
            if not isinstance(item, dict) or "video" not in item or "description" not in item:
                raise DatasetError(f"{where}: each item needs 'video' and 'description'")
            vid = text_field(item["video"], where, "video")
            if vid in listed:
                paragraphs.setdefault(vid, []).append(text_field(item["description"], where, "description"))
        self.skipped[split] = [vid for vid in listed_order if vid not in paragraphs]
        return [self.pair(vid, " ".join(texts)) for vid, texts in paragraphs.items()]

    def _load_test(self) -> list[VideoTextPair]:
        return self._read_anno("test_file") if self.layout == "jsonl" else self._load_clip4clip("test")

    def _load_train(self) -> list[VideoTextPair]:
        if self.layout == "jsonl":
            return self._read_anno("train_file")
        return self._load_clip4clip("train")
