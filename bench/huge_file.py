"""Huge-file benchmark: rlm's input layer against the Unix tools, side by side.

Builds a log of --size-mb megabytes in a temporary directory by replaying the
real Apache lines of fixtures/data/elastic/apache_logs, each pass shifted by
four days so that timestamps keep increasing, then measures (median of
--repeats runs, page cache hot for every contender):

  * making it queryable: the vectorised line-index scan, the whole first
    `open_source` (imports, index, invalid-byte check, in a fresh process; the sha256 runs on in the background),
    a cached `open_source`, and the worker's open with the prebuilt index;
    each against `wc -l`;
  * a literal grep against `grep -c`, a regex grep against `grep -cE`;
  * the worker's peak memory (ru_maxrss of a subprocess that maps the file,
    greps, and works on `context` / `context_lines`) against the file size,
    with `context` lazy (the default above TEXT_IN_MEMORY_MAX_BYTES) and, for
    comparison, as a full str;
  * a comprehension over `context_lines` against the same over a plain list.

Usage: python bench/huge_file.py [--size-mb 1024] [--repeats 3] [--dir /tmp]
The generated file is deleted at the end (--keep keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import bigfiles  # noqa: E402  (tests/bigfiles.py: the real-line file builders)

LITERAL = "Googlebot/2.1"
REGEX = r'" (4|5)[0-9]{2} '
GREP_E = r'" (4|5)[0-9]{2} '


def build_log(path: Path, size_mb: int) -> int:
    """Replay the real lines until `size_mb` MiB, shifting dates 4 days per pass (tests/bigfiles.py)."""
    return bigfiles.apache_log(path, size_mb * 1024 * 1024)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()


def py(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# Peak RSS of this process's own memory map. VmHWM, not ru_maxrss: on Linux the
# latter carries over the parent's peak across fork + exec.
PEAK_RSS = r"""
def peak_rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
"""

WORKER_CODE = (
    PEAK_RSS
    + r"""
import json, sys, time
import rlm.text.textfile as tf
path, idx, mode = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "str":
    tf.TEXT_IN_MEMORY_MAX_BYTES = 1 << 62
