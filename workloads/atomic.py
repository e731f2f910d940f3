"""Atomic file writes: readers see the old file or the whole new one, never a torn write, and a crash leaves no
half-written file under the final name. Every cache, ledger and checkpoint write goes through here."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; on success it replaces `path` in one rename, on error it is
    removed. The temporary name is hidden (leading dot) and unique per process; `suffix` ends it (writers that pick
    a format by extension, e.g. ".mp4")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding, newline="")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
