"""Read a stream's inputs ahead of the consumer: `read_ahead(read, items, depth)` yields `read(item)` for each item
in order while up to `depth` later items are being read on background threads; `Waited(items)` measures how long
the consumer still waits for them.

A trial's query stream reads each batch of clips from the render cache (file read, sha256 check, stacking) between
two batches of model work; on a GPU that leaves the GPU idle while the CPU reads (measured in
docs/notes/2026-11-29-feeding-the-gpu.md). Reading the next batches while the current one is computed hides it:
file reads and hashing release the GIL.

Promises: the same values in the same order as `map(read, items)`; an item's exception is raised where that item
would have been yielded (the earlier ones are still yielded first); at most `depth` items are read beyond the one the
consumer holds, and when the consumer stops early (closes the generator, or it is garbage-collected) no further item
is started. `depth` 0 reads each item when it is asked for, on the caller's thread.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
import time
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
_END = object()   # `items` is exhausted


def read_ahead(read: Callable[[T], R], items: Iterable[T], depth: int) -> Iterator[R]:
    if depth < 0:
        raise ValueError(f"read-ahead depth must be >= 0 (0: read each item when asked), got {depth}")
    if depth == 0:
        yield from map(read, items)
        return
    pending: deque[Future] = deque()
    todo = iter(items)
    pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="read-ahead")
    try:
        while True:
            # the item handed out next plus `depth` behind it
            while len(pending) < depth + 1 and (item := next(todo, _END)) is not _END:
                pending.append(pool.submit(read, item))
            if not pending:
                return
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


class Waited:
    """Iterate `items`, summing in `seconds` how long each step waited for its item (a trial's
    `timings.input_wait_s`)."""

    def __init__(self, items: Iterable[R]):
        self.items, self.seconds = iter(items), 0.0

    def __iter__(self) -> Iterator[R]:
        return self

    def __next__(self) -> R:
        t = time.perf_counter()
        try:
            return next(self.items)
        finally:
            self.seconds += time.perf_counter() - t
