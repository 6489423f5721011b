"""A compressed log, first and second question, against `zcat | wc -l` in the same run.

Builds an Apache log of --size-mb from the real lines (tests/bigfiles.py), compresses it
with `gzip -6` (and, with --zstd, `zstd -3`), then times, each --repeats times with the page
cache hot:

  * the reference: `zcat FILE | wc -l` (`zstdcat` for zstd), a pass that only decompresses;
  * rlm's decompression alone (rlm.input.compressed, in a fresh process, to /dev/null) against
    `zcat FILE > /dev/null`: the part of the first question a compressed input adds;
  * the first question: `rlm ask FILE.gz` through the CLI with a fresh cache (decompressed
    into it, indexed, its table built) and a scripted model that runs one sql() count;
  * the second question: the same command again, the cache kept (nothing decompressed).

Prints the medians, the ratios and one JSON line.

    python bench/compressed_bench.py [--size-mb 1024] [--repeats 3] [--zstd]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import bigfiles  # noqa: E402  (tests/bigfiles.py: the real-line file builders)

DECOMPRESS = (
    "import sys; from rlm.input.compressed import codec_of, decompress; p = sys.argv[1]; "
    "decompress(p, codec_of(open(p, 'rb').read(8)), open('/dev/null', 'wb'), display=p)"
)
COUNT = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'


def wall(cmd: list[str] | str, **kw: object) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t0, proc.stdout


def ask(packed: Path, work: Path, cache: Path) -> tuple[float, str]:
    script = work / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool": "execute", "args": {"code": COUNT}},
                {"tool": "final", "args": {"answer": "counted"}},
                json.dumps({"answer": "counted", "citations": ["F1"]}),
            ]
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RLM_")},
        "RLM_CACHE_DIR": str(cache),
        "RLM_TRACE_DIR": str(work / "traces"),
        "XDG_DATA_HOME": str(work / "data"),
    }
    cmd = [
        sys.executable,
        "-m",
        "rlm",
        "ask",
        str(packed),
        "how many 404s?",
        "-m",
        f"scripted/{script}",
        "-q",
    ]
    return wall(cmd, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--zstd", action="store_true", help="also a zstd-compressed copy")
    parser.add_argument("--dir", default=None, help="where the files are built (default: a temp dir)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rlm-compressed-bench-", dir=args.dir))
    try:
        log = work / "access.log"
        bigfiles.apache_log(log, args.size_mb << 20)
        lines = int(subprocess.run(["wc", "-l", str(log)], capture_output=True, text=True).stdout.split()[0])
        codecs = [("gzip", ["gzip", "-6", "-k", str(log)], log.with_suffix(".log.gz"), "zcat")]
        if args.zstd:
            codecs.append(("zstd", ["zstd", "-3", "-q", str(log)], log.with_suffix(".log.zst"), "zstdcat"))
        rows = []
        for codec, compress, packed, cat in codecs:
            subprocess.run(compress, check=True)
            reference, first, second, ours, theirs = [], [], [], [], []
            for _ in range(args.repeats):
                t, out = wall(f"{cat} {packed} | wc -l", shell=True)
                assert int(out) == lines, (out, lines)
                reference.append(t)
                theirs.append(wall(f"{cat} {packed} > /dev/null", shell=True)[0])
                ours.append(wall([sys.executable, "-c", DECOMPRESS, str(packed)])[0])
                cache = work / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                t, answer = ask(packed, work, cache)
                first.append(t)
                t, again = ask(packed, work, cache)
                assert answer == again, (answer, again)
                second.append(t)
            ref = statistics.median(reference)
            rows.append(
                (
                    codec,
                    "decompress only",
                    statistics.median(ours),
                    f"{cat} > /dev/null",
                    statistics.median(theirs),
                )
            )
            for what, times in (("first question", first), ("second question", second)):
                rows.append((codec, what, statistics.median(times), f"{cat} | wc -l", ref))
        print(f"{args.size_mb} MiB, {lines:,} lines, median of {args.repeats}")
        print(f"{'codec':<6} {'rlm':<16} {'median':>9}   {'reference':<16} {'median':>9}  ratio")
        for codec, what, t, ref_name, ref in rows:
            print(f"{codec:<6} {what:<16} {t:>8.2f}s   {ref_name:<16} {ref:>8.2f}s  {t / ref:.2f}x")
        print(json.dumps({"size_mb": args.size_mb, "lines": lines, "rows": rows}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
