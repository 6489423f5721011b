"""The first answer about a file rlm has never seen, against DuckDB parsing it alone and `awk`.

For each shape (an Apache access log, a syslog, a 14-column CSV; about --size-mb
MiB each, built from the real lines in fixtures/data as the tests build them),
one run measures, on the same machine and back to back:

  * `awk`: one pass over the file (the floor of any tool that reads it all);
  * DuckDB alone: a fresh process that parses the file into a table on disk with
    DuckDB's own readers (`read_csv` for the CSV; a one-column read and
    `regexp_extract` for the line formats), as rlm's table is;
  * the whole first question through the CLI, cold (no cache), the model being a
    real HTTP server on 127.0.0.1 speaking the OpenAI API whose replies run one
    `sql()` count, then FINAL, then the synthesis;
  * the time from the CLI's start to the model's first request (when the server
    received it);
  * the second question (the cache warm), the same way;
  * with --warm, the first and second question again with a warm process running
    (`rlm warm start`: litellm imported once, a process forked per run), its own cache
    cleared first: what a user who keeps one running waits;
  * with --seasoned, each first question is asked by a user who has used rlm before:
    its memory holds a finding about another file (one question about the repository's
    access log, asked just before);
  * with --remembered, each first question is asked of a file memory knows but the cache
    does not (one question about this very file asked just before, then the cache cleared:
    an evicted cache, a copy of a file asked about before), which makes the run wait for the
    file's sha256 before the model's first turn.

Medians of --repeats runs (the file and the page cache are warm for every
contender). Usage:

    python bench/first_answer_bench.py [--size-mb 1024] [--repeats 3] [--dir /tmp] [--shapes access,syslog,csv] [--warm] [--seasoned] [--remembered]
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
from openai_stub import OpenAIStub  # noqa: E402  (tests/openai_stub.py: the OpenAI API on 127.0.0.1)

_ACCESS_RE = r'^(\S+) (\S+) (\S+) \[([^\]]+)\] "(\S*) ?(\S*) ?(\S*)" (\d{3}) (\S+)(?: "([^"]*)" "(.*)")?'
_SYSLOG_RE = r"^(\w{3} +\d+ \d\d:\d\d:\d\d) (\S+) ([^:\[ ]+)(?:\[(\d+)\])?: (.*)$"


def _one_column(path: Path) -> str:
    p = str(path).replace("'", "''")
    return (
        f"read_csv('{p}', columns={{'line': 'VARCHAR'}}, header=false, delim='\\x1f', quote='', "
        "escape='', auto_detect=false, new_line='\\n', strict_mode=false)"
    )


def _regex_table(path: Path, regex: str, names: list[str]) -> str:
    groups = "[" + ", ".join(f"'{n}'" for n in names) + "]"
    return (
        f"CREATE TABLE t AS SELECT line, m.* FROM (SELECT line, "
        f"regexp_extract(line, '{regex.replace(chr(39), chr(39) * 2)}', {groups}) AS m FROM {_one_column(path)})"
    )


# shape: (builder, awk program, DuckDB's own parse, the sql() count the model runs)
SHAPES: dict[str, tuple[Callable[[Path, int], int], list[str], Callable[[Path], str], str]] = {
    "access": (
        bigfiles.apache_log,
        ["awk", "{c[$9]++} END {for (k in c) n++; print n}"],
        lambda p: _regex_table(
            p,
            _ACCESS_RE,
            [
                "ip",
                "ident",
                "user",
                "ts",
                "method",
                "path",
                "protocol",
                "status",
                "bytes",
                "referrer",
                "agent",
            ],
        ),
        "SELECT count(*) AS n FROM log WHERE status = 404",
    ),
    "syslog": (
        bigfiles.syslog,
        ["awk", "{c[$5]++} END {for (k in c) n++; print n}"],
        lambda p: _regex_table(p, _SYSLOG_RE, ["ts", "host", "program", "pid", "message"]),
        "SELECT count(*) AS n FROM log",
    ),
    "csv": (
        bigfiles.csv_rows,
        ["awk", "-F,", "{c[$1]++} END {for (k in c) n++; print n}"],
        lambda p: f"CREATE TABLE t AS SELECT * FROM read_csv('{p}')",
        "SELECT count(*) AS n FROM log",
    ),
}


def _wall(cmd: list[str], **kw: object) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t0


def _duckdb_alone(path: Path, create: str, work: Path) -> float:
    db = work / "alone.duckdb"
    db.unlink(missing_ok=True)
    code = f"import duckdb; con = duckdb.connect({str(db)!r}); con.execute({create(path)!r}); con.close()"  # type: ignore[operator]
    took = _wall([sys.executable, "-c", code])
    db.unlink(missing_ok=True)
    return took


def _env(work: Path, cache: Path, warm: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(
        {
            "RLM_CACHE_DIR": str(cache),
            "XDG_CONFIG_HOME": str(work / ".config"),
            "XDG_DATA_HOME": str(work / ".data"),
            "OPENAI_API_KEY": "bench",
            # No warm process unless one is asked for: a folder of its own, empty otherwise, and
            # none started by a run (the cold arm would be served by it from its second run).
            "RLM_WARM_DIR": str(warm or work / "no-warm"),
            "RLM_WARM_AUTO": "0",
        }
    )
    return env


def _ask(path: Path, query: str, work: Path, cache: Path, warm: Path | None = None) -> tuple[float, float]:
    """One CLI question: (its whole wall time, seconds from its start to the model's first request)."""
    cell = f'```python\nprint(sql("{query}"))\n```'
    replies = [cell, 'FINAL("see the count")', "the count is in F1 [F1]"]
    env = _env(work, cache, warm)
    with OpenAIStub(replies) as stub:
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "rlm", "ask", str(path), "how many", "-m", "openai/stub",
             "--api-base", stub.api_base, "-q", "--trace-dir", str(work / "traces")],
            cwd=work, env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        took = time.monotonic() - t0
        if proc.returncode != 0 or not stub.requests:
            raise SystemExit(f"rlm ask failed ({proc.returncode}): {proc.stderr[-2000:]}")
        first = stub.requests[0]["at"] - t0
    shutil.rmtree(work / "traces", ignore_errors=True)
    return took, first


