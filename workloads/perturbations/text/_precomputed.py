"""Perturbed captions made elsewhere, in the authors' output format: `{type}_{severity}.json` = a JSON list of
[video_id, text] in exactly the test annotation order (their TTA loader checks the length and the video ids)."""
from __future__ import annotations

import json
import os
from typing import Sequence


def load_precomputed(path: str | os.PathLike, video_ids: Sequence[str]) -> list[str]:
    """The texts of `path`, checked against the test split's video ids (in annotation order); any mismatch is a
    one-line ValueError naming the file, the entry and what was expected."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: precomputed captions file not found") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of [video_id, text] pairs, got {type(data).__name__}")
    ids = [str(v) for v in video_ids]
    if len(data) != len(ids):
        raise ValueError(f"{path}: has {len(data)} entries, expected {len(ids)} (one [video_id, text] per test "
                         f"caption, in annotation order)")
    texts = []
    for i, (entry, want) in enumerate(zip(data, ids)):
        if not isinstance(entry, list) or len(entry) != 2:
            raise ValueError(f"{path}: entry {i} is {json.dumps(entry)[:80]}, expected [video_id, text]")
        vid, text = entry
        if str(vid) != want:
            hint = " (the file's ids are the split's in another order)" if sorted(
                str(e[0]) if isinstance(e, list) and e else "" for e in data) == sorted(ids) else ""
            raise ValueError(f"{path}: entry {i} has video id {vid!r}, expected {want!r}{hint}")
        if not isinstance(text, str):
            raise ValueError(f"{path}: entry {i} ({want}) text is {type(text).__name__}, expected a string")
        if not text.strip():
            raise ValueError(f"{path}: entry {i} ({want}) text is empty, expected a perturbed caption")
        texts.append(text)
    return texts
