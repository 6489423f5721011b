"""`rlm stats`, through the CLI on the real fixtures: every number it prints is computed here
again from the file with Python (lines, bytes, the earliest and latest timestamps, the rows
per time bucket, the error rows by status or level, the most common masked templates); a
directory, several files, a quoted glob and a compressed part are summed up part by part; a
missing input is one line and exit 3; escape sequences in a file or its name never reach
stdout raw; and the command never imports litellm."""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conftest import DATA, FIXTURES, cli_env, run_cli, script_log, write_script

APACHE = DATA / "elastic" / "apache_logs"  # 10,000 lines, 3 of them status 5xx
HADOOP = DATA / "loghub" / "Hadoop_2k.log"  # log4j, CRLF line ends, ERROR lines among them

# The masks the README states, in its order, written here again from its words.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", re.ASCII)
_HEX = re.compile(
    r"\b(?:0x[0-9a-f]+|[0-9a-f]*(?:[0-9][a-f]|[a-f][0-9])[0-9a-f]*)\b", re.ASCII | re.IGNORECASE
)
_DIGITS = re.compile(r"\d+", re.ASCII)


def _mask(text: str) -> str:
    text = _UUID.sub("<UUID>", text[:300])
    text = _IPV4.sub("<IP>", text)
    text = _HEX.sub("<HEX>", text)
    return _DIGITS.sub("<N>", text)


