"""The time each line of a part was written, as `--since` / `--until` compare it.

A part's clock is chosen from its own first lines, as its table's format is (rlm.input.detect,
rlm.input.logformats): a recognised log format's `ts` is computed by the very SQL its table
runs, in DuckDB, a batch of lines a query, so a line is in the range exactly when the table's
`ts` of it is; JSON lines and CSV/TSV take the first field named like a time (`ts`,
`timestamp`, `time`, `*_at`, …) holding ISO 8601 text or epoch seconds/milliseconds. A line
with no time (a stack trace's continuation, a blank line, a CSV header) has None: it belongs
to the line before it (rlm.input.rangecopy).

Times are naive datetimes: UTC for a log whose times carry a zone (`zoned`), as written for
one whose times do not (rlm.input.timerange compares its bounds in the same frame).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rlm.input.detect import detect_format
from rlm.input.templates import column_key

__all__ = ["Clock", "clock_for", "time_name_rank"]

_TIME_NAMES = ("ts", "timestamp", "time", "datetime", "date", "t", "@timestamp")
_TIME_SUFFIXES = ("_ts", "_time", "_timestamp", "_datetime", "_date", "_at")
# Epoch numbers are taken for seconds from 1973 to 2286, milliseconds past that (to 2286).
_EPOCH_SECONDS = (1e8, 1e10)
_EPOCH_MILLIS = (1e11, 1e13)
_DATE_TEXT = re.compile(r"^\s*\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")


def time_name_rank(name: str) -> int:
    """0: a time's own name (`ts`, `timestamp`), 1: named like one (`created_at`), 2: neither."""
    key = column_key(name)
    if key in _TIME_NAMES or name.lower() in _TIME_NAMES:
        return 0
    return 1 if key.endswith(_TIME_SUFFIXES) or key.startswith("time") else 2


@dataclass
class Clock:
    """The times of a part's lines: `times(lines)` gives one naive datetime or None a line."""

    format: str  # the table format it reads (e.g. "apache-combined", "jsonl")
    zoned: bool  # its times are instants, given here in UTC
    read: Callable[[list[str]], list[datetime | None]] = field(repr=False)

    def times(self, lines: list[str]) -> list[datetime | None]:
        return self.read(lines) if lines else []


def clock_for(lines: Sequence[str], name: str, *, year: int) -> Clock | None:
    """The clock of a part whose first lines are `lines` (decoded, line ends kept or not);
    None when they hold no time rlm reads. `year`: what syslog times, which carry none, assume."""
    from rlm.input.logformats import recognize

    rows = [s.rstrip("\r\n") for s in lines]
    profile_format = detect_format(rows[:50], name, b"")
    fmt = recognize(profile_format, rows[:200], year=year)
    if fmt.kind == "lines":
        kind = dict(fmt.columns).get("ts")
        if kind is None:
            return None
        return Clock(fmt.name, kind == "TIMESTAMPTZ", _duckdb_reader(fmt.select))
    if fmt.kind == "jsonl":
        return _field_clock(fmt.name, rows, _json_fields, None)
    if fmt.kind == "csv" and rows:
        delimiter = fmt.delimiter or _csv_delimiter(rows[0])
        header = next(csv.reader([rows[0]], delimiter=delimiter), [])
        return _field_clock(fmt.name, rows, _csv_fields(header, delimiter), header)
    return None


# --------------------------------------------------------------------------- log formats (DuckDB)


def _duckdb_reader(select: str) -> Callable[[list[str]], list[datetime | None]]:
    """A batch of lines through the table's own SQL: its `ts` as a naive datetime (UTC for a
    TIMESTAMPTZ, as the table's UTC session shows it). One query a batch: a query's planning
    costs ~8 ms, so callers ask for many lines at once."""
    import duckdb

    from rlm.text.tabledb import settle_connection

    con = duckdb.connect(":memory:")
    settle_connection(con, duckdb.Error)
    query = (
        "WITH src AS (SELECT unnest(range(1, len($1::VARCHAR[]) + 1)) AS line_no, "
        "unnest($1::VARCHAR[]) AS line) "
        f"SELECT CAST(ts AS TIMESTAMP) FROM ({select}) ORDER BY line_no"
    )

    def read(lines: list[str]) -> list[datetime | None]:
        return [row[0] for row in con.execute(query, [lines]).fetchall()]

    return read


# --------------------------------------------------------------------------- JSON lines, CSV


def _json_fields(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested past what the parser follows
        return None
    return value if isinstance(value, dict) else None


def _csv_delimiter(header: str) -> str:
    return max((",", "\t", ";", "|"), key=header.count)


def _csv_fields(header: list[str], delimiter: str) -> Callable[[str], dict[str, Any] | None]:
    def fields(line: str) -> dict[str, Any] | None:
        row = next(csv.reader([line], delimiter=delimiter), None)
        if not row or row == header:
            return None  # the header (a part's first line, or one repeated) has no time
        return dict(zip(header, row, strict=False))

    return fields


def _field_clock(
    fmt: str, rows: list[str], fields: Callable[[str], dict[str, Any] | None], header: list[str] | None
) -> Clock | None:
    """A clock reading the first field, named like a time, whose values in `rows` are times."""
    samples = [f for f in (fields(r) for r in rows[:200] if r.strip()) if f]
    names = list(header) if header is not None else list(dict.fromkeys(k for f in samples for k in f))
    # A field named like a time first; then any whose values are all dates written as text
    # (an epoch number is taken only from a field named like a time: any count could pass).
    for name in sorted(names, key=time_name_rank):
        values = [f.get(name) for f in samples if f.get(name) not in (None, "")]
        if time_name_rank(name) == 2 and not all(isinstance(v, str) and _DATE_TEXT.match(v) for v in values):
            continue
        parsed = [_as_time(v) for v in values]
        if parsed and all(p is not None for p in parsed):
            zoned = parsed[0][1]  # type: ignore[index]

            def read(lines: list[str], name: str = name) -> list[datetime | None]:
                out: list[datetime | None] = []
                for line in lines:
                    f = fields(line)
                    t = _as_time(f.get(name)) if f else None
                    out.append(t[0] if t else None)
                return out

            return Clock(fmt, zoned, read)
    return None


def _as_time(value: Any) -> tuple[datetime, bool] | None:
    """(naive datetime, whether it carried a zone) of an ISO 8601 text or an epoch number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            try:
                t = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return None
            if t.tzinfo is None:
                return t, False
            return t.astimezone(UTC).replace(tzinfo=None), True
        value = number
    if isinstance(value, int | float):
        for (lo, hi), scale in ((_EPOCH_SECONDS, 1.0), (_EPOCH_MILLIS, 1000.0)):
            if lo <= value < hi:
                return datetime.fromtimestamp(value / scale, UTC).replace(tzinfo=None), True
    return None
