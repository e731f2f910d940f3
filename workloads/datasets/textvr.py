"""TextVR (Wu et al., Pattern Recognition 2025; callsys/TextVR), the scene-text video retrieval benchmark of TCD's
Table 1, in its published layout (docs/faithfulness.md: Datasets):

    {root}/TextVR_train.json           train (option `train_file`)
    {root}/TextVR_test.json            test, 2,727 videos (option `test_file`: the unscrambled file the authors
                                       released; TextVR_test_rand.json has its captions shuffled for the challenge
                                       server, so it cannot be evaluated offline and is refused)
    {root}/Videos/<domain>/<name>.mp4  the videos (option `videos_dir`)

Each file is a JSON list of {"path": "<domain>/<name>.mp4", "captions_info": [{"caption": ...}, ...],
"videos_info": {...}}. The video id is the path without its extension. Test: one query per video, its first caption
(the authors' loader); train: every caption. The dataset's own OCR (`Kwai_VideoOCR`, read by a commercial API) is
not read: OCR backbones read the frames themselves (workloads/ocr.py).
"""
from __future__ import annotations

from workloads.datasets.base import (AnnotatedDataset, DatasetError, VideoTextPair, read_json, register_dataset,
                                     text_field)


@register_dataset("textvr", order=5)
class TextVRDataset(AnnotatedDataset):
    video_ext = ""
    option_defaults = {**AnnotatedDataset.option_defaults, "videos_dir": "Videos", "test_file": "TextVR_test.json",
                       "train_file": "TextVR_train.json"}
    provide = ("put TextVR_test.json and TextVR_train.json (callsys/TextVR's annotation files) in the dataset root "
               "and the videos in <root>/Videos/<domain>/<name>.mp4")

    def __init__(self, root=None, **options):
        super().__init__(root=root, **options)
        self._paths: dict[str, str] = {}   # video id -> its path under videos_dir, as the files give it

    def video_path(self, video_id: str) -> str:
        return str(self.videos_dir / self._paths[video_id])

    def _read(self, key: str, all_captions: bool) -> list[VideoTextPair]:
        path = self.annotation_file(key, 'a JSON list of {"path", "captions_info": [{"caption"}]}')
        if path.name.endswith("_rand.json"):
            raise DatasetError(f"dataset 'textvr': {path} holds the challenge's shuffled captions; use the "
                               "unscrambled TextVR_test.json the authors released")
        items = read_json(path)
        if not isinstance(items, list):
            raise DatasetError(f"{path}: expected a JSON list of videos")
        pairs = []
        for i, item in enumerate(items):
            where = f"{path}: item [{i}]"
            if not isinstance(item, dict) or "path" not in item or not isinstance(item.get("captions_info"), list):
                raise DatasetError(f"{where}: each item needs 'path' and a 'captions_info' list")
            rel = text_field(item["path"], where, "path")
            vid = rel.rsplit(".", 1)[0] if "." in rel.rsplit("/", 1)[-1] else rel
            self._paths[vid] = rel
            infos = item["captions_info"] if all_captions else item["captions_info"][:1]
            if not infos:
                raise DatasetError(f"{where}: no caption")
            for info in infos:
                if not isinstance(info, dict):
                    raise DatasetError(f"{where}: captions_info entries are objects with a 'caption'")
                pairs.append(self.pair(vid, text_field(info.get("caption"), where, "caption")))
        return pairs

    def _load_test(self) -> list[VideoTextPair]:
        return self._read("test_file", all_captions=False)

    def _load_train(self) -> list[VideoTextPair]:
        return self._read("train_file", all_captions=True)
