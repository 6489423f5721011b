"""What an input holds, without any model (`rlm stats`): its parts, lines and bytes, the time it
spans, its rows (and error rows) per time bucket, and its most common message templates.

Computed with DuckDB over the input's table (rlm.input.tables), never a pass in Python; what
is summed up is chosen from the table's columns, whatever the format: the time from a column
of a time type, else one named like a time holding timestamps as text or epoch numbers; the
errors from a level column (ERROR, FATAL, ...), else an HTTP status column (500 or more); the
templates as rlm.input.templates makes them. `input_stats` returns one JSON-ready document
(its fields: rlm/cli/stats_cmd.py; the rules in words: the README, "rlm stats").
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rlm.input.compressed import name_without_suffix
from rlm.input.detect import detect_format
from rlm.input.source import PROFILE_LINE_BYTES, Profile
from rlm.input.templates import column_key, templates
from rlm.input.timeclock import time_name_rank
from rlm.text.sqltext import sql_name, sql_string
from rlm.text.tabledb import NO_EXTENSION_LOADING, first_line, settle_connection

__all__ = ["BUCKET_SECONDS", "MAX_BUCKETS", "SCHEMA", "StatsError", "bucket_name", "input_stats"]

SCHEMA = "rlm-stats/1"
TOP_TEMPLATES = 10
# The histogram has at most this many buckets: the narrowest of BUCKET_SECONDS that fits.
MAX_BUCKETS = 60
_DAY = 86_400
BUCKET_SECONDS = (
    *(1, 2, 5, 10, 15, 30),
    *(60, 120, 300, 600, 900, 1800),
    *(3600, 7200, 10800, 21600, 43200),
    *(_DAY, 2 * _DAY, 7 * _DAY, 14 * _DAY, 30 * _DAY, 91 * _DAY, 365 * _DAY),
)
# The memory the queries may use before DuckDB spills to a private temporary folder.
_MEMORY_MB = 512
_SAMPLE = 1000  # values a text or number column is tried on before it is taken for a time
_PART_SAMPLE = 50  # lines each part's format is recognized on (as the profile's)

_LEVEL_NAMES = ("level", "severity", "loglevel", "log_level", "levelname", "lvl", "severity_text")
_ERROR_LEVELS = tuple("ERROR ERR FATAL CRITICAL CRIT SEVERE EMERG EMERGENCY ALERT PANIC".split())
_STATUS_NAMES = ("status", "status_code", "statuscode", "http_status", "response_code", "response_status")
_NUMERIC = re.compile(r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|U\w*INT|FLOAT|DOUBLE|DECIMAL)")
# Epoch numbers by their size: (unit, microseconds per unit, lowest, highest): 1973 to 2286.
_EPOCHS = (
    ("seconds", 1_000_000, 1e8, 1e10),
    ("milliseconds", 1_000, 1e11, 1e13),
    ("microseconds", 1, 1e14, 1e16),
    ("nanoseconds", 0.001, 1e17, 1e19),
)


class StatsError(Exception):
    """The table could not be read; one line."""


def input_stats(profile: Profile, *, top: int = TOP_TEMPLATES) -> dict[str, Any]:
    """The summary of an opened input (rlm.input.parts.open_inputs): see the module's doc."""
    parts = _parts(profile)
    on_disk = sum(int(p["size"]) for p in parts)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "input": profile.display_name,
        "format": profile.format,
        "encoding": profile.encoding,
        "lines": profile.lines,
        "bytes": on_disk,
        "text_bytes": profile.plain_size or profile.size,
        "parts": parts,
        "skipped": list(profile.skipped),
        "time_range": profile.time_range,  # --since/--until: the bounds, the lines in range
        "table": None,
        "time": None,
        "histogram": None,
        "errors": None,
        "templates": None,
        "notes": [],
    }
    notes: list[str] = doc["notes"]
    table = profile.table
    if table is None or profile.table_path is None:
        why = profile.table_error or ("binary input" if profile.binary else "no table was built")
        notes.append(f"no table ({why}): no time span, histogram or templates")
        return doc
    columns = [(str(n), str(t)) for n, t in table["columns"]]
    doc["table"] = {
        "format": table["format"],
        "rows": int(table["rows"]),
        "parsed": int(table.get("parsed") or 0),
        "columns": [n for n, _ in columns],
    }
    if table.get("note"):
        doc["table"]["note"] = table["note"]
    try:
        with _connection(profile.table_path) as con:
            time = _time_column(con, columns)
            errors = _error_rule(con, columns)
            if time is None:
                notes.append("no time column in the table: no time span or histogram")
            else:
                doc["time"], doc["histogram"] = _time_and_histogram(con, time, errors)
                if doc["histogram"] is None:
                    notes.append(f"no row's {time.column} holds a time: no time span or histogram")
            if errors is None:
                notes.append("no level or HTTP status column in the table: no error count")
            else:
                doc["errors"] = _errors(con, errors, doc["histogram"])
            if top > 0:
                doc["templates"] = templates(con, columns, top, status=_status_column(columns))
    except StatsError as exc:  # what was found before it stays; the rest is said to be missing
        notes.append(str(exc))
    return doc


