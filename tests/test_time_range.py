"""--since / --until over real logs: the lines kept are exactly those awk finds in the range over the
plain file, whatever the parts (rotated, gzip, bzip2, zstd), their order (a shuffled file is read
line by line) or their format (an access log, syslog without a year, JSON lines with epoch
milliseconds, a CSV whose header stays); a part wholly outside the range is not read (a damaged
one passes); a big plain part is entered by binary search (not hashed whole) and its lines keep
their own numbers. Through the CLI: sql() counts the range, grep names each part's own line,
`replay --verify` re-reads the same lines, bad values exit 2 in one line."""

from __future__ import annotations

import bz2
import gzip
import json
import random
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import zstandard
from conftest import latest_trace, run_cli, write_script

from rlm.errors import InputError, UsageError
from rlm.input.parts import open_inputs
from rlm.input.timerange import TimeRange, parse_range

# awk's key for an access log line: [17/May/2015:10:05:03 -> 20150517100503 (the log is in +0000).
AWK_ACCESS_KEY = (
    'split($4, a, /[\\[\\/:]/); m = index("JanFebMarAprMayJunJulAugSepOctNovDec", a[3]); '
    'k = sprintf("%s%02d%s%s%s%s", a[4], (m + 2) / 3, a[2], a[5], a[6], a[7]);'
)


