"""LSMDC (LSMDC16 public test, 1,000 clips) as the authors' code reads it (bingqingzhang/vtr_tta, its dataset loaders).

Files under root (names are options): `LSMDC16_challenge_1000_publictect.csv` (test, option `test_file`) and
`LSMDC16_annos_training.csv` (train, option `train_file`); tab-separated, exactly 6 fields per line:
clip_id, start_aligned, end_aligned, start_extracted, end_extracted, sentence.

As the reference: the clip `1012_Unbreakable_00.05.16.065-00.05.21.941` is skipped (option `skip_clips`); clips are
keyed by clip_id (a repeated id keeps its first position and its last sentence); video path
`{root}/{videos_dir}/{clip_id.split('.')[0][:-3]}/{clip_id}.avi` (movie folder = the id without its timestamp).
LSMDC needs the MPII permission; nothing is shipped.
"""
from __future__ import annotations

from workloads.datasets.base import (
    AnnotatedDataset,
    DatasetError,
    VideoTextPair,
    iter_lines,
    register_dataset,
    text_field,
)

SKIPPED_CLIPS = ("1012_Unbreakable_00.05.16.065-00.05.21.941",)


def lsmdc_video_relpath(clip_id: str, ext: str = ".avi") -> str:
    return f"{clip_id.split('.')[0][:-3]}/{clip_id}{ext}"


@register_dataset("lsmdc", order=2)
class LSMDCDataset(AnnotatedDataset):
    video_ext = ".avi"
    option_defaults = {
        **AnnotatedDataset.option_defaults,
        "test_file": "LSMDC16_challenge_1000_publictect.csv",
        "train_file": "LSMDC16_annos_training.csv",
        "skip_clips": SKIPPED_CLIPS,
    }
    provide = ("put LSMDC16_challenge_1000_publictect.csv and LSMDC16_annos_training.csv (MPII LSMDC, permission "
               "needed) in the dataset root and the clips in <root>/videos/<movie>/<clip_id>.avi")

    def video_path(self, video_id: str) -> str:
        ext = self.option("video_ext")
        return str(self.videos_dir / lsmdc_video_relpath(video_id, self.video_ext if ext is None else ext))

    def _load(self, key: str) -> list[VideoTextPair]:
        path = self.annotation_file(key, "tab-separated clip_id, 4 timestamps, sentence")
        skip = set(self.option("skip_clips") or ())
        captions: dict[str, str] = {}
        for lineno, line in iter_lines(path):
            fields = line.split("\t")
            where = f"{path}:{lineno}"
            if len(fields) != 6:
                raise DatasetError(f"{where}: expected 6 tab-separated fields (clip_id, start_aligned, end_aligned, "
                                   f"start_extracted, end_extracted, sentence), got {len(fields)}")
            clip_id = text_field(fields[0], where, "clip_id")
            if clip_id in skip:
                continue
            captions[clip_id] = text_field(fields[5], where, "sentence")
        return [self.pair(cid, cap) for cid, cap in captions.items()]

    def _load_test(self) -> list[VideoTextPair]:
        return self._load("test_file")

    def _load_train(self) -> list[VideoTextPair]:
        return self._load("train_file")