# --------------------------------------------------------------------------- parts


def _parts(profile: Profile) -> list[dict[str, Any]]:
    """Each part read: name, size on disk, plain size, compression, lines and their range in the
    whole, and its own format (recognized on its first lines, as the profile's is)."""
    if profile.parts is None:
        one: dict[str, Any] = {
            "name": profile.display_name,
            "size": profile.size,
            "compression": profile.compression,
        }
        ranged = [
            {
                **one,
                "plain_size": profile.plain_size or profile.size,
                "first_line": 1,
                "last_line": profile.lines,
            }
        ]
        formats: list[str | None] = [profile.format]
    else:
        ranged, formats = profile.parts, _part_formats(profile)
    return [
        {
            "name": p["name"],
            "size": int(p["size"]),
            "plain_size": int(p["plain_size"]),
            "compression": p.get("compression"),
            "lines": int(p["last_line"]) - int(p["first_line"]) + 1,
            "first_line": int(p["first_line"]),
            "last_line": int(p["last_line"]),
            "format": fmt,
        }
        for p, fmt in zip(ranged, formats, strict=True)
    ]


def _part_formats(profile: Profile) -> list[str | None]:
    """Each part's format from its own first lines; None where they cannot be read."""
    from rlm.text.textfile import MappedText

    parts = profile.parts or []
    if profile.binary or profile.index_path is None:
        return [None] * len(parts)
    found: list[str | None] = []
    try:
        with MappedText(profile.work_path, index_path=profile.index_path) as text:
            for p in parts:
                lo, hi = int(p["first_line"]) - 1, int(p["last_line"])
                sample = [
                    text.line_head(i, PROFILE_LINE_BYTES) for i in range(lo, min(hi, lo + _PART_SAMPLE))
                ]
                name = str(p["name"])
                named = name_without_suffix(name) if p.get("compression") else name
                found.append(detect_format(sample, named, b""))
    except (OSError, ValueError):
        return [None] * len(parts)
    return found


# --------------------------------------------------------------------------- the table


@contextlib.contextmanager
def _connection(table_path: str) -> Iterator[Any]:
    """The table read-only, timestamps in UTC, spilling past _MEMORY_MB to a private folder."""
    import duckdb

    with tempfile.TemporaryDirectory(prefix="rlm-stats-") as spill:
        try:
            con = duckdb.connect(
                table_path,
                read_only=True,
                config={
                    **NO_EXTENSION_LOADING,
                    "memory_limit": f"{_MEMORY_MB}MB",
                    "temp_directory": spill,
                },
            )
        except duckdb.Error as exc:
            raise StatsError(f"the table cannot be opened: {first_line(exc)}") from None
        try:
            settle_connection(con, duckdb.Error)
            yield con
        except (duckdb.Error, RuntimeError) as exc:
            # DuckDB answers a Ctrl-C that lands inside a query with an error of its own: the
            # user's stop, never a summary with a part missing.
            if "interrupted" in str(exc).lower():
                raise KeyboardInterrupt from None
            if not isinstance(exc, duckdb.Error):
                raise
            raise StatsError(f"a query over the table failed: {first_line(exc)}") from None
        finally:
            con.close()


