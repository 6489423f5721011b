"""Tables benchmark: `sql()` over a big access log through the CLI, against `awk` in the same run.

Builds an access log of --size-mb MB from the real Apache lines (as
bench/huge_file.py does), then, for two questions — requests per status
(`SELECT status, count(*) FROM log GROUP BY 1`) and requests per hour — measures:

  * awk computing the same answer (median of --repeats runs, page cache hot);
  * the first question through the CLI (`rlm ask` with a scripted model that
    runs the query), with an empty cache: the parent builds the table; the
    build time is the one recorded in the table's description;
  * the second question (cache warm), the whole CLI run and the query inside
    the cell (timed in the cell itself).

The answers of sql() and awk are compared; a mismatch fails the run.

Usage: python bench/tables_bench.py [--size-mb 1024] [--repeats 3] [--dir /tmp] [--keep]
       python bench/tables_bench.py --build-only PATH --cache DIR
           one table build as the product's profile makes it, the line index kept in DIR:
           for an outside timer (/usr/bin/time -v, hyperfine) against awk
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from huge_file import build_log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

QUERIES = {
    "status": (
        "SELECT status, count(*) AS n FROM log GROUP BY 1 ORDER BY 1",
        # $9 is the status of a well-formed combined line
        "awk '{c[$9]++} END {for (k in c) print k, c[k]}' {path}",
    ),
    "hour": (
        "SELECT strftime(ts, '%d/%b/%Y:%H') AS h, count(*) AS n FROM log WHERE ts IS NOT NULL GROUP BY 1 ORDER BY 1",
        'awk \'{split($4, a, ":"); c[substr(a[1], 2) ":" a[2]]++} END {for (k in c) print k, c[k]}\' {path}',
    ),
}


def _awk(cmd: str, path: Path) -> tuple[float, dict[str, int]]:
    t0 = time.perf_counter()
    out = subprocess.run(
        cmd.replace("{path}", str(path)), shell=True, capture_output=True, text=True, check=True
    )
    took = time.perf_counter() - t0
    counts = {}
    for line in out.stdout.splitlines():
        k, v = line.rsplit(" ", 1)
        counts[k] = int(v)
    return took, counts


def _ask(path: Path, query: str, work: Path, cache: Path) -> tuple[float, float, str]:
    """One CLI question whose model runs `query`: (CLI seconds, query seconds in the cell, result)."""
    code = (
        "import time\nt = time.perf_counter()\n"
        f"r = sql({query!r})\n"
        "took = time.perf_counter() - t\n"
        "import hashlib, json\n"
        "rows = sorted([str(k), int(v)] for k, v in r)\n"
        "print('QUERY_S', took)\nprint('DIGEST', len(rows), hashlib.sha256(json.dumps(rows).encode()).hexdigest())"
    )
    script = work / "script.json"
    script.write_text(
        json.dumps(
            [
                {"tool": "execute", "args": {"code": code}},
                {"tool": "final", "args": {"answer": "done"}},
                "done [F1]",
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    # Each run alone, as the figures before warm processes were measured: none serves it, none is left.
    env.update({"RLM_CACHE_DIR": str(cache), "XDG_CONFIG_HOME": str(work / ".config"), "RLM_NO_WARM": "1"})
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", str(path), "count", "-m", f"scripted/{script}", "--json", "-q",
         "--trace-dir", str(work / "traces")],
        cwd=work, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rlm ask failed ({proc.returncode}): {proc.stderr[-2000:]}")
    trace = json.loads(sorted((work / "traces").glob("*.json"))[-1].read_text())
    shutil.rmtree(work / "traces")
    obs = next(s["observation"]["preview"] for s in trace["steps"] if s.get("action"))
    m = re.search(r"QUERY_S ([0-9.e-]+)", obs)
    digest = re.search(r"DIGEST (\d+ [0-9a-f]+)", obs)
    if not m or not digest:
        raise SystemExit(f"the cell did not report its query: {obs[:1000]}")
    return took, float(m.group(1)), digest.group(1)


def _digest(counts: dict[str, int]) -> str:
    rows = sorted([k, v] for k, v in counts.items())
    return f"{len(rows)} {hashlib.sha256(json.dumps(rows).encode()).hexdigest()}"


def build_only(path: str, cache_dir: str) -> None:
    """Build PATH's table the way the profile does (rlm.input.source -> rlm.input.tables.ensure_table),
    with the line index kept in CACHE_DIR between runs and the table removed before each:
    a process timed from outside pays its start, the cached profile and the build."""
    from rlm.input.source import open_source

    cache = Path(cache_dir)
    for old in cache.glob("*.t*.duckdb"):
        old.unlink()
    for old in cache.glob("*.t*.json"):
        old.unlink()
    profile = open_source(path, cache_dir=str(cache)).profile
    if not profile.table:
        raise SystemExit("no table was built")
    t = profile.table
    print(f"{t['format']}: {t['rows']:,} rows, {t['parsed']:,} parsed, build {t['build_s']:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", metavar="PATH", default=None)
    ap.add_argument("--cache", metavar="DIR", default=None, help="with --build-only: where the index stays")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.build_only:
        build_only(args.build_only, args.cache or tempfile.mkdtemp(prefix="rlm-build-only-"))
        return

    base = Path(tempfile.mkdtemp(prefix="rlm-tables-bench-", dir=args.dir))
    path = base / "access.log"
    size = build_log(path, args.size_mb)
    lines = sum(1 for _ in open(path, "rb"))
    print(f"input: {size / 2**20:.0f} MB, {lines:,} lines, {os.cpu_count()} cores")
    report: dict[str, dict[str, float]] = {}
    try:
        for name, (query, awk) in QUERIES.items():
            awk_times, awk_result = [], {}
            for _ in range(args.repeats):
                t, awk_result = _awk(awk, path)
                awk_times.append(t)
            firsts, builds, seconds, cells = [], [], [], []
            result = ""
            for _ in range(args.repeats if name == "status" else 1):
                cache = base / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                t, _, result = _ask(path, query, base, cache)
                firsts.append(t)
                info = json.loads(next(cache.glob("*.t*.json")).read_text())
                builds.append(info["build_s"])
            for _ in range(args.repeats):
                t, q, result = _ask(path, query, base, base / "cache")
                seconds.append(t)
                cells.append(q)
            if name == "status":
                awk_result = {k: v for k, v in awk_result.items() if re.fullmatch(r"\d{3}", k)}
            if result != _digest(awk_result):
                raise SystemExit(f"{name}: sql and awk disagree:\n{result}\n{awk_result}")
            awk_s = statistics.median(awk_times)
            row = {
                "awk_s": awk_s,
                "first_cli_s": statistics.median(firsts),
                "build_s": statistics.median(builds),
                "second_cli_s": statistics.median(seconds),
                "query_s": statistics.median(cells),
            }
            report[name] = row
            print(
                f"{name}: awk {awk_s:.2f} s | first question {row['first_cli_s']:.2f} s (table build "
                f"{row['build_s']:.2f} s = {row['build_s'] / awk_s:.1f}x awk) | second question "
                f"{row['second_cli_s']:.2f} s (query {row['query_s']:.3f} s = {row['query_s'] / awk_s:.3f}x awk)"
            )
        db = next((base / "cache").glob("*.duckdb"))
        print(f"table file: {db.stat().st_size / 2**20:.0f} MB for {size / 2**20:.0f} MB of log")
        print(json.dumps(report, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"kept: {base}")


if __name__ == "__main__":
    main()
