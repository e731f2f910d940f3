"""MSVD as the authors' code reads it (bingqingzhang/vtr_tta, its dataset loaders).

Files under root (names are options):
- `captions_msvd.json` (option `captions_json`): {video_id: [caption, ...]} for all 1,970 videos;
- `test_list.txt` (670 ids) and `train_list.txt` (1,200 ids), one id per line (options `test_list`, `train_list`);
- videos `{root}/{videos_dir}/{video_id}.avi` (options `videos_dir`, default "videos", and `video_ext`).

Option `captions` picks the test protocol:
- "first" (default): only the first caption of each test video (670 pairs), as the HAT-VTR authors' TTA runs do
  (bingqingzhang/vtr_tta, datasets/msvd_dataset.py: one text query per video);
- "all": every caption of every test video (27,763 pairs, ~41 per video), the standard MSVD protocol that X-Pool's
  own evaluation and its published R@1 use: one pair per (video, caption) in file order, test-list order first, so a
  video repeats once per caption (a video-to-text query is then answered by the best-ranked of its captions).
Train split: every caption of every train video, list order then caption order (X-Pool), whatever `captions` says.
"""
from __future__ import annotations

from workloads.datasets.base import (
    AnnotatedDataset,
    DatasetError,
    VideoTextPair,
    read_id_list,
    read_json,
    register_dataset,
    text_field,
)


@register_dataset("msvd", order=3)
class MSVDDataset(AnnotatedDataset):
    video_ext = ".avi"
    option_choices = {"captions": ("first", "all")}
    option_defaults = {
        **AnnotatedDataset.option_defaults,
        "captions_json": "captions_msvd.json",
        "test_list": "test_list.txt",
        "train_list": "train_list.txt",
        "captions": "first",
    }
    provide = ("put captions_msvd.json, test_list.txt and train_list.txt (X-Pool's MSVD data) in the dataset root "
               "and the videos in <root>/videos/<video_id>.avi")

    def _captions(self) -> tuple[object, dict[str, list[str]]]:
        path = self.annotation_file("captions_json", "video id -> list of captions")
        data = read_json(path)
        if not isinstance(data, dict):
            raise DatasetError(f"{path}: expected a JSON object mapping video id -> list of captions")
        return path, data

    def _load(self, list_key: str, first_only: bool) -> list[VideoTextPair]:
        list_path = self.annotation_file(list_key, f"the {list_key.split('_')[0]} video ids")
        ids = read_id_list(list_path)
        cap_path, captions = self._captions()
        pairs = []
        for lineno, vid in ids:
            if vid not in captions:
                raise DatasetError(f"{list_path}:{lineno}: video {vid!r} has no entry in {cap_path}")
            caps = captions[vid]
            if not isinstance(caps, list) or not caps:
                raise DatasetError(f"{cap_path}: entry {vid!r} must be a non-empty list of captions")
            for j, cap in enumerate(caps[:1] if first_only else caps):
                pairs.append(self.pair(vid, text_field(cap, f"{cap_path}: {vid}[{j}]", "caption")))
        return pairs

    def _load_test(self) -> list[VideoTextPair]:
        return self._load("test_list", first_only=self.option("captions") == "first")

    def _load_train(self) -> list[VideoTextPair]:
        return self._load("train_list", first_only=False)