@dataclass(frozen=True)
class _Time:
    column: str
    us: str  # SQL: the column as microseconds since 1970-01-01 (BIGINT)
    utc: bool  # an instant (a zone or an epoch number), shown in UTC; else a local time as written
    read_as: str  # how the column was read, in words


def _time_column(con: Any, columns: list[tuple[str, str]]) -> _Time | None:
    """The column the time is read from (see the module's doc), or None."""
    candidates = [(n, t.upper()) for n, t in columns if n not in ("line_no", "line")]

    named = time_name_rank  # 0: a time's own name, 1: named like one, 2: neither

    typed = [(n, t) for n, t in candidates if t.startswith("TIMESTAMP") or t == "DATE"]
    for n, t in sorted(typed, key=lambda c: named(c[0]) > 0):
        col = sql_name(n)
        if "TIME ZONE" in t or t == "TIMESTAMPTZ":
            return _Time(n, f"epoch_us({col})", True, "a time with its zone")
        return _Time(n, f"epoch_us(CAST({col} AS TIMESTAMP))", False, "a time as written")
    for n, t in sorted(((n, t) for n, t in candidates if named(n) < 2), key=lambda c: named(c[0])):
        col = sql_name(n)
        if t == "VARCHAR":
            found = _text_time(con, col)
        elif _NUMERIC.match(t):
            found = _epoch_time(con, col)
        else:
            found = None
        if found is not None:
            us, utc, read_as = found
            return _Time(n, us, utc, read_as)
    return None


def _text_time(con: Any, col: str) -> tuple[str, bool, str] | None:
    """A text column whose values read as timestamps (nine in ten of the first _SAMPLE)."""
    values, zoned, read = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE regexp_matches(v, '(Z|[+-][0-9][0-9]:?[0-9][0-9])$')), "
        f"count(try_cast(v AS TIMESTAMPTZ)) FROM (SELECT trim({col}) AS v FROM log "
        f"WHERE {col} IS NOT NULL LIMIT {_SAMPLE})"
    ).fetchone()
    if not values or read < 0.9 * values:
        return None
    if zoned:
        return f"epoch_us(try_cast({col} AS TIMESTAMPTZ))", True, "text timestamps with their zone"
    return f"epoch_us(try_cast({col} AS TIMESTAMP))", False, "text timestamps as written"


def _epoch_time(con: Any, col: str) -> tuple[str, bool, str] | None:
    """A number column named like a time whose values are all epoch numbers of one unit."""
    low, high = con.execute(f"SELECT min({col}), max({col}) FROM log").fetchone()
    if low is None or high is None:
        return None
    for unit, us_per, lo, hi in _EPOCHS:
        if lo <= float(low) and float(high) < hi:
            scale = f"* {us_per}" if us_per >= 1 else f"/ {round(1 / us_per)}"
            return f"CAST(round(CAST({col} AS DOUBLE) {scale}) AS BIGINT)", True, f"epoch {unit}"
    return None


def _status_column(columns: list[tuple[str, str]]) -> str | None:
    """The HTTP status column, by its name, or None."""
    by_name = {column_key(n): n for n, _ in reversed(columns)}
    return next((by_name[k] for k in _STATUS_NAMES if k in by_name), None)


@dataclass(frozen=True)
class _Errors:
    column: str
    rule: str  # in words, e.g. "status >= 500"
    where: str  # SQL: the row is an error


def _error_rule(con: Any, columns: list[tuple[str, str]]) -> _Errors | None:
    """How an error row is told from the table's columns (see the module's doc), or None."""
    by_name = {column_key(n): (n, t.upper()) for n, t in reversed(columns)}
    for key in _LEVEL_NAMES:
        n, t = by_name.get(key, ("", ""))
        col = sql_name(n)
        if t == "VARCHAR":
            levels = ", ".join(sql_string(v) for v in _ERROR_LEVELS)
            return _Errors(
                n, f"{n} is one of {', '.join(_ERROR_LEVELS)}", f"upper(trim({col})) IN ({levels})"
            )
        if _NUMERIC.match(t):
            low, high = con.execute(f"SELECT min({col}), max({col}) FROM log").fetchone()
            if low is not None and 10 <= low and high <= 60:  # pino, bunyan: 50 error, 60 fatal
                return _Errors(n, f"{n} >= 50", f"{col} >= 50")
            if low is not None and 0 <= low and high <= 7:  # syslog severities: 3 error .. 0 emergency
                return _Errors(n, f"{n} <= 3", f"{col} <= 3")
    for key in _STATUS_NAMES:
        n, t = by_name.get(key, ("", ""))
        if not (_NUMERIC.match(t) or t == "VARCHAR"):
            continue
        col = sql_name(n)
        code = col if _NUMERIC.match(t) else f"try_cast(trim(CAST({col} AS VARCHAR)) AS INTEGER)"
        values, statuses = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE c BETWEEN 100 AND 599) FROM "
            f"(SELECT {code} AS c FROM log WHERE {col} IS NOT NULL LIMIT {_SAMPLE})"
        ).fetchone()
        if values and statuses >= 0.9 * values:
            return _Errors(n, f"{n} >= 500", f"{code} >= 500")
    return None