def _top(templates: Iterable[tuple[int, str]], n: int = 10) -> list[tuple[str, int, int]]:
    """(template, count, first line) of the n most common, ties by first line."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for number, template in templates:
        counts[template] += 1
        first.setdefault(template, number)
    ranked = sorted(counts, key=lambda t: (-counts[t], first[t]))
    return [(t, counts[t], first[t]) for t in ranked[:n]]


def _lines(path: Path) -> list[str]:
    """The file's lines as rlm counts them: split at '\\n', a final line without one counted."""
    data = path.read_bytes()
    text = data.decode("utf-8")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _stats_json(args: list[str], cwd: Path) -> dict[str, Any]:
    proc = run_cli(["stats", *args, "--json"], cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "rlm-stats/1"
    return doc


def _bucketed(
    moments: list[datetime], flags: list[bool], histogram: dict[str, Any]
) -> tuple[list[int], list[int]]:
    """Rows and flagged rows per bucket of `histogram`, counted here from the moments."""
    width = histogram["bucket_s"]
    start = datetime.fromisoformat(histogram["start"])
    # the first bucket starts at a whole bucket (of the epoch), at or before the earliest moment
    assert (start - datetime(1970, 1, 1, tzinfo=start.tzinfo)).total_seconds() % width == 0
    assert start <= min(moments) < start + timedelta(seconds=width)
    rows = [0] * len(histogram["counts"])
    flagged = [0] * len(rows)
    for moment, flag in zip(moments, flags, strict=True):
        b = int((moment - start).total_seconds() // width)
        rows[b] += 1
        flagged[b] += flag
    return rows, flagged


ACCESS = re.compile(r'^\S+ \S+ \S+ \[([^\]]+)\] "(\S+) (\S+) [^"]*" (\d{3}) ')


def test_an_access_log_in_numbers(tmp_path: Path) -> None:
    doc = _stats_json([str(APACHE)], tmp_path)
    lines = _lines(APACHE)
    parsed = [ACCESS.match(line) for line in lines]
    assert all(parsed)
    moments = [datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S %z") for m in parsed if m]
    errors = [int(m.group(4)) >= 500 for m in parsed if m]

    assert doc["lines"] == len(lines) == 10_000
    assert doc["bytes"] == doc["text_bytes"] == APACHE.stat().st_size
    assert (doc["format"], doc["table"]["format"]) == ("apache-access", "apache-combined")
    assert [(p["name"], p["lines"], p["format"]) for p in doc["parts"]] == [
        (str(APACHE), 10_000, "apache-access")
    ]
    time = doc["time"]
    assert time["column"] == "ts" and time["utc"] is True
    assert time["first"] == min(moments).astimezone(UTC).isoformat()
    assert time["last"] == max(moments).astimezone(UTC).isoformat()
    assert time["span_s"] == (max(moments) - min(moments)).total_seconds()

    histogram = doc["histogram"]
    assert 20 <= len(histogram["counts"]) <= 60
    assert sum(histogram["counts"]) == histogram["total"] == len(lines)
    rows, flagged = _bucketed(moments, errors, histogram)
    assert histogram["counts"] == rows
    assert doc["errors"]["rule"] == "status >= 500"
    assert doc["errors"]["rows"] == sum(errors) == 3
    assert doc["errors"]["counts"] == flagged

    # A request's template: method and path masked, its status as it is.
    mine = _top(
        (n, f"{_mask(m.group(2) + ' ' + m.group(3))} {m.group(4)}") for n, m in enumerate(parsed, 1) if m
    )
    theirs = [(t["template"], t["count"], t["first_line"]) for t in doc["templates"]["top"]]
    assert theirs == mine
    favicon = re.compile(r'"GET /favicon\.ico [^"]*" 200 ')
    assert theirs[0][:2] == ("GET /favicon.ico 200", sum(1 for x in lines if favicon.search(x)))


# The levels the README calls errors.
ERROR_LEVELS = ("ERROR", "ERR", "FATAL", "CRITICAL", "CRIT", "SEVERE", "EMERG", "EMERGENCY", "ALERT", "PANIC")
HADOOP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ([A-Z]+) \[([^\]]*)\] ([^:\s]+): (.*)$")


def test_a_log4j_log_counts_its_error_level_and_message_templates(tmp_path: Path) -> None:
    doc = _stats_json([str(HADOOP), "--top", "5"], tmp_path)
    lines = _lines(HADOOP)
    parsed = [HADOOP_LINE.match(line) for line in lines]
    moments = [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") for m in parsed if m]
    levels = [m.group(2) for m in parsed if m]

    assert doc["lines"] == len(lines) == 2_000
    assert doc["table"]["format"] == "log4j-hadoop"
    time = doc["time"]
    assert time["utc"] is False  # a local time as written: no zone added
    assert (time["first"], time["last"]) == (min(moments).isoformat(), max(moments).isoformat())
    assert sum(doc["histogram"]["counts"]) == len(moments) == time["rows_with_time"]
    error_rows = [level in ERROR_LEVELS for level in levels]
    assert doc["errors"]["column"] == "level"
    assert doc["errors"]["rows"] == sum(error_rows) > 100
    assert doc["errors"]["counts"] == _bucketed(moments, error_rows, doc["histogram"])[1]

    mine = _top(
        (
            (n, _mask(m.group(5) if m else line))
            for n, (m, line) in enumerate(zip(parsed, lines, strict=True), 1)
        ),
        5,
    )
    theirs = [(t["template"], t["count"], t["first_line"]) for t in doc["templates"]["top"]]
    assert theirs == mine
    assert doc["templates"]["distinct"] == len(
        {_mask(m.group(5) if m else x) for m, x in zip(parsed, lines, strict=True)}
    )


def test_the_text_shows_the_same_numbers_and_sparklines(tmp_path: Path) -> None:
    doc = _stats_json([str(APACHE)], tmp_path)
    proc = run_cli(["stats", str(APACHE)], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = proc.stdout
    assert "10,000 lines" in out and "apache-access" in out and "apache-combined" in out
    assert "2015-05-17 10:05:00 → 2015-05-20 21:05:59 UTC" in out
    sparks = re.findall(r"│([ ▁▂▃▄▅▆▇█]+)│", out)
    assert len(sparks) == 2  # the lines, then the error lines
    counts, errors = doc["histogram"]["counts"], doc["errors"]["counts"]
    for spark, per in ((sparks[0], counts), (sparks[1], errors)):
        # one character a bucket: none a space, else ▁ to █ by eighths of the tallest
        assert spark == "".join(" " if n == 0 else "▁▂▃▄▅▆▇█"[math.ceil(8 * n / max(per)) - 1] for n in per)
    assert "status >= 500: 3 of 10,000 rows" in out
    top = doc["templates"]["top"][0]
    assert re.search(
        rf"^ +{top['count']:,} +[\d.]+% +{top['first_line']:,}  GET /favicon\.ico 200$", out, re.M
    )


def _count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def test_a_directory_and_several_files_are_summed_up_part_by_part(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(FIXTURES / "access.log", folder / "access.log")
    shutil.copy(DATA / "iso3166" / "all.csv", folder / "countries.csv")
    auth = (FIXTURES / "auth.log").read_bytes()  # CRLF, no final newline
    (folder / "auth.log.gz").write_bytes(gzip.compress(auth))
    plain = {
        "access.log": (FIXTURES / "access.log").read_bytes(),
        "auth.log.gz": auth,
        "countries.csv": (DATA / "iso3166" / "all.csv").read_bytes(),
    }
    doc = _stats_json([str(folder)], tmp_path)
    names = ["access.log", "auth.log.gz", "countries.csv"]  # natural order of their paths
    assert [Path(p["name"]).name for p in doc["parts"]] == names
    assert [p["lines"] for p in doc["parts"]] == [_count(plain[n]) for n in names]
    assert [p["format"] for p in doc["parts"]] == ["apache-access", "syslog", "csv"]
    assert [p["compression"] for p in doc["parts"]] == [None, "gzip", None]
    assert [p["size"] for p in doc["parts"]] == [(folder / n).stat().st_size for n in names]
    assert doc["lines"] == sum(_count(d) for d in plain.values())
    assert doc["bytes"] == sum((folder / n).stat().st_size for n in names)
    # auth.log's last line is given the newline it lacks when the parts are joined
    assert doc["text_bytes"] == sum(len(d) for d in plain.values()) + 1
    ranges = [(p["first_line"], p["last_line"]) for p in doc["parts"]]
    assert ranges == [(1, 2000), (2001, 4000), (4001, 4000 + _count(plain["countries.csv"]))]

    # The same files named one by one and by a quoted glob, in the order given.
    doc = _stats_json([str(folder / "countries.csv"), str(folder / "a*.gz"), "--order", "given"], tmp_path)
    assert [Path(p["name"]).name for p in doc["parts"]] == ["countries.csv", "auth.log.gz"]
    assert doc["lines"] == _count(plain["countries.csv"]) + _count(auth)


def test_a_missing_input_is_one_line_and_exit_3(tmp_path: Path) -> None:
    proc = run_cli(["stats", "no-such.log"], cwd=tmp_path)
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.startswith("rlm: ") and proc.stderr.count("\n") == 1 and "no-such.log" in proc.stderr

    proc = run_cli(["stats", str(FIXTURES / "access.log"), "gone.log"], cwd=tmp_path)
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr == "rlm: gone.log: no such file\n"

    proc = run_cli(["stats", str(FIXTURES / "access.log"), "gone.log", "--skip-bad", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["skipped"] == [{"name": "gone.log", "why": "no such file"}] and doc["lines"] == 2000
    assert "skipped 1: gone.log (no such file)" in proc.stderr

    proc = run_cli(["stats", str(FIXTURES / "access.log"), "--order", "sideways"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("rlm: --order must be") and proc.stderr.count("\n") == 1


def test_escape_sequences_in_a_file_never_reach_stdout_raw(tmp_path: Path) -> None:
    evil = tmp_path / "evil\x1b]0;pwned\x07.log"
    rows = [
        f"2024-01-0{1 + i % 3} 10:00:0{i % 10} ERROR [main] app.Core: \x1b[2J\x1b]2;pwned\x07 job {i} \x9b31m failed\n"
        for i in range(30)
    ]
    evil.write_text("".join(rows), encoding="utf-8")
    proc = run_cli(["stats", str(evil)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x9b" not in proc.stdout and "\x07" not in proc.stdout
    # shown, as escapes: the name and the template
    assert "evil\\x1b]0;pwned\\x07.log" in proc.stdout
    assert re.search(
        r"^ +30 +100\.0% +1  \\x1b\[<N>J\\x1b\]<N>;pwned\\x07 job <N> \\x9b<N>m failed$", proc.stdout, re.M
    )
    assert "level is one of ERROR" in proc.stdout and ": 30 of 30 rows" in proc.stdout

    proc = run_cli(["stats", str(evil), "--json"], cwd=tmp_path)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert json.loads(proc.stdout)["templates"]["top"][0]["template"].startswith("\x1b[<N>J")


def test_stats_never_imports_litellm(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "rlm",
            "stats",
            str(FIXTURES / "access.log"),
            "--top",
            "1",
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "rlm.input.stats" in proc.stderr  # the import times are there, the summary's among them
    assert "litellm" not in proc.stderr


def test_the_first_turn_profile_carries_the_summary(tmp_path: Path, apache_log: Path) -> None:
    """What `rlm stats` says reaches the model's first prompt through `rlm ask`: the time span,
    the error rows and the top templates, recomputed here from the file."""
    script = {
        "log": "calls.jsonl",
        "replies": [
            {"tool": "peek", "args": {"start": 1}},
            {"tool": "final", "args": {"answer": "seen"}},
            '{"answer": "seen", "citations": ["F1"], "confidence": "low"}',
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(["ask", str(apache_log), "what is in it?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = "\n".join(
        str(m.get("content") or "") for m in script_log(tmp_path / "calls.jsonl")[0]["messages"]
    )
    summary = next(line for line in first.splitlines() if line.startswith("Summary (rlm stats): "))
    lines = apache_log.read_text().splitlines()
    stamps = sorted(datetime.strptime(x.split("[", 1)[1][:20], "%d/%b/%Y:%H:%M:%S") for x in lines)
    assert f"ts {stamps[0]} → {stamps[-1]} UTC" in summary
    errors = sum(1 for x in lines if x.split()[8] >= "500")
    assert f"{errors:,} error rows (status >= 500)" in summary
    favicon = sum(1 for x in lines if x.split()[5:7] == ['"GET', "/favicon.ico"] and x.split()[8] == "200")
    assert f"'GET /favicon.ico 200' {favicon:,}" in summary
