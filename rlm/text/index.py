"""The line index of a text file: a vectorised scan for line starts, its file format, the scan threads.

Worker-safe (rlm.text): standard library and numpy only. The scan threads are
started by the worker before lock-down (`start_scan_threads`); afterwards no
thread can be created, and the pool they form serves every later scan.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Bytes scanned per step by grep, the index builder and LazyText: large enough
# that the per-step Python overhead vanishes, small enough that transient copies
# (a chunk's bytes and its decoded text) stay a few MB.
SCAN_CHUNK_BYTES = 4 * 1024 * 1024
# Bytes a thread scans per step when a whole file is indexed before a run's first turn: the
# scan runs beside litellm's import, which holds the GIL, and every step takes the GIL back a
# few times. A 3 GB file's index beside the import, 2 cores: done at 1.8-2.0 s in 64 MB steps,
# at 2.7-3.4 s in 4 MB steps (the import ending at 2.5-2.8 s either way). A step's transient
# arrays are about its size, per thread.
INDEX_CHUNK_BYTES = 64 * 1024 * 1024
_UTF8_BOM = b"\xef\xbb\xbf"

# Threads for vectorised scans (index build, literal grep); numpy drops the GIL.
MAX_SCAN_THREADS = 4
SCAN_THREAD_STACK = 1024 * 1024

INDEX_MAGIC = b"RLMIDX01"
# magic, byte size of the indexed buffer, number of int64 entries, first data byte
_INDEX_HEADER = struct.Struct("<8sQQQ")


def _numpy() -> Any:
    # Imported on first use: the worker's start-up must not pay ~100 ms for it.
    import numpy

    return numpy


def line_starts(
    buf: Any,
    first: int = 0,
    non_ascii: list[tuple[int, int]] | None = None,
    *,
    chunk_bytes: int | None = None,
    longest: list[int] | None = None,
) -> Any:
    """Byte offsets where each line starts, plus a final sentinel (the end).

    Entry i is where line i (0-based) starts; entry n is the buffer's end, so
    line i spans [starts[i], starts[i+1]) including its newline. `first` skips a
    byte-order mark. Returns an int64 numpy array of n_lines + 1 entries.
    With a `non_ascii` list, the same pass appends the (start, end) byte ranges,
    SCAN_CHUNK_BYTES each at most, that hold a byte >= 0x80 (a cheap reduction on
    data already in cache). `chunk_bytes`: the bytes a thread scans per step
    (default SCAN_CHUNK_BYTES; INDEX_CHUNK_BYTES for a whole file's index). With a `longest` list, the same pass
    appends the longest line's length in bytes, its line end included (each step measures its
    own lines, in its own thread: a difference over the whole array afterwards took 0.5 s of a
    3 GB file's index beside litellm's import).
    """
    np = _numpy()
    size = len(buf)
    step = chunk_bytes or SCAN_CHUNK_BYTES
    if first >= size:
        if longest is not None:
            longest.append(0)
        return np.array([size], dtype=np.int64)

    def newlines(off: int) -> tuple[Any, list[tuple[int, int]], int]:
        chunk = np.frombuffer(buf, dtype=np.uint8, count=min(step, size - off), offset=off)
        hits = np.flatnonzero(chunk == 10)
        hits += off + 1
        inner = int(np.diff(hits).max()) if longest is not None and len(hits) > 1 else 0
        wide: list[tuple[int, int]] = []
        if non_ascii is not None and int(chunk.max()) >= 128:
            subs = np.arange(0, len(chunk), SCAN_CHUNK_BYTES)
            for i in np.flatnonzero(np.maximum.reduceat(chunk, subs) >= 128):
                lo = off + int(subs[i])
                wide.append((lo, min(lo + SCAN_CHUNK_BYTES, off + len(chunk))))
        return hits, wide, inner

    parts = [np.array([first], dtype=np.int64)]
    offsets = range(first, size, step)
    top, last = 0, first  # the longest line so far, and where the line being read started
    for hits, wide, inner in _parallel_map(newlines, offsets):
        parts.append(hits)
        if non_ascii is not None:
            non_ascii.extend(wide)
        if len(hits):
            top, last = max(top, inner, int(hits[0]) - last), int(hits[-1])
    if buf[size - 1] != 10:
        parts.append(np.array([size], dtype=np.int64))
        top = max(top, size - last)
    if longest is not None:
        longest.append(top)
    return np.concatenate(parts).astype(np.int64, copy=False)


_threads_ok = True  # False once a thread could not start (e.g. RLIMIT_NPROC in the sandbox)
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def start_scan_threads(count: int | None = None) -> int:
    """Start the scan threads now and keep them; returns how many run.

    The sandbox worker calls this before lock-down: RLIMIT_NPROC 0 forbids new
    threads afterwards, but threads that already exist keep working, so grep
    and the index scan use every core inside the worker too.
    """
    global _pool
    workers = count or min(MAX_SCAN_THREADS, os.cpu_count() or 1)
    if _pool is not None or workers <= 1:
        return workers if _pool is not None else 1
    global _pool_size
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlm-scan")
    # A pool starts a thread per submit only while none is idle: tasks that wait
    # for each other make it start all of them at once.
    barrier = threading.Barrier(workers)
    # Scans need little stack; the default 8 MB each would come out of the worker's
    # address-space limit.
    previous = threading.stack_size(SCAN_THREAD_STACK)
    try:
        started = [pool.submit(barrier.wait, 10) for _ in range(workers)]
    except RuntimeError:  # "can't start new thread"
        barrier.abort()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        threading.stack_size(previous)
    for future in started:
        future.result()
    _pool, _pool_size = pool, workers
    return workers


def _parallel_map(fn: Any, items: Sequence[Any]) -> Iterator[Any]:
    """map() over the scan threads when there is more than one item and core, results in order.

    numpy's comparisons and searches release the GIL, so the chunks of one scan
    run on all cores. Where threads cannot start (a worker whose threads were
    not started before lock-down), the work runs in the calling thread.
    """
    global _threads_ok
    if len(items) <= 1 or not _threads_ok:
        yield from map(fn, items)
        return
    if _pool is None:
        try:
            start_scan_threads()
        except RuntimeError:  # "can't start new thread"
            _threads_ok = False
    if _pool is None:
        yield from map(fn, items)
        return
    # At most one task per thread in flight ahead of the consumer: results stay in order and
    # a consumer that stops early (grep's first matches) leaves little work behind.
    window = _pool_size
    futures: list[Any] = []
    try:
        for item in items:
            futures.append(_pool.submit(fn, item))
            if len(futures) > window:
                yield futures.pop(0).result()
        while futures:
            yield futures.pop(0).result()
    finally:
        for future in futures:
            future.cancel()


INDEX_FLAG_ASCII = 1  # every byte of the indexed buffer is ASCII


def write_index(starts: Any, out_path: str, buffer_size: int, flags: int = 0) -> None:
    """Write a line-start array to `out_path` atomically (temp file + rename)."""
    np = _numpy()
    arr = np.ascontiguousarray(starts, dtype="<i8")
    tmp = f"{out_path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(_INDEX_HEADER.pack(INDEX_MAGIC, buffer_size, len(arr), flags))
        fh.write(memoryview(arr).cast("B"))  # the array's own bytes: no copy of a 200 MB index
    os.replace(tmp, out_path)


def read_index(index_path: str, buffer_size: int) -> tuple[mmap.mmap, memoryview, int] | None:
    """Map a prebuilt index: (mapping, int64 view, flags); None if missing, corrupt or for other bytes."""
    try:
        with open(index_path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size < _INDEX_HEADER.size + 8:
                return None
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    magic, size, count, flags = _INDEX_HEADER.unpack_from(mm, 0)
    if magic != INDEX_MAGIC or size != buffer_size or len(mm) != _INDEX_HEADER.size + 8 * count:
        mm.close()
        return None
    view = memoryview(mm)[_INDEX_HEADER.size :].cast("q")
    if count < 1 or view[count - 1] != buffer_size:
        view.release()
        mm.close()
        return None
    return mm, view, flags


def build_index(path: str, out_path: str) -> int:
    """Scan the UTF-8 (or single-byte) file at `path` and write its index; returns n_lines."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            starts = line_starts(b"")
        else:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                starts = line_starts(mm, 3 if mm[:3] == _UTF8_BOM else 0)
    write_index(starts, out_path, size)
    return len(starts) - 1