def _time_and_histogram(
    con: Any, time: _Time, errors: _Errors | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The span of the time column, and its rows (and error rows) per bucket."""
    first, last, timed = con.execute(
        f"SELECT min(t), max(t), count(t) FROM (SELECT {time.us} AS t FROM log)"
    ).fetchone()
    rows = con.execute("SELECT count(*) FROM log").fetchone()[0]
    span: dict[str, Any] = {
        "column": time.column,
        "read_as": time.read_as,
        "utc": time.utc,
        "first": None if first is None else _iso(first, time.utc),
        "last": None if last is None else _iso(last, time.utc),
        "span_s": None if first is None else (last - first) / 1e6,
        "rows_with_time": timed,
        "rows_without_time": rows - timed,
    }
    if first is None:
        return span, None
    width = _bucket_width(first, last)
    w_us = width * 1_000_000
    start = (first // w_us) * w_us
    n = (last // w_us) - (first // w_us) + 1
    err = f"count(*) FILTER (WHERE {errors.where})" if errors else "0"
    counts, error_counts = [0] * n, [0] * n
    for b, c, e in con.execute(
        f"SELECT (rlm_t - {start}) // {w_us} AS rlm_b, count(*), {err} FROM "
        f"(SELECT {time.us} AS rlm_t, * FROM log) WHERE rlm_t IS NOT NULL GROUP BY rlm_b"
    ).fetchall():
        counts[int(b)], error_counts[int(b)] = int(c), int(e)
    histogram = {
        "bucket_s": width,
        "bucket": bucket_name(width),
        "start": _iso(start, time.utc),
        "counts": counts,
        "total": sum(counts),
    }
    if errors is not None:
        histogram["error_counts"] = error_counts
    return span, histogram


def _bucket_width(first_us: int, last_us: int) -> int:
    """The narrowest bucket (seconds) that puts the span in at most MAX_BUCKETS buckets."""
    for width in BUCKET_SECONDS:
        w_us = width * 1_000_000
        if last_us // w_us - first_us // w_us + 1 <= MAX_BUCKETS:
            return width
    # whole days, at most MAX_BUCKETS - 2 a span: at most MAX_BUCKETS buckets once aligned
    return max(1, -(-(last_us - first_us) // ((MAX_BUCKETS - 2) * _DAY * 1_000_000))) * _DAY


def bucket_name(seconds: int) -> str:
    """`minute`, `5 minutes`, `hour`, `7 days`: what one bucket of the histogram is."""
    for unit, size in (("day", _DAY), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds % size == 0:
            k = seconds // size
            return unit if k == 1 else f"{k} {unit}s"
    return f"{seconds} seconds"


def _iso(us: int, utc: bool) -> str:
    """Microseconds since 1970 as ISO 8601: with +00:00 for an instant, as written otherwise."""
    moment = datetime(1970, 1, 1, tzinfo=UTC if utc else None) + timedelta(microseconds=int(us))
    return moment.isoformat()


def _errors(con: Any, errors: _Errors, histogram: dict[str, Any] | None) -> dict[str, Any]:
    count = con.execute(f"SELECT count(*) FILTER (WHERE {errors.where}) FROM log").fetchone()[0]
    out: dict[str, Any] = {"column": errors.column, "rule": errors.rule, "rows": int(count)}
    if histogram is not None:
        out["counts"] = histogram.pop("error_counts")
    return out
