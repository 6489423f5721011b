"""A rotated, gzip-compressed set of about 1 GB: first and second question against `zcat … | wc -l`,
and `--since` over the last hour against the full pass, all in the same run.

Builds an Apache log of --size-mb from the real lines (tests/bigfiles.py: time-ordered passes,
dates moved on four days a pass), cuts it into --parts members as logrotate names them
(`access.log`, plain, newest; `access.log.1.gz` … older, `gzip -6`), then times, each --repeats
times with the page cache hot:

  * the reference: `zcat access.log.*.gz | cat - access.log | wc -l`, a pass that only reads;
  * the first question: `rlm ask access.log*` through the CLI with a fresh cache (every
    member decompressed, joined, indexed, its table built) and a scripted model that runs one
    sql() count;
  * the second question: the same command again, the cache kept;
  * `--since` the last hour: the same first question, a fresh cache, restricted to the hour
    before the newest line (members wholly before it not read); its count is checked against
    the lines awk finds in that hour of the plain log.

Prints the medians, the ratios and one JSON line.

    python bench/rotated_bench.py [--size-mb 1024] [--parts 8] [--repeats 2] [--dir DIR]
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
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import bigfiles  # noqa: E402  (tests/bigfiles.py: the real-line file builders)
from compressed_bench import wall  # noqa: E402  (bench/compressed_bench.py: a command's wall time)

COUNT = 'print(sql("SELECT count(*) FROM log")[0][0])'


def ask(members: list[Path], work: Path, cache: Path, *extra: str) -> tuple[float, int]:
    """The whole CLI run's wall time, and the count its sql() printed (read from the trace)."""
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
    traces = work / "traces"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RLM_")},
        "RLM_CACHE_DIR": str(cache),
        "RLM_TRACE_DIR": str(traces),
        "XDG_DATA_HOME": str(work / "data"),
    }
    cmd = [
        sys.executable,
        "-m",
        "rlm",
        "ask",
        *map(str, members),
        "how many lines?",
        "-m",
        f"scripted/{script}",
    ]
    t, _ = wall([*cmd, "-q", *extra], env=env)
    newest = max(traces.glob("*.json"), key=lambda p: p.stat().st_mtime)
    counted = json.loads(newest.read_text())["steps"][0]["observation"]["preview"].strip()
    return t, int(counted)


def last_time(log: Path) -> datetime:
    with log.open("rb") as fh:
        fh.seek(max(0, log.stat().st_size - 65536))
        last = fh.read().splitlines()[-1].decode()
    return datetime.strptime(last.split("[", 1)[1][:20], "%d/%b/%Y:%H:%M:%S")


def lines_since(log: Path, since: datetime) -> int:
    """awk over the plain log: the lines whose time is at or after `since` (+0000 throughout)."""
    key = (
        'split($4, a, /[\\[\\/:]/); m = index("JanFebMarAprMayJunJulAugSepOctNovDec", a[3]); '
        'k = sprintf("%s%02d%s%s%s%s", a[4], (m + 2) / 3, a[2], a[5], a[6], a[7]);'
    )
    prog = f"{{ {key} if (k >= lo) n++ }} END {{ print n + 0 }}"
    out = subprocess.run(
        ["awk", "-v", f"lo={since.strftime('%Y%m%d%H%M%S')}", prog, str(log)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out)


def split_rotated(log: Path, parts: int, folder: Path) -> list[Path]:
    """`log` cut at line ends into `parts` members, oldest first: access.log.N.gz … .1.gz, access.log."""
    size = log.stat().st_size
    members = []
    with log.open("rb") as src:
        for i in range(parts):
            n = parts - 1 - i  # rotation number: the oldest has the highest
            name = folder / ("access.log" if n == 0 else f"access.log.{n}")
            with name.open("wb") as out:
                target = size * (i + 1) // parts
                while src.tell() < target and (line := src.readline()):
                    out.write(line)
            if n:
                subprocess.run(["gzip", "-6", str(name)], check=True)
                name = name.with_name(name.name + ".gz")
            members.append(name)
    return members


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the files are built (default: a temp dir)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rlm-rotated-bench-", dir=args.dir))
    try:
        log = work / "plain.log"
        bigfiles.apache_log(log, args.size_mb << 20)
        lines = int(subprocess.run(["wc", "-l", str(log)], capture_output=True, text=True).stdout.split()[0])
        since = last_time(log) - timedelta(hours=1)
        in_hour = lines_since(log, since)
        folder = work / "logs"
        folder.mkdir()
        members = split_rotated(log, args.parts, folder)
        log.unlink()
        packed = sum(m.stat().st_size for m in members)
        gz = " ".join(str(m) for m in members[:-1])
        reference, first, second, ranged = [], [], [], []
        for _ in range(args.repeats):
            t, out = wall(f"zcat {gz} | cat - {members[-1]} | wc -l", shell=True)
            assert int(out) == lines, (out, lines)
            reference.append(t)
            cache = work / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            t, counted = ask(members, work, cache)
            assert counted == lines, (counted, lines)
            first.append(t)
            t, counted = ask(members, work, cache)
            assert counted == lines, (counted, lines)
            second.append(t)
            shutil.rmtree(cache, ignore_errors=True)
            t, counted = ask(members, work, cache, "--since", since.isoformat(sep=" "))
            assert counted == in_hour, (counted, in_hour)
            ranged.append(t)
        ref = statistics.median(reference)
        full = statistics.median(first)
        rows = [
            ("first question", full, "zcat … | wc -l", ref),
            ("second question", statistics.median(second), "zcat … | wc -l", ref),
            ("--since last hour", statistics.median(ranged), "first question", full),
            ("--since last hour", statistics.median(ranged), "zcat … | wc -l", ref),
        ]
        print(
            f"{args.size_mb} MiB of text, {lines:,} lines, {len(members)} members "
            f"({packed / 2**20:.0f} MiB on disk), the last hour {in_hour:,} lines; median of {args.repeats}"
        )
        print(f"{'rlm':<18} {'median':>9}   {'reference':<16} {'median':>9}  ratio")
        for what, t, ref_name, r in rows:
            print(f"{what:<18} {t:>8.2f}s   {ref_name:<16} {r:>8.2f}s  {t / r:.2f}x")
        print(json.dumps({"size_mb": args.size_mb, "lines": lines, "members": len(members), "rows": rows}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