def _remember_another_file(work: Path, cache: Path) -> None:
    """One question about the repository's access log, its answer citing its count: memory then
    holds a finding about another file, as a user's who has asked anything before does."""
    _ask(ROOT / "fixtures" / "access.log", "SELECT count(*) FROM log WHERE status = 404", work, cache)
    if not list((work / ".data").rglob("memory.sqlite3")):
        raise SystemExit("the seeding question left no memory")


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the files are built (default: a temp folder)")
    ap.add_argument("--shapes", default="access,syslog,csv")
    ap.add_argument("--keep", action="store_true", help="keep the built files")
    ap.add_argument(
        "--warm", action="store_true", help="also ask with a warm process running (`rlm warm start`)"
    )
    ap.add_argument(
        "--seasoned",
        action="store_true",
        help="ask as a user who has used rlm before: memory holds a finding about another file",
    )
    ap.add_argument(
        "--remembered",
        action="store_true",
        help="ask of a file memory knows and the cache does not: one question about it first, then the cache cleared",
    )
    args = ap.parse_args()
    if args.dir is not None:  # a folder named for the files is made, as the help says
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rlm-first-", dir=args.dir))
    results = []
    try:
        for shape in args.shapes.split(","):
            build, awk, create, query = SHAPES[shape]
            path = root / f"{shape}.{'csv' if shape == 'csv' else 'log'}"
            if not path.exists():
                build(path, args.size_mb << 20)
            work = root / f"work-{shape}"
            work.mkdir(exist_ok=True)
            _wall(["cat", str(path)])  # the page cache warm for every contender
            arms = ("awk", "duckdb", "first", "first_request", "second")
            arms += ("warm_first", "warm_first_request", "warm_second") if args.warm else ()
            row: dict[str, list[float]] = {k: [] for k in arms}
            warm = work / "warm"
            if args.warm:
                rlm = [sys.executable, "-m", "rlm", "warm"]
                subprocess.run([*rlm, "start"], env=_env(work, work / "cache", warm), check=True)
            for _ in range(args.repeats):
                row["awk"].append(_wall([*awk, str(path)]))
                row["duckdb"].append(_duckdb_alone(path, create, work))  # type: ignore[arg-type]
                cache = work / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(work / ".data", ignore_errors=True)  # no memory of the file either
                if args.seasoned:
                    _remember_another_file(work, cache)
                if args.remembered:
                    _ask(path, query, work, cache)
                    shutil.rmtree(cache)
                took, first = _ask(path, query, work, cache)
                row["first"].append(took)
                row["first_request"].append(first)
                row["second"].append(_ask(path, query, work, cache)[0])
                if args.warm:
                    shutil.rmtree(cache, ignore_errors=True)
                    shutil.rmtree(work / ".data", ignore_errors=True)
                    if args.seasoned:
                        _remember_another_file(work, cache)
                    took, first = _ask(path, query, work, cache, warm)
                    row["warm_first"].append(took)
                    row["warm_first_request"].append(first)
                    row["warm_second"].append(_ask(path, query, work, cache, warm)[0])
            if args.warm:
                # One that ended on its own (idle, or the code changed under it) has nothing to stop.
                subprocess.run([*rlm, "stop"], env=_env(work, work / "cache", warm), check=False)
            med = {k: _median(v) for k, v in row.items()}
            results.append(
                {
                    "shape": shape,
                    "bytes": path.stat().st_size,
                    **{f"{k}_s": round(v, 2) for k, v in med.items()},
                    "first_x_duckdb": round(med["first"] / med["duckdb"], 2),
                    "runs": {k: [round(x, 2) for x in v] for k, v in row.items()},
                }
            )
            print(json.dumps(results[-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| input | MB | awk s | DuckDB alone s | first question s (x DuckDB) | first request s | second question s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['shape']} | {r['bytes'] / 1e6:,.0f} | {r['awk_s']} | {r['duckdb_s']} | "
            f"{r['first_s']} ({r['first_x_duckdb']}x) | {r['first_request_s']} | {r['second_s']} |"
        )
    if args.warm:
        print()
        print(
            "| input, a warm process running | first question s (x DuckDB) | first request s | second question s |"
        )
        print("|---|---|---|---|")
        for r in results:
            print(
                f"| {r['shape']} | {r['warm_first_s']} ({r['warm_first_s'] / r['duckdb_s']:.2f}x) | "
                f"{r['warm_first_request_s']} | {r['warm_second_s']} |"
            )


if __name__ == "__main__":
    main()