def awk_numbers(path: Path, key: str, lo: str, hi: str) -> list[int]:
    """The numbers of the lines of `path` whose awk `key` is within [lo, hi]."""
    prog = f"{{ {key} if (k >= lo && k <= hi) print NR }}"
    out = subprocess.run(
        ["awk", "-v", f"lo={lo}", "-v", f"hi={hi}", prog, str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(x) for x in out.split()]


def kept_numbers(records: list[dict]) -> list[tuple[str, int]]:
    """(part name, its own line number) of every line the view holds, from the parts' runs."""
    return [(r["name"], first + i) for r in records for first, count in r["runs"] for i in range(count)]


def view_lines(source) -> list[bytes]:
    return split_lines(Path(source.profile.path).read_bytes())


def split_lines(data: bytes) -> list[bytes]:
    """Lines as the line index counts them: at '\n' only (a lone '\r' is a byte of its line)."""
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


def rng(since: str | None, until: str | None) -> TimeRange:
    made = parse_range(since, until)
    assert made is not None
    return made


@pytest.fixture
def rotated(tmp_path: Path, apache_log: Path) -> tuple[list[Path], Path]:
    """apache_logs (10,000 lines over four days) as a rotated set: gzip, bzip2, zstd and plain."""
    lines = apache_log.read_bytes().splitlines(keepends=True)
    d = tmp_path / "logs"
    d.mkdir()
    cuts = [0, 2500, 5000, 7500, 10000]
    chunks = [b"".join(lines[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    files = [d / "web.log.3.gz", d / "web.log.2.bz2", d / "web.log.1.zst", d / "web.log"]
    files[0].write_bytes(gzip.compress(chunks[0]))
    files[1].write_bytes(bz2.compress(chunks[1]))
    files[2].write_bytes(zstandard.ZstdCompressor().compress(chunks[2]))
    files[3].write_bytes(chunks[3])
    return files, apache_log


@pytest.mark.parametrize(
    ("since", "until", "lo", "hi"),
    [
        ("2015-05-18 06:00", "2015-05-18T09:30:00Z", "20150518060000", "20150518093000"),  # inside one part
        ("2015-05-18 20:00", "2015-05-19 04:00:00+00:00", "20150518200000", "20150519040000"),  # across two
        ("2015-05-20 12:00", None, "20150520120000", "99999999999999"),  # to the end
        (None, "2015-05-17 11:00", "0", "20150517110000"),  # from the start
    ],
)
def test_a_rotated_compressed_set_keeps_exactly_the_lines_awk_finds(
    tmp_path: Path, rotated: tuple[list[Path], Path], since: str | None, until: str | None, lo: str, hi: str
) -> None:
    files, plain = rotated
    expected = awk_numbers(plain, AWK_ACCESS_KEY, lo, hi)
    with open_inputs(
        [str(f) for f in files], cache_dir=str(tmp_path / "c"), time_range=rng(since, until)
    ) as src:
        records = src.profile.parts
        assert src.profile.lines == len(expected)
        assert src.profile.table is not None and src.profile.table["rows"] == len(
            expected
        )  # what sql() counts
        plain_lines = plain.read_bytes().splitlines()
        assert view_lines(src) == [plain_lines[n - 1] for n in expected]
        # Each kept line is named by its part and its own number there (2,500 lines a part).
        names = [f.name for f in files]
        assert [(Path(n).name, k) for n, k in kept_numbers(records)] == [
            (names[(n - 1) // 2500], (n - 1) % 2500 + 1) for n in expected
        ]
        read = {Path(r["name"]).name for r in records}
        left = {Path(x["name"]).name for x in src.profile.time_range["left_out"]}
        assert read | left == set(names) and not read & left
        assert f"{len(expected):,} lines in range" in src.profile.time_range["said"]


def test_a_part_wholly_outside_the_range_is_not_read(
    tmp_path: Path, rotated: tuple[list[Path], Path]
) -> None:
    files, plain = rotated
    # The oldest part cut short after its first megabyte: damaged, but its first lines are whole.
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="web.log.3.gz is not a whole gzip file"):
        open_inputs([str(f) for f in files], cache_dir=str(tmp_path / "c")).close()
    expected = awk_numbers(plain, AWK_ACCESS_KEY, "20150519000000", "20150519120000")
    with open_inputs(
        [str(f) for f in files],
        cache_dir=str(tmp_path / "c"),
        time_range=rng("2015-05-19", "2015-05-19 12:00"),
    ) as src:
        assert src.profile.lines == len(expected)
        why = {Path(x["name"]).name: x["why"] for x in src.profile.time_range["left_out"]}
        assert why["web.log.3.gz"].startswith("not read: its times end by 2015-05-1")


def test_a_file_out_of_time_order_is_read_line_by_line(tmp_path: Path, apache_log: Path) -> None:
    lines = apache_log.read_bytes().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    shuffled = tmp_path / "shuffled.log"
    shuffled.write_bytes(b"".join(lines))
    expected = awk_numbers(shuffled, AWK_ACCESS_KEY, "20150518060000", "20150518093000")
    with open_inputs(
        [str(shuffled)], cache_dir=str(tmp_path / "c"), time_range=rng("2015-05-18 06:00", "2015-05-18 09:30")
    ) as src:
        (record,) = src.profile.parts
        assert record["ordered"] is False
        assert [k for _, k in kept_numbers([record])] == expected
        assert "times out of order" in src.profile.time_range["said"]


def test_a_big_plain_file_is_entered_by_binary_search_and_keeps_its_line_numbers(
    tmp_path: Path, apache_log: Path
) -> None:
    """Eight copies of the log, each moved a week on: 19 MB, so the bytes before the range
    (over two slabs) are skipped, counted, not read."""
    text = apache_log.read_text()
    big = tmp_path / "big.log"
    with big.open("w") as out:
        for week in range(8):
            out.write(_moved(text, week))
    assert big.stat().st_size > 18 << 20
    expected = awk_numbers(big, AWK_ACCESS_KEY, "20150629000000", "20150629060000")
    assert len(expected) > 500
    with open_inputs(
        [str(big)], cache_dir=str(tmp_path / "c"), time_range=rng("2015-06-29", "2015-06-29 06:00")
    ) as src:
        (record,) = src.profile.parts
        assert record["ordered"] is True
        assert [k for _, k in kept_numbers([record])] == expected
        assert record["sha256"] == ""  # read in part: never hashed whole
        all_lines = big.read_bytes().splitlines()
        assert view_lines(src) == [all_lines[n - 1] for n in expected]


def _moved(text: str, week: int) -> str:
    """The log with every day moved on `week` weeks (17-20 May 2015 + 7 * week days)."""
    out = []
    for day in (17, 18, 19, 20):
        new = datetime(2015, 5, day) + (datetime(2015, 5, 8) - datetime(2015, 5, 1)) * week
        out.append((f"[{day}/May/2015:", new.strftime("[%d/%b/%Y:")))
    for old, new in out:
        text = text.replace(old, new)
    return text


def test_syslog_without_a_year_and_json_lines_with_epoch_milliseconds(
    tmp_path: Path, real_data: Path
) -> None:
    auth = real_data / "loghub" / "OpenSSH_2k.log"
    year = time.gmtime().tm_year  # syslog lines carry none: the view's table assumes this one
    key = (
        'm = index("JanFebMarAprMayJunJulAugSepOctNovDec", $1); '
        'k = sprintf("%02d%02d%s", (m + 2) / 3, $2, $3);'
    )
    expected = awk_numbers(auth, key, "1210090000", "1210100000")
    assert 100 < len(expected) < 2000
    with open_inputs(
        [str(auth)],
        cache_dir=str(tmp_path / "c"),
        time_range=rng(f"{year}-12-10 09:00", f"{year}-12-10 10:00"),
    ) as src:
        assert [k for _, k in kept_numbers(src.profile.parts)] == expected

    nginx = real_data / "elastic" / "nginxplus_json_logs"
    stamps = [json.loads(line)["timestamp"] for line in nginx.read_text().splitlines()]
    lo, hi = sorted(stamps)[len(stamps) // 3], sorted(stamps)[2 * len(stamps) // 3]
    iso = [datetime.fromtimestamp(t / 1000, UTC).isoformat() for t in (lo, hi)]
    expected = [i for i, t in enumerate(stamps, 1) if lo <= t <= hi]
    with open_inputs([str(nginx)], cache_dir=str(tmp_path / "c"), time_range=rng(*iso)) as src:
        assert [k for _, k in kept_numbers(src.profile.parts)] == expected


def test_a_csv_keeps_its_header_and_counts_only_rows_in_range(tmp_path: Path, apache_log: Path) -> None:
    rows = ["when,ip,status"]
    for line in apache_log.read_text().splitlines():
        stamp = datetime.strptime(line.split("[", 1)[1][:20], "%d/%b/%Y:%H:%M:%S")
        rows.append(f"{stamp.isoformat()},{line.split()[0]},{line.split()[8]}")
    csv_path = tmp_path / "hits.csv"
    csv_path.write_text("\n".join(rows) + "\n")
    expected = [
        i
        for i, r in enumerate(rows[1:], 2)
        if "2015-05-19T00:00:00" <= r.split(",")[0] <= "2015-05-19T05:00:00"
    ]
    with open_inputs(
        [str(csv_path)], cache_dir=str(tmp_path / "c"), time_range=rng("2015-05-19", "2015-05-19 05:00")
    ) as src:
        assert [k for _, k in kept_numbers(src.profile.parts)] == [1, *expected]
        assert src.profile.table is not None and src.profile.table["rows"] == len(expected)
        assert view_lines(src)[0] == b"when,ip,status"


def test_bounds_are_read_as_users_write_them() -> None:
    now = datetime(2026, 11, 25, 15, 30, tzinfo=UTC)
    r = parse_range("2h", "now", now=now)
    assert r is not None and r.since == datetime(2026, 11, 25, 13, 30, tzinfo=UTC) and r.until == now
    assert r.bounds_for(True) == (datetime(2026, 11, 25, 13, 30), datetime(2026, 11, 25, 15, 30))
    r = parse_range("90m ago", "2026-11-25 15:00", now=now)
    assert r is not None and r.since == datetime(2026, 11, 25, 14, 0, tzinfo=UTC)
    assert r.until == datetime(2026, 11, 25, 15, 0)  # no zone: the log's own clock
    assert TimeRange.from_dict(r.to_dict()) == r
    for bad in ("yesterdayish", "14h05", "2026-13-01"):
        with pytest.raises(UsageError, match="--since"):
            parse_range(bad, None, now=now)
    with pytest.raises(UsageError, match="is after --until"):
        parse_range("2026-11-25 16:00Z", "2026-11-25 15:00Z", now=now)


def test_the_cli_counts_the_range_names_each_part_and_verifies(
    tmp_path: Path, rotated: tuple[list[Path], Path]
) -> None:
    files, plain = rotated
    expected = awk_numbers(plain, AWK_ACCESS_KEY, "20150518200000", "20150519040000")
    not_found = [n for n in expected if '" 404 ' in plain.read_text().splitlines()[n - 1]]
    script = write_script(
        tmp_path / "s.json",
        [
            {
                "tool": "execute",
                "args": {"code": 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'},
            },
            {"tool": "grep", "args": {"pattern": '" 404 '}},
            {"tool": "final", "args": {"answer": "done"}},
            json.dumps({"answer": "done", "citations": ["F1"]}),
        ],
    )
    args = [str(f) for f in files]
    proc = run_cli(
        [
            "ask",
            *args,
            "how many 404s?",
            "-m",
            script,
            "--since",
            "2015-05-18 20:00",
            "--until",
            "2015-05-19 04:00",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{len(expected):,} lines in range" in proc.stderr
    trace = latest_trace(tmp_path)
    first, second = (s["observation"]["preview"] for s in trace["steps"][:2])
    assert first.strip() == str(len(not_found))
    # grep names the part and its own line number of each file's first match.
    own = {n: ("web.log.2.bz2" if n <= 5000 else "web.log.1.zst", (n - 1) % 2500 + 1) for n in not_found}
    for name, number in {own[n] for n in not_found[:1]}:
        assert f"{name}:{number:,} ──" in second
    assert trace["settings"]["since"] == "2015-05-18T20:00:00"
    verify = run_cli(["replay", "last", "--verify"], cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr + verify.stdout
    assert "All re-run steps match" in verify.stdout + verify.stderr

    bad = run_cli(["ask", *args, "q?", "-m", script, "--since", "last tuesday"], cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "--since 'last tuesday': not a time" in bad.stderr
    empty = run_cli(["ask", *args, "q?", "-m", script, "--since", "2016-01-01"], cwd=tmp_path)
    assert (
        empty.returncode == 3
        and "no line is in the time range (since 2016-01-01 00:00:00: 0 lines in range; 4 files with none"
        in empty.stderr
    )
    assert "Traceback" not in empty.stderr + bad.stderr


def test_an_object_is_placed_by_the_date_in_its_name_and_its_last_change() -> None:
    from rlm.input.objectprune import name_date, outside_range

    assert name_date("s3://b/2026/11/25/app-20261124.log.gz") == datetime(2026, 11, 24)
    assert name_date("s3://b/app/access.log-20261125.gz") == datetime(2026, 11, 25)
    assert name_date("s3://b/app/build-202611251.log") is None  # a run of digits, not a date
    assert name_date("s3://2026-11-25/app.log") is None  # the bucket's name says nothing
    day = rng("2026-11-25 10:00", "2026-11-25 11:00")
    assert outside_range("s3://b/app-2026-11-25.log.gz", 0, day) is None
    assert (
        outside_range("s3://b/app-2026-11-24.log.gz", 0, day) is None
    )  # dateext: the 24th's lines may run to the 25th
    assert outside_range("s3://b/app-2026-11-26.log.gz", 0, day) is None  # a zone ahead
    assert "before the range" in str(outside_range("s3://b/app-2026-11-23.log.gz", 0, day))
    assert outside_range("s3://b/app-2026-11-27.log.gz", 0, day) is None  # dateext and a zone behind
    assert "after the range" in str(outside_range("s3://b/app-2026-11-28.log.gz", 0, day))
    changed = int(datetime(2026, 11, 25, 0, 0, tzinfo=UTC).timestamp() * 1e9)
    zoned = rng("2026-11-25T10:00:00Z", None)
    assert "last changed 2026-11-25 00:00:00 UTC" in str(outside_range("s3://b/app.log", changed, zoned))
    # A bound on the log's own clock may be 14 hours off UTC: ten hours after the change, kept.
    assert outside_range("s3://b/app.log", changed, rng("2026-11-25 10:00", None)) is None
    assert "last changed" in str(outside_range("s3://b/app.log", changed, rng("2026-11-25 15:00", None)))
    assert outside_range("s3://b/app.log", changed, rng(None, "2026-11-25 15:00")) is None  # no --since
    assert outside_range("s3://b/app.log", 0, zoned) is None  # the change not known


def test_hostile_lines_are_data_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON line nested past the parser's depth is a line without a time; a line longer than
    rlm holds whole to place is one line naming the part, exit 3 (the limits made small here)."""
    lines = [json.dumps({"ts": f"2026-11-25T10:{m:02d}:00Z", "n": m}) for m in range(60)]
    lines.insert(30, "[" * 200_000 + "]" * 200_000)
    lines.insert(25, "a note\rwith a lone carriage return")
    deep = tmp_path / "deep.jsonl"
    deep.write_text("\n".join(lines) + "\n", newline="")
    with open_inputs(
        [str(deep)],
        cache_dir=str(tmp_path / "c"),
        time_range=rng("2026-11-25T10:20:00Z", "2026-11-25T10:40:00Z"),
    ) as src:
        kept = [k for _, k in kept_numbers(src.profile.parts)]
        assert view_lines(src) == [split_lines(deep.read_bytes())[n - 1] for n in kept]
    # the note (26) and the deep line (32) go with the lines before them; one line, not two, each
    assert kept == list(range(21, 43 + 1))

    import rlm.input.rangecopy as rangecopy

    monkeypatch.setattr(rangecopy, "SLAB", 64 << 10)
    monkeypatch.setattr(rangecopy, "LINE_MAX", 256 << 10)
    long = tmp_path / "long.jsonl"
    long.write_text("\n".join(lines[:10]) + "\n" + "x" * (1 << 20) + "\n" + "\n".join(lines[40:]) + "\n")
    with pytest.raises(
        InputError, match=r"long.jsonl: line 11 \(or one soon after\) is longer than 256.0 KB"
    ):
        open_inputs(
            [str(long)], cache_dir=str(tmp_path / "c"), time_range=rng("2026-11-25T10:00:00Z", None)
        ).close()


def test_a_file_replaced_after_it_was_listed_gives_none_of_its_bytes(tmp_path: Path) -> None:
    """Each read that copies a part's bytes opens it checked to be the file listed (device and
    inode): one renamed over it in between is one line, exit 3."""
    import os

    from rlm.input.rangecopy import copy_in_range
    from rlm.input.snapshot import open_same
    from rlm.input.timeclock import clock_for

    log = tmp_path / "app.log"
    log.write_text("2026-11-25 10:00:00,000 INFO main: started\n")
    listed = log.stat()
    swapped = tmp_path / "other.log"
    swapped.write_text("2026-11-25 10:00:01,000 INFO main: SECRET\n")
    os.replace(swapped, log)
    with pytest.raises(InputError, match="app.log was replaced while it was being read"):
        open_same(str(log), listed.st_dev, listed.st_ino, "app.log")
    clock = clock_for(log.read_text().splitlines(), "app.log", year=2026)
    assert clock is not None
    written: list[bytes] = []
    with pytest.raises(InputError, match="was replaced"):
        copy_in_range(
            str(log),
            None,
            "app.log",
            clock,
            (None, None),
            written.append,
            written.clear,
            identity=(listed.st_dev, listed.st_ino),
        )
    assert written == []
