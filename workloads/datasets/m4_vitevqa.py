"""M4-ViteVQA (Zhao et al., NeurIPS 2022 Datasets; bytedance/VTVQA), the second scene-text benchmark of TCD's Table
1, in its published layout (docs/faithfulness.md: Datasets):

    {root}/Annotations/ViteVQA_0.0.2_{task}{split}.json   task t1s1 (default), t1s2 or t2; split test / train
    {root}/video/<video_id>.mp4                           the videos (option `videos_dir`)

Each file is {"data": [{"question_id", "video_id", "question", "answers": [...]}, ...]}: question-answer pairs, no
captions. Neither TCD nor StarVR says how it turned them into retrieval queries; here (ours) a pair's query is its
question followed by its most frequent answer ("what does the sign say? open"); test: one query per video, from its
first question in file order; train: every pair. No published retrieval number applies to this protocol.
"""
from __future__ import annotations

from collections import Counter

from workloads.datasets.base import (AnnotatedDataset, DatasetError, VideoTextPair, read_json, register_dataset,
                                     text_field)

TASKS = ("t1s1", "t1s2", "t2")


@register_dataset("m4_vitevqa", order=6)
class M4ViteVQADataset(AnnotatedDataset):
    video_ext = ".mp4"
    option_choices = {"task": TASKS}
    option_defaults = {**AnnotatedDataset.option_defaults, "videos_dir": "video", "task": "t1s1",
                       "test_file": None, "train_file": None}
    provide = ("put M4-ViteVQA's Annotations/ViteVQA_0.0.2_<task><split>.json in the dataset root and the videos in "
               "<root>/video/<video_id>.mp4")

    def _file(self, split: str):
        key = f"{split}_file"
        default = f"Annotations/ViteVQA_0.0.2_{self.option('task')}{split}.json"
        return self.annotation_file(key, '{"data": [{"video_id", "question", "answers"}]}',
                                    name=self.option(key) or default)

    def _read(self, split: str, first_only: bool) -> list[VideoTextPair]:
        path = self._file(split)
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise DatasetError(f"{path}: expected {{\"data\": [question-answer pairs]}}")
        pairs, seen = [], set()
        for i, qa in enumerate(data["data"]):
            where = f"{path}: data[{i}]"
            if not isinstance(qa, dict):
                raise DatasetError(f"{where}: expected an object")
            vid = text_field(str(qa.get("video_id", "")), where, "video_id")
            if first_only and vid in seen:
                continue
            answers = [a.strip() for a in qa.get("answers") or [] if isinstance(a, str) and a.strip()]
            if not answers:
                raise DatasetError(f"{where}: no answer")
            question = text_field(qa.get("question"), where, "question")
            seen.add(vid)
            pairs.append(self.pair(vid, f"{question} {Counter(answers).most_common(1)[0][0]}"))
        return pairs

    def _load_test(self) -> list[VideoTextPair]:
        return self._read("test", first_only=True)

    def _load_train(self) -> list[VideoTextPair]:
        return self._read("train", first_only=False)