t0 = time.perf_counter()
t = tf.MappedText(path, index_path=idx)
opened = time.perf_counter() - t0
first_line = t.lines[0]; last = t.lines[-1]; middle = t.peek_lines(t.n_lines // 2, 20)
t0 = time.perf_counter()
ctx = t.text()
text_s = time.perf_counter() - t0
out = {"opened_s": opened, "text_s": text_s, "context_type": type(ctx).__name__}
t0 = time.perf_counter()
out["grep_literal"] = t.grep(sys.argv[4]).total
out["grep_regex"] = t.grep(sys.argv[5]).total
out["count"] = ctx.count("Googlebot")
out["in"] = "no such thing here" in ctx
out["len"] = len(ctx)
out["findall_404"] = len(tf.re_findall(r'" 404 ', ctx))
out["lines_404"] = sum(1 for s in t.lines if '" 404 ' in s)
out["ops_s"] = time.perf_counter() - t0
out["maxrss"] = peak_rss()
print(json.dumps(out))
"""
)

COMPREHENSION_CODE = (
    PEAK_RSS
    + r"""
import json, sys, time, statistics
from rlm.text.textfile import MappedText
path, idx, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = MappedText(path, index_path=idx)
lines = t.lines
def over(seq):
    return [s for s in seq if "Googlebot" in s]
lazy = []
for _ in range(repeats):
    t0 = time.perf_counter(); a = over(lines); lazy.append(time.perf_counter() - t0); del a
rss_lazy = peak_rss()
t0 = time.perf_counter(); plain = list(lines); build = time.perf_counter() - t0
listed = []
for _ in range(repeats):
    t0 = time.perf_counter(); b = over(plain); listed.append(time.perf_counter() - t0); n = len(b); del b
rss_list = peak_rss()
print(json.dumps({"lazy_s": statistics.median(lazy), "list_s": statistics.median(listed),
                  "list_build_s": build, "matches": n, "rss_lazy": rss_lazy, "rss_list": rss_list}))
"""
)

OPEN_CODE = r"""
import json, sys, time
t0 = time.perf_counter()
from rlm.input.source import open_source
s = open_source(sys.argv[1], cache_dir=sys.argv[2])
print(json.dumps({"s": time.perf_counter() - t0, "index": s.profile.index_path, "lines": s.profile.lines}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to build the file (default: the temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from rlm.input.source import open_source
    from rlm.text.textfile import MappedText, build_index, line_starts

    work = Path(tempfile.mkdtemp(prefix="rlm-bench-", dir=args.dir))
    path = work / "huge_access.log"
    rows: list[tuple[str, float, str, float, str]] = []
    try:
        t0 = time.perf_counter()
        size = build_log(path, args.size_mb)
        print(f"built {path} ({size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        # Warm the page cache for every contender alike.
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        r = args.repeats

        n_wc = int(run(["wc", "-l", str(path)]).split()[0])
        wc = median_time(lambda: run(["wc", "-l", str(path)]), r)
        import mmap

        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            line_starts(mm[:1])  # numpy imported before timing
            scan = median_time(lambda: line_starts(mm), r)
        idx = str(work / "index.idx")
        build = median_time(lambda: build_index(str(path), idx), r)

        def first_open() -> None:
            cache = work / f"cache-{time.perf_counter_ns()}"
            py(OPEN_CODE, str(path), str(cache))
            shutil.rmtree(cache, ignore_errors=True)

        cold = median_time(first_open, r)
        cache = str(work / "cache")
        src = open_source(str(path), cache_dir=cache)
        assert src.profile.lines == n_wc, (src.profile.lines, n_wc)
        warm = median_time(lambda: open_source(str(path), cache_dir=cache), r)
        idx = src.profile.index_path or idx
        worker_open = median_time(lambda: MappedText(str(path), index_path=idx).close(), r)
        rows += [
            ("index scan (vectorised, in-process)", scan, "wc -l", wc, ""),
            ("build_index (scan + write file)", build, "wc -l", wc, ""),
            ("first open_source, fresh process", cold, "wc -l", wc, "imports, index, invalid-byte check"),
            ("cached open_source (2nd question)", warm, "wc -l", wc, ""),
            ("worker MappedText open, prebuilt index", worker_open, "wc -l", wc, ""),
        ]

        text = MappedText(str(path), index_path=idx)
        text.grep("warm-up")
        n_lit = text.grep(LITERAL).total
        assert n_lit == int(run(["grep", "-c", LITERAL, str(path)])), "literal count differs from grep -c"
        lit = median_time(lambda: text.grep(LITERAL), r)
        g_lit = median_time(lambda: run(["grep", "-c", LITERAL, str(path)]), r)
        n_re = text.grep(REGEX).total
        assert n_re == int(run(["grep", "-cE", GREP_E, str(path)])), "regex count differs from grep -cE"
        rex = median_time(lambda: text.grep(REGEX), r)
        g_re = median_time(lambda: run(["grep", "-cE", GREP_E, str(path)]), r)
        text.close()
        rows += [
            (f"grep {LITERAL!r} ({n_lit:,} lines)", lit, "grep -c", g_lit, ""),
            (f"grep {REGEX!r} ({n_re:,} lines)", rex, "grep -cE", g_re, ""),
        ]

        mem = {}
        for mode in ("lazy", "str"):
            mem[mode] = py(WORKER_CODE, str(path), idx, mode, LITERAL, REGEX)
        comp = py(COMPREHENSION_CODE, str(path), idx, str(r))
    finally:
        if args.keep:
            print(f"kept {path}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    print(
        f"\nfile: {size / 2**20:,.0f} MiB, {n_wc:,} lines; medians of {args.repeats} runs, page cache hot\n"
    )
    print(f"{'rlm':<44} {'median':>9}   {'baseline':<9} {'median':>9} {'ratio':>7}  note")
    for name, ours, base, theirs, note in rows:
        print(f"{name:<44} {ours:>8.3f}s   {base:<9} {theirs:>8.3f}s {ours / theirs:>6.2f}x  {note}")
    print()
    for m in mem.values():
        print(
            f"worker peak RSS, context as {m['context_type']:<8}: {m['maxrss'] / 2**20:>8,.0f} MiB = "
            f"{m['maxrss'] / size:.2f}x file size (text() {m['text_s']:.3f}s, ops {m['ops_s']:.2f}s)"
        )
    print(
        f"comprehension over context_lines: {comp['lazy_s']:.3f}s; over a plain list: {comp['list_s']:.3f}s "
        f"({comp['lazy_s'] / comp['list_s']:.2f}x); building that list: {comp['list_build_s']:.2f}s, "
        f"peak RSS {comp['rss_lazy'] / 2**20:,.0f} MiB -> {comp['rss_list'] / 2**20:,.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
