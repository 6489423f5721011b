"""Parsed tables: the input as the DuckDB table `log`, built once per file, queried in the sandbox.

Two halves:

- the parent (`ensure_table`) builds `<cache key>.t<version>.duckdb` beside
  the line index, keyed like it, with `log(line_no BIGINT, line VARCHAR, ...)`
  and the columns its format parses (rlm.input.logformats); a description of it
  (`<key>.t<version>.json`) feeds the profile. A second question about the
  same file finds both and pays nothing.
- the worker (`SqlSession`) opens that file read-only BEFORE lock-down, with
  DuckDB's own switches off: no external access (no other file, no network,
  no ATTACH / COPY / INSTALL / LOAD), no extension auto-loading, no spilling
  to disk, a memory limit, one thread, and the configuration locked. A
  watchdog thread, started before lock-down too, interrupts a query when the
  cell's CPU time is nearly spent, so a runaway query costs that query, not
  the worker.

The worker half imports only duckdb and the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from typing import Any

from rlm.privatefiles import private_workdir, publish_private, read_private, write_private

__all__ = [
    "TABLE_VERSION",
    "BUILD_PREFIX",
    "LINE_CUT_BYTES",
    "TableError",
    "SqlError",
    "SqlResult",
    "SqlSession",
    "ensure_table",
    "build_table",
    "describe_table",
    "sql_helper",
]

TABLE_VERSION = 6  # 2: a log stored in parts, current storage format; 3: common values; 4: sshd login events name their method; 5: example queries; 6: up to 40 values a column
# A build's work folder in the cache (rlm.privatefiles.private_workdir): the sweep of the cache
# folder (rlm.input.cachedir) removes those a killed process left.
BUILD_PREFIX = "rlm-build-"
# A line longer than this is stored cut to it (at a character boundary) in `line`, and the
# table's note says so: one huge line must not cost the whole file its sql().
LINE_CUT_BYTES = 1 << 20
MAX_RESULT_ROWS = 100_000  # rows sql() hands back; more means the query should aggregate or LIMIT
SHOWN_ROWS = 20  # rows the REPL echo shows
SHOWN_CELL_CHARS = 60
_FIRST_LINES = 200  # lines the format is recognized on
_JSON_SAMPLE = 2000  # JSON lines whose keys make the columns
# Tables are built for files of records, lines up to 1 MB (rlm.source.TABLE_LINE_MAX_BYTES).
# DuckDB sizes its read buffers by the longest line it allows: 1 GB here cost a 1 GB buffer.
_MAX_LINE_BYTES = 4 << 20
# The reader's buffer: DuckDB's default is 16 lines of the longest allowed (64 MB here), and
# two parts' readers then left their inserts too little of a 160 MB cap (out of memory: the
# build was retried at four times the cap, peak 865 MiB). Four of the longest lines still fit.
_READ_BUFFER_BYTES = 4 * _MAX_LINE_BYTES
# The build's DuckDB memory (RLM_TABLE_BUILD_MB to change it); past it, DuckDB spills beside the cache.
BUILD_MEMORY_MB = 160
# A log is built in parts, one per processor, each a run of consecutive lines inserted by a
# single-threaded query of its own, all at once (see _create_lines). DuckDB's own parallel
# insert keeps file order only by holding each thread's batches until their turn, and spilled
# them under the cap: on a 1 GB access log (2 cores, 160 MB) 14.8-16.5 s against 11.4 s with
# one thread. Parts need no reordering; each costs its concurrent insert's buffers (measured
# peak for two parts under 160 MB: about 330 MiB), so the cap allows one part per this much.
_MB_PER_PART = 80
# Skipping a line costs a part's reader this share of parsing and storing one (1 GB access
# log: 0.5 s to skip 2.26 M lines, about 5 s to build them).
_SKIP_SHARE = 0.1
# A part is worth its start (a reader skipping to its first line) from this many lines on.
_PART_MIN_LINES = 100_000
# Tables are written in DuckDB's current storage format: in the older default, ZSTD (asked for
# on `line`) is not available and is dropped without a word: a 1 GB access log's table took
# 1.17 GB instead of 196 MB. The worker opens the file with the same DuckDB.
_STORAGE_VERSION = "latest"


class TableError(Exception):
    """The table could not be built; the run goes on without `sql`."""


class SqlError(Exception):
    """A query failed: the message is DuckDB's, or says which limit stopped it."""


# =========================================================================== building (parent)


def table_paths(cache_base: str) -> tuple[str, str]:
    """(database, description) paths for a cache key path like `<dir>/<key>`."""
    return f"{cache_base}.t{TABLE_VERSION}.duckdb", f"{cache_base}.t{TABLE_VERSION}.json"


def ensure_table(
    path: str,
    profile_format: str,
    *,
    cache_base: str | None,
    n_lines: int,
    encoding: str,
    invalid_lines: int,
    sample: list[str],
    owned: list[str] | None = None,
    cut: list[tuple[int, int]] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any] | None:
    """The description of `path`'s table, built now unless the cache holds it; None when DuckDB is missing.

    The description is a dict: path, format, columns [[name, type]], rows,
    parsed, examples, note, values, build_s. Raises TableError when the build fails.
    With no cache (`cache_base` None, or a cache that cannot be written) the table is a
    private temp file the Source removes (`owned`). A cached table found damaged is said
    in `warnings` and built anew. `cut`: lines to store cut (see build_table).
    """
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return None
    from rlm.input.logformats import recognize

    year = time.gmtime(os.stat(path).st_mtime).tm_year
    if cache_base is not None:
        db_path, info_path = table_paths(cache_base)
        info, damage = _load_info(info_path, db_path)
        if info is not None:
            return info
        if damage and warnings is not None:
            warnings.append(f"a damaged cache entry of this input was rebuilt (table: {damage})")
    fmt = recognize(profile_format, sample[:_FIRST_LINES], year=year)
    if cache_base is not None:
        try:
            info = build_table(
                path, fmt, db_path, n_lines=n_lines, encoding=encoding, invalid_lines=invalid_lines, cut=cut
            )
        except OSError:
            pass  # an unwritable cache: a private table below
        else:
            try:
                write_private(info_path, json.dumps(info))
            except OSError:
                pass
            return info
    fd, db_path = tempfile.mkstemp(prefix="rlm-table-", suffix=".duckdb")
    os.close(fd)
    if owned is not None:
        owned.append(db_path)
    return build_table(
        path, fmt, db_path, n_lines=n_lines, encoding=encoding, invalid_lines=invalid_lines, cut=cut
    )


def _load_info(info_path: str, db_path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the cached description, None); (None, None) when none is cached; (None, why) when the
    cached one is damaged: a description that is not rlm's, or a database that does not open
    or does not hold its rows. Neither file is read through a symlink or from another user."""
    if not os.path.lexists(info_path):
        return None, None
    try:
        info = json.loads(read_private(info_path))
    except OSError as exc:
        return None, f"its description cannot be read: {exc.strerror or exc}"
    except ValueError:
        return None, "its description is not JSON"
    if not _is_description(info):
        return None, "its description is not rlm's"
    why = _unreadable_db(db_path, int(info["rows"]))
    if why is not None:
        return None, why
    info["path"] = db_path
    return dict(info), None


def _is_description(info: Any) -> bool:
    """What describe_table and the worker rely on, of the right types."""
    return (
        isinstance(info, dict)
        and info.get("version") == TABLE_VERSION
        and isinstance(info.get("format"), str)
        and isinstance(info.get("rows"), int)
        and isinstance(info.get("columns"), list)
        and all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)
            for c in info["columns"]
        )
        and isinstance(info.get("values") or {}, dict)
        and isinstance(info.get("examples") or [], list)
        and isinstance(info.get("note") or "", str)
    )


def _unreadable_db(db_path: str, rows: int) -> str | None:
    """Why the cached database cannot serve sql(), or None: opened read-only as the worker
    opens it, `log` counted against its description (DuckDB counts from its metadata)."""
    import duckdb

    try:
        st = os.lstat(db_path)
    except OSError:
        return "its database is missing"
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return "its database is not a file of this user's"
    try:
        con = duckdb.connect(
            db_path,
            read_only=True,
            config={"autoinstall_known_extensions": False, "autoload_known_extensions": False},
        )
        try:
            found = con.execute("SELECT count(*) FROM log").fetchone()
        finally:
            con.close()
    except duckdb.Error as exc:
        return f"its database cannot be opened: {_first_line(exc)}"
    if found is None or found[0] != rows:
        return f"its database holds {found[0] if found else 0:,} rows, its description {rows:,}"
    return None


def _cut_long_lines(src: str, work: str, spans: list[tuple[int, int]]) -> str:
    """A copy of `src` in `work` with each line of `spans` ((start, end) byte offsets, end
    past its '\n') cut to LINE_CUT_BYTES at a character boundary; every other byte as is."""
    dest = os.path.join(work, "cut.txt")
    with open(src, "rb") as fh, open(dest, "wb") as out:
        pos = 0
        for start, end in spans:
            _copy_bytes(fh, out, pos, start - pos)
            fh.seek(start)
            head = fh.read(LINE_CUT_BYTES + 1)
            keep = LINE_CUT_BYTES
            while keep > 0 and head[keep] & 0xC0 == 0x80:  # not inside a UTF-8 sequence
                keep -= 1
            out.write(head[:keep] + b"\n")
            pos = end
        fh.seek(pos)
        shutil.copyfileobj(fh, out, 16 << 20)
    return dest


def _copy_bytes(fh: Any, out: Any, offset: int, count: int) -> None:
    fh.seek(offset)
    while count > 0:
        block = fh.read(min(count, 16 << 20))
        if not block:
            break
        out.write(block)
        count -= len(block)


def _with_cut_note(note: str | None, cut: list[tuple[int, int]] | None) -> str | None:
    if not cut:
        return note
    said = (
        f"{len(cut):,} line{'s' if len(cut) != 1 else ''} over {LINE_CUT_BYTES >> 20} MiB "
        f"{'are' if len(cut) != 1 else 'is'} stored cut to {LINE_CUT_BYTES >> 20} MiB in `line` "
        "(peek and context_lines read them whole)"
    )
    return f"{note}; {said}" if note else said


def _raw_source(path: str, numbered: bool = True, *, skip: int = 0, limit: int | None = None) -> str:
    """A DuckDB scan of `path` as one VARCHAR column, one row per '\\n'-terminated line, in file order.

    Unnumbered, line_no is NULL: numbering with row_number() serialises the
    scan and costs about half of a big build; the stored table is numbered by
    its rowid instead (see _create_log). `skip` and `limit` select a run of
    lines: the reader counts the lines it skips as it reads them (a stray
    carriage return splits both alike), and a LIMIT over one thread streams.
    """
    lit = "'" + path.replace("'", "''") + "'"
    number = "row_number() OVER ()" if numbered else "NULL::BIGINT"
    return (
        f"SELECT {number} AS line_no, coalesce(line, '') AS line FROM read_csv({lit}, "
        "columns={'line': 'VARCHAR'}, header=false, delim='\\x1f', quote='', escape='', auto_detect=false, "
        f"new_line='\\n', strict_mode=false, max_line_size={_MAX_LINE_BYTES}, buffer_size={_READ_BUFFER_BYTES}, "
        f"skip={int(skip)})" + (f" LIMIT {int(limit)}" if limit is not None else "")
    )


def build_table(
    path: str,
    fmt: Any,
    db_path: str,
    *,
    n_lines: int,
    encoding: str = "utf-8",
    invalid_lines: int = 0,
    parts: int | None = None,
    cut: list[tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Build `log` for `path` into `db_path` (replaced atomically, 0600). Returns its description.

    `parts`: how many runs of lines a log is built in at once (default: one per
    processor, as the file's size and the memory cap allow). `cut`: the (start, end)
    byte offsets of lines longer than LINE_CUT_BYTES, stored cut to that length."""
    import duckdb

    started = time.perf_counter()
    # A private folder, locked while this build lives: DuckDB writes its files there with
    # modes of its own, and a killed build's folder is swept by a later run (rlm.input.cachedir).
    workdir = contextlib.ExitStack()
    work = workdir.enter_context(private_workdir(os.path.dirname(db_path) or None, BUILD_PREFIX))
    tmp_db = os.path.join(work, "table.duckdb")
    try:
        utf8 = encoding in ("utf-8", "ascii", "utf-8-sig") and not invalid_lines
        if cut:
            path = _cut_long_lines(path, work, cut)  # built from a copy with those lines cut
        # DuckDB reads UTF-8 only, and splits lines at a carriage return too. Most files
        # are '\n'-only UTF-8: the table is built straight from them, no pass over the
        # file beforehand. Otherwise DuckDB gets a copy with '\n' endings (a line's final
        # '\r' dropped, as context_lines does; any other '\r' read as a space) and invalid
        # bytes as U+FFFD, exactly as peek and context_lines show them: made at once when
        # the encoding or the first lines call for it, after the build when a stray '\r'
        # further on made DuckDB's lines more than the file's.
        if not utf8:
            source = _copy(path, work, encoding)
        elif _head_has_cr(path):
            source = _copy(path, work, None)
        else:
            source = path
        try:
            columns, parsed, rows, note = _build(duckdb, fmt, source, tmp_db, work, n_lines, parts=parts)
        except duckdb.OutOfMemoryException:
            # Wide rows (JSON objects with hundreds of nested fields: a row group holds a
            # buffer per field) need more than the cap: once more at four times it, with as
            # many threads as before. Each thread holds such buffers (and, keeping file order,
            # its batches until their turn): on a 1 GB JSON lines file of NGINX Plus status
            # objects, 640 MB ran out with two threads and built in 10 s with one.
            _remove_db(tmp_db)
            columns, parsed, rows, note = _build(
                duckdb,
                fmt,
                source,
                tmp_db,
                work,
                n_lines,
                memory_mb=4 * _build_memory_mb(),
                parts=parts,
                # the first attempt's threads: more would buy ordered batches that run out again
                threads=_build_threads(_build_memory_mb()),
            )
        if rows != n_lines and source == path and _has_cr(path):
            _remove_db(tmp_db)
            source = _copy(path, work, None)
            columns, parsed, rows, note = _build(duckdb, fmt, source, tmp_db, work, n_lines, parts=parts)
        if rows != n_lines:
            raise TableError(f"the table has {rows:,} rows but the file {n_lines:,} lines")
        publish_private(tmp_db, db_path)  # 0600 before it has its name
        values, examples = _what_columns_hold(duckdb, db_path, columns, fmt)
    except Exception as exc:
        # DuckDB answers a Ctrl-C or SIGTERM that lands inside a query with an error of its
        # own ("Query interrupted", or "connection is busy" from a part still running): the
        # user's stop, never "no table" and a run that goes on.
        _stop_if_asked(exc)
        if isinstance(exc, duckdb.Error):
            raise TableError(f"DuckDB could not build the table: {_first_line(exc)}") from None
        raise
    finally:
        workdir.close()
    return {
        "version": TABLE_VERSION,
        "path": db_path,
        "format": fmt.name if columns else "text",
        "columns": [["line_no", "BIGINT"], ["line", "VARCHAR"], *[[n, t] for n, t in columns]],
        "rows": rows,
        "parsed": parsed,
        "examples": examples,
        "note": _with_cut_note(note, cut),
        "values": values,
        "build_s": round(time.perf_counter() - started, 3),
    }


def _stop_if_asked(exc: BaseException) -> None:
    """Raise the user's stop in place of `exc` when a signal asked for one during the build
    (rlm.errors.Interrupted), or when DuckDB says a query was interrupted: the build's own
    interrupts (a failed part stopping the others) raise the part's error, never this one."""
    from rlm.errors import Interrupted

    if Interrupted.last is not None:
        raise Interrupted.again() from None
    if "interrupted" in str(exc).lower() and (
        isinstance(exc, RuntimeError) or type(exc).__name__ == "InterruptException"
    ):
        raise KeyboardInterrupt from None


def _what_columns_hold(
    duckdb: Any, db_path: str, columns: list[tuple[str, str]], fmt: Any
) -> tuple[dict[str, list[list[Any]]], list[str]]:
    """The profile's common values of the built table's categorical columns, and its example
    queries (rlm.input.tablevalues)."""
    from rlm.input.tablevalues import common_values, example_queries, found_measure, reserved_words

    if not columns:
        return {}, example_queries([], {}, [])
    con = duckdb.connect(db_path, read_only=True, config={"memory_limit": f"{_build_memory_mb()}MB"})
    try:
        values, entities = common_values(con, columns, fmt.categories, fmt.entities)
        reserved = reserved_words(con)
    finally:
        con.close()
    # A log format declares what its totals are of (if anything); CSV and JSON lines have it found.
    measure = fmt.measure if fmt.categories else found_measure(columns)
    return values, example_queries(columns, values, entities, measure, reserved)


def _copy(path: str, work: str, encoding: str | None) -> str:
    """A '\n'-only UTF-8 copy of `path` in `work` (transcoded from `encoding` unless None)."""
    dest = os.path.join(work, "input.txt")
    if encoding is None:
        _strip_cr(path, dest)
    else:
        _transcode(path, dest, encoding)
    return dest


def _remove_db(db: str) -> None:
    for leftover in (db, db + ".wal"):
        if os.path.exists(leftover):
            os.unlink(leftover)


def _build(
    duckdb: Any,
    fmt: Any,
    source: str,
    tmp_db: str,
    work: str,
    n_lines: int,
    memory_mb: int = 0,
    parts: int | None = None,
    threads: int = 0,
) -> tuple[list[tuple[str, str]], int, int, str | None]:
    """Create `log` in a new database `tmp_db`: (columns, lines parsed, rows, note)."""
    memory_mb = memory_mb or _build_memory_mb()
    # A log's parts are single-threaded queries run side by side (each client thread runs its
    # own query); CSV and JSON lines use DuckDB's threads.
    lines = fmt.kind == "lines"
    n_parts = max(1, min(parts, n_lines)) if parts is not None else _build_parts(memory_mb, n_lines)
    con = duckdb.connect(
        tmp_db,
        config={
            "threads": 1 if lines else threads or _build_threads(memory_mb),
            "preserve_insertion_order": True,
            "storage_compatibility_version": _STORAGE_VERSION,
            # The parent's memory stays bounded whatever the file's size: past this,
            # DuckDB spills to the build's directory beside the cache.
            "memory_limit": f"{memory_mb}MB",
            "temp_directory": os.path.join(work, "spill"),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        },
    )
    try:
        _utc(con)
        if fmt.kind != "lines":
            # CSV and JSON lines: every string column zstd-compressed (see _create_log).
            con.execute("SET force_compression = 'zstd'")
        note = fmt.note
        columns, parsed = _create_log(con, fmt, source, n_lines, n_parts)
        if isinstance(parsed, str):  # the format's columns could not be parsed: say why
            note, parsed = parsed, 0
        rows = con.execute("SELECT count(*) FROM log").fetchone()[0]
    finally:
        con.close()
    return columns, parsed, rows, note


def _create_log(
    con: Any, fmt: Any, source: str, n_lines: int, parts: int = 1
) -> tuple[list[tuple[str, str]], int | str]:
    """CREATE TABLE log; returns (parsed columns with their types, lines parsed or why none were)."""
    raw = _raw_source(source)
    if fmt.kind == "lines":
        return _create_lines(con, fmt, source, n_lines, parts)
    if fmt.kind == "jsonl":
        return _create_jsonl(con, source)
    con.execute(f"CREATE TEMP TABLE src AS {raw}")
    if fmt.kind == "csv":
        return _create_csv(con, fmt, source, n_lines)
    con.execute("CREATE TABLE log AS SELECT * FROM src ORDER BY line_no")
    return [], 0


def _create_lines(
    con: Any, fmt: Any, source: str, n_lines: int, parts: int
) -> tuple[list[tuple[str, str]], int | str]:
    """`log` for a line format: the lines in `parts` runs, each parsed and stored by a query of
    its own, all at once, each run in file order in a table of its own (log_data, log_data_1, ...).
    `log` is the view joining them, numbered by rowid: line_no = rowid + 1 + the lines before
    the run. No numbered copy, no window, no sort, no reordering of parallel batches.

    The runs are taken by line count (the reader skips to a run's first line): a stray carriage
    return, which DuckDB reads as a line end, makes the rows more than the file's lines, which
    build_table checks.
    """
    bounds = _part_bounds(n_lines, parts)
    tables = ["log_data"] + [f"log_data_{i}" for i in range(1, parts)]
    # `line` is stored zstd-compressed; the parsed columns as DuckDB chooses (dictionary
    # and FSST: a LIKE over `agent` then reads the dictionary only). Measured on a 1 GB
    # access log: DuckDB's choice for `line` as well (its analysis of 1 GB of long
    # strings) cost two thirds of the build; zstd for every string column, 378 MB and
    # 11.2 s of CPU; zstd for `line` only, 195 MB and 10.4 s.
    described = con.execute(f"DESCRIBE {_lines_select(fmt, source)}").fetchall()
    defs = ", ".join(
        f'"{_q(name)}" {typ}' + (" USING COMPRESSION zstd" if name == "line" else "")
        for name, typ, *_ in described
    )
    for table in tables:
        con.execute(f"CREATE TABLE {table} ({defs})")
    inserts = [
        f"INSERT INTO {table} BY NAME "
        + _lines_select(fmt, source, skip=lo, limit=hi - lo if i < parts - 1 else None)
        for i, (table, lo, hi) in enumerate(zip(tables, bounds, bounds[1:], strict=False))
    ]
    _run_side_by_side(con, inserts)
    con.execute(
        "CREATE VIEW log AS "
        + " UNION ALL ".join(
            f"SELECT rowid + {lo + 1} AS line_no, * FROM {table}"
            for table, lo in zip(tables, bounds, strict=False)
        )
    )
    cols = _columns(con)
    if not cols:
        return [], 0
    first = cols[0][0]
    parsed = con.execute(f'SELECT count("{first}") FROM log').fetchone()[0]
    return cols, parsed


def _part_bounds(n_lines: int, parts: int) -> list[int]:
    """Where each run of lines starts (and the last ends), so that the runs end together: each
    part's reader first reads past the lines before its run, so later runs are shorter. With
    r the skip's share of a line's cost, run i is r * (its first line) shorter than run 0."""
    r = _SKIP_SHARE
    first = n_lines * r / (1 - (1 - r) ** parts)
    return [min(n_lines, round(first * (1 - (1 - r) ** i) / r)) for i in range(parts)] + [n_lines]


def _lines_select(fmt: Any, source: str, *, skip: int = 0, limit: int | None = None) -> str:
    """The format's parse over a run of lines, without line_no (the stored rows are numbered by rowid)."""
    unnumbered = _raw_source(source, numbered=False, skip=skip, limit=limit)
    return f"SELECT * EXCLUDE (line_no) FROM (WITH src AS ({unnumbered}) {fmt.select})"


def _run_side_by_side(con: Any, statements: list[str]) -> None:
    """Run each statement on a cursor of its own, each from a thread of its own (DuckDB drops
    the GIL while a query runs); the first error is raised once all have ended."""
    if len(statements) == 1:
        con.execute(statements[0])
        return
    errors: list[BaseException] = []
    cursors = [con.cursor() for _ in statements]

    def run(cur: Any, statement: str) -> None:
        try:
            cur.execute(statement)
        except BaseException as exc:  # noqa: BLE001 (raised in the caller's thread below)
            errors.append(exc)
            for other in cursors:  # the others' work is lost anyway: stop it
                try:
                    other.interrupt()
                except Exception:  # noqa: BLE001 (a finished query: nothing to stop)
                    pass

    threads = [
        threading.Thread(target=run, args=(cur, st), name="rlm-table-part")
        for cur, st in zip(cursors, statements, strict=True)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except BaseException:
        # A stop (Ctrl-C, SIGTERM) lands here, in the waiting thread: the parts' queries are
        # stopped, not waited for (a build takes seconds; the user asked to stop now).
        for cur in cursors:
            try:
                cur.interrupt()
            except Exception:  # noqa: BLE001 (a finished query: nothing to stop)
                pass
        raise
    finally:
        for thread in threads:
            if thread.ident is not None:
                thread.join()
        for cur in cursors:
            cur.close()
    if errors:
        raise errors[0]


def _create_csv(con: Any, fmt: Any, source: str, n_lines: int) -> tuple[list[tuple[str, str]], int | str]:
    import duckdb

    lit = "'" + source.replace("'", "''") + "'"
    delim = ", delim='\\t'" if fmt.delimiter == "\t" else ""
    try:
        con.execute(
            f"CREATE TEMP TABLE rows AS SELECT row_number() OVER () + 1 AS __rlm_line_no, * "
            f"FROM read_csv({lit}, header=true, auto_detect=true, sample_size=20480{delim})"
        )
    except duckdb.Error as exc:
        con.execute("CREATE TABLE log AS SELECT * FROM src ORDER BY line_no")
        return [], f"the CSV columns could not be parsed: {_first_line(exc)}"
    records = con.execute("SELECT count(*) FROM rows").fetchone()[0]
    trailing_blank = con.execute(
        "SELECT count(*) FROM src WHERE line_no > (SELECT coalesce(max(line_no), 0) FROM src WHERE line <> '')"
    ).fetchone()[0]
    if records != n_lines - 1 - trailing_blank:
        con.execute("CREATE TABLE log AS SELECT * FROM src ORDER BY line_no")
        return [], (
            f"the CSV has {records:,} records on {n_lines - 1:,} lines (quoted fields span lines): "
            "its columns are not split out; parse `line` or use context_lines with the csv module"
        )
    described = con.execute("DESCRIBE rows").fetchall()
    names = [r[0] for r in described if r[0] != "__rlm_line_no"]
    outs, cols = [], []
    for name, typ in ((r[0], r[1]) for r in described if r[0] != "__rlm_line_no"):
        alias = name + "_" if name in ("line_no", "line") else name
        outs.append(f'c."{_q(name)}" AS "{_q(alias)}"')
        cols.append((alias, typ))
    del names
    con.execute(
        f"CREATE TABLE log AS SELECT s.line_no, s.line, {', '.join(outs)} "
        "FROM src s LEFT JOIN rows c ON c.__rlm_line_no = s.line_no ORDER BY s.line_no"
    )
    return cols, records


def _create_jsonl(con: Any, source: str) -> tuple[list[tuple[str, str]], int | str]:
    """Top-level keys as columns, stored in file order (line_no is the rowid, as for logs):
    no numbered copy of the lines, no sort, so the build stays within its memory cap."""
    raw = _raw_source(source, numbered=False)
    is_object = "json_valid(line) AND starts_with(ltrim(line), '{')"
    structure = con.execute(
        f"SELECT json_group_structure(json(line)) FROM (SELECT line FROM ({raw}) WHERE {is_object} "
        f"LIMIT {_JSON_SAMPLE})"
    ).fetchone()[0]
    if not structure or not structure.startswith("{"):
        con.execute(f"CREATE TABLE log_data AS SELECT line FROM ({raw})")
        con.execute("CREATE VIEW log AS SELECT rowid + 1 AS line_no, * FROM log_data")
        return [], "no JSON objects were found to take keys from"
    keys = list(json.loads(structure).keys())
    lit = "'" + structure.replace("'", "''") + "'"
    outs = []
    for key in keys:
        alias = key + "_" if key in ("line_no", "line") else key
        outs.append(f'j."{_q(key)}" AS "{_q(alias)}"')
    con.execute(
        f"CREATE TABLE log_data AS SELECT line, {', '.join(outs)} FROM (SELECT line, "
        f"CASE WHEN {is_object} THEN try(from_json(line, {lit})) END AS j FROM ({raw}))"
    )
    con.execute("CREATE VIEW log AS SELECT rowid + 1 AS line_no, * FROM log_data")
    cols = _columns(con)
    parsed = con.execute(f"SELECT count(*) FROM log_data WHERE {is_object}").fetchone()[0]
    return cols, parsed


def _utc(con: Any) -> None:
    """Timestamps with a time zone show in UTC, whatever the machine's zone; and no progress
    bar: DuckDB prints it on stdout, which belongs to the answer (a connection option, so it
    cannot be given to connect())."""
    import duckdb

    con.execute("SET enable_progress_bar = false")
    try:
        con.execute("SET TimeZone = 'UTC'")
    except duckdb.Error:
        pass


def _columns(con: Any) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute("DESCRIBE log").fetchall() if r[0] not in ("line_no", "line")]


_MB_PER_THREAD = 256  # of the build's memory cap, for each thread of a CSV or JSON lines build


def _build_memory_mb() -> int:
    try:
        return max(64, int(os.environ.get("RLM_TABLE_BUILD_MB", "") or BUILD_MEMORY_MB))
    except ValueError:
        return BUILD_MEMORY_MB


def _cpus() -> int:
    """The processors this process may run on (a container's or taskset's share, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _build_threads(memory_mb: int) -> int:
    """DuckDB's threads for a CSV or JSON lines build: one per processor, as many as the memory
    cap feeds (each holds a row group of buffers; a 1 GB JSON lines file ran 2 out of 160 MB)."""
    return max(1, min(_cpus(), memory_mb // _MB_PER_THREAD))


def _build_parts(memory_mb: int, n_lines: int) -> int:
    """How many runs of lines a log is built in at once: one per processor, as many as the
    memory cap feeds and the file has lines for."""
    return max(1, min(_cpus(), memory_mb // _MB_PER_PART, n_lines // _PART_MIN_LINES))


def _head_has_cr(path: str) -> bool:
    """A carriage return in the first 64 KB: CRLF line endings, most likely."""
    with open(path, "rb") as fh:
        return b"\r" in fh.read(65536)


def _has_cr(path: str) -> bool:
    """A carriage return anywhere (read in blocks: a mapping of the file would count in the RSS)."""
    with open(path, "rb") as fh:
        while block := fh.read(16 << 20):
            if b"\r" in block:
                return True
    return False


def _strip_cr(src: str, dest: str) -> None:
    """Copy a UTF-8 file with CRLF (or stray CR) endings as '\n'-only."""
    chunk = 64 << 20
    with open(src, "rb") as fh, open(dest, "wb") as out:
        carry = b""
        while block := fh.read(chunk):
            block = carry + block
            carry = b""
            if block.endswith(b"\r"):
                block, carry = block[:-1], b"\r"
            out.write(block.replace(b"\r\n", b"\n").replace(b"\r", b" "))
        if carry:
            out.write(b"")  # a final lone CR ends the file: context_lines drops it too


def _transcode(src: str, dest: str, encoding: str) -> None:
    from rlm.text.textfile import MappedText

    with MappedText(src, encoding=encoding) as text, open(dest, "w", encoding="utf-8", newline="\n") as out:
        lines = text.lines
        step = 65536
        for i in range(0, len(lines), step):
            out.write("".join(s.replace("\r", " ") + "\n" for s in lines[i : i + step]))


def _q(name: str) -> str:
    return name.replace('"', '""')


def _py_str(text: str) -> str:
    """`text` as a Python string literal, in double quotes when it can be (SQL quotes values with ')."""
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


EXAMPLES_LINE = "Examples, inside execute: "  # how the profile's line of example queries starts


def describe_table(info: dict[str, Any], max_chars: int = 420) -> str:
    """The profile's lines about the table: columns and types, lines parsed, common values, example queries."""
    cols = ", ".join(f"{n} {t}" for n, t in info["columns"])
    if len(cols) > max_chars - 120:
        cols = cols[: max_chars - 121].rsplit(",", 1)[0] + ", …"
    rows, parsed = int(info["rows"]), int(info.get("parsed") or 0)
    head = f"Table `log` ({info['format']}): {cols}."
    if len(info["columns"]) > 2:
        head += f" {parsed:,} of {rows:,} lines parsed; the others have NULL fields."
    out = [head]
    if info.get("note"):
        out.append(f"Note: {info['note']}.")
    from rlm.input.tablevalues import describe_values

    values = describe_values(info.get("values") or {})
    if values:
        out.append(values)
    # repr: a query quoting a column name holds double quotes
    out.append(EXAMPLES_LINE + "; ".join(f"sql({_py_str(q)})" for q in info.get("examples") or []))
    return "\n".join(out)


# =========================================================================== querying (worker)


class SqlResult(list[Any]):
    """sql() inside code: a list of row tuples with `.columns`; echoed as a small table."""

    def __init__(
        self, columns: list[str], rows: list[tuple[Any, ...]], more: bool, limit: int | None = None
    ) -> None:
        super().__init__(rows)
        self.columns = columns
        self.more = more
        self.limit = limit  # the query's own final LIMIT, if any

    def __repr__(self) -> str:
        return render_table(self.columns, list(self), more=self.more, limit=self.limit)

    __str__ = __repr__


def _cell(v: Any) -> str:
    s = "NULL" if v is None else str(v)
    s = s.replace("\n", "\\n").replace("\r", "\\r")
    return s if len(s) <= SHOWN_CELL_CHARS else s[: SHOWN_CELL_CHARS - 1] + "…"


# A query's own final LIMIT (and OFFSET): a result that fills it may have been cut by it.
_FINAL_LIMIT = re.compile(r"\blimit\s+(\d+)(?:\s+offset\s+\d+)?\s*;?\s*$", re.IGNORECASE)


def query_limit(query: str) -> int | None:
    """The LIMIT a query ends with, if any."""
    m = _FINAL_LIMIT.search(query)
    return int(m.group(1)) if m else None


def render_table(
    columns: list[str], rows: list[tuple[Any, ...]], *, more: bool = False, limit: int | None = None
) -> str:
    if not columns:
        return "(no result)"
    shown = rows[:SHOWN_ROWS]
    grid = [[_cell(v) for v in row] for row in shown]
    widths = [max([len(c)] + [len(r[i]) for r in grid]) for i, c in enumerate(columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("-+-".join("-" * w for w in widths))
    for r in grid:
        lines.append(" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    n = len(rows)
    if more:
        lines.append(
            f"({n:,} rows returned, the first {SHOWN_ROWS} shown; the query has more: "
            f"sql() returns at most {MAX_RESULT_ROWS:,} — aggregate or add LIMIT)"
        )
    elif n > SHOWN_ROWS:
        lines.append(f"({n:,} rows, the first {SHOWN_ROWS} shown; the returned list holds them all)")
    else:
        lines.append(f"({n} row{'s' if n != 1 else ''})")
    if limit is not None and n == limit and not more:
        # Small models read "(10 rows)" of a copied `LIMIT 10` as the number of distinct values.
        lines[-1] = lines[-1][:-1] + (
            f"; as many as the query's LIMIT {limit}, so there may be more: "
            "count them with count(*) or count(DISTINCT …) and no LIMIT)"
        )
    return "\n".join(lines)


class _Watchdog:
    """A thread that interrupts the running query at a CPU-time or wall-clock deadline.

    Started before lock-down (afterwards no thread can be created). It polls
    every 20 ms while a query runs and sleeps on a condition otherwise.
    """

    def __init__(self, con: Any) -> None:
        self._con = con
        self._cond = threading.Condition()
        self._cpu_deadline: float | None = None
        self._wall_deadline = 0.0
        self.fired = False
        self._thread = threading.Thread(target=self._run, name="rlm-sql-watchdog", daemon=True)
        self._thread.start()

    def arm(self, cpu_deadline: float, wall_deadline: float) -> None:
        with self._cond:
            self.fired = False
            self._cpu_deadline, self._wall_deadline = cpu_deadline, wall_deadline
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._cpu_deadline = None

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._cpu_deadline is None:
                    self._cond.wait()
                    continue
                if time.process_time() >= self._cpu_deadline or time.monotonic() >= self._wall_deadline:
                    self.fired = True
                    self._cpu_deadline = None
                    try:
                        self._con.interrupt()
                    except Exception:  # noqa: BLE001 (a closed connection: nothing to stop)
                        pass
                    continue
                self._cond.wait(0.02)


_MARGIN = 0.25  # interrupt this long before the cell's CPU timer, so the query's message is the one shown


class SqlSession:
    """A read-only, confined DuckDB connection to one table file, opened before lock-down."""

    def __init__(
        self,
        db_path: str,
        *,
        start_line: int | None = None,
        end_line: int | None = None,
        memory_bytes: int = 0,
        default_seconds: float = 30.0,
    ) -> None:
        import duckdb

        self._duckdb = duckdb
        limit_mb = max(64, int(memory_bytes * 0.5) >> 20) if memory_bytes else 1024
        self.default_seconds = default_seconds
        self.con = duckdb.connect(
            db_path,
            read_only=True,
            config={
                "threads": 1,
                "memory_limit": f"{limit_mb}MB",
                "max_memory": f"{limit_mb}MB",
                "temp_directory": "",
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "allow_community_extensions": False,
                "allow_unsigned_extensions": False,
                "allow_persistent_secrets": False,
            },
        )
        con = self.con
        _utc(con)
        # The file's table by its full name: a bare `main.log` inside a temp view is the view itself.
        self._table = (
            '"'
            + (con.execute("SELECT current_database()").fetchone() or ("",))[0].replace('"', '""')
            + '".main.log'
        )
        # Named in the error of a query that asks for a column the table does not have.
        described = con.execute(f"DESCRIBE {self._table}").fetchall()
        self.columns = [str(r[0]) for r in described]
        self._text_columns = {str(r[0]).lower(): str(r[0]) for r in described if r[1] == "VARCHAR"}
        self._absent_said: set[tuple[str, str]] = set()
        self._view: tuple[int, int] | None = None
        if start_line is not None or end_line is not None:
            a = max(1, int(start_line or 1))
            b = int(end_line) if end_line is not None else (1 << 62)
            self._view = (a, b)
            self._restore_log()
        for name in ("python_enable_replacements", "python_scan_all_frames"):
            try:
                con.execute(f"SET {name} = false")
            except duckdb.Error:
                pass
        # Types a result can hold, converted once now: the conversions import
        # modules lazily, and after lock-down nothing can be imported.
        con.execute(
            "SELECT TIMESTAMPTZ '2020-01-01 00:00:00+00', TIMESTAMP '2020-01-01', DATE '2020-01-01', "
            "TIME '01:02:03', INTERVAL 1 DAY, 1.5::DECIMAL(4,1), uuid(), {'a': 1}, [1, 2], "
            "'x'::BLOB, 1::HUGEINT, '{}'::JSON, MAP {'k': 1}"
        ).fetchall()
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        self.watchdog = _Watchdog(con)
        self._warm_up()

    def _warm_up(self) -> None:
        """Run sql() itself once through each path a model's first query takes: rows of the
        table (its own column types), an empty result, and the errors DuckDB raises (binder,
        parser, conversion, a refused setting), so nothing on those paths is imported or
        initialised lazily after lock-down, when it could not be."""
        self.sql("SELECT * FROM log LIMIT 3")
        self.sql("SELECT * FROM log WHERE false")
        for bad in (
            "SELECT no_such_column FROM log",
            "SELEC 1",
            "SELECT 'x'::INTEGER",
            "SET threads = 2",
            "SELECT * FROM read_csv('/')",
        ):
            try:
                self.sql(bad)
            except SqlError:
                pass

    def _deadlines(self) -> tuple[float, float, float]:
        """(CPU deadline, wall deadline, seconds allowed) for a query starting now."""
        now_cpu = time.process_time()
        # The cell's CPU timer (rlm.sandbox.oslimits, ITIMER_PROF) raises in the cell when it
        # runs out; stop the query a little before, so the cell gets the query's own message.
        remaining, _ = signal.getitimer(signal.ITIMER_PROF)
        if remaining <= 0:
            allowed = self.default_seconds
        else:
            allowed = min(max(0.05, remaining - _MARGIN), self.default_seconds)
        return now_cpu + allowed, time.monotonic() + allowed, allowed

    def _restore_log(self) -> None:
        """`log` is the file's table whatever a cell did with temp objects before."""
        shadows = self.con.execute(
            "SELECT table_type FROM information_schema.tables WHERE table_catalog = 'temp' AND table_name = 'log'"
        ).fetchall()
        for (kind,) in shadows:
            self.con.execute(f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} temp.main.log")
        if self._view is not None:
            a, b = self._view
            self.con.execute(
                f"CREATE OR REPLACE TEMP VIEW log AS SELECT * REPLACE (line_no - {a - 1} AS line_no) "
                f"FROM {self._table} WHERE line_no BETWEEN {a} AND {b}"
            )

    def sql(self, query: str) -> SqlResult:
        """Run a read-only query over `log`; returns its rows (at most MAX_RESULT_ROWS)."""
        if not isinstance(query, str):
            raise TypeError('sql(query): the query is a string of SQL, e.g. sql("SELECT count(*) FROM log")')
        duckdb = self._duckdb
        try:
            self._restore_log()
        except duckdb.Error:
            pass
        cpu_deadline, wall_deadline, allowed = self._deadlines()
        self.watchdog.arm(cpu_deadline, wall_deadline)
        try:
            cur = self.con.execute(query)
            columns = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchmany(MAX_RESULT_ROWS + 1) if columns else []
        except Exception as exc:
            # The watchdog's interrupt is an InterruptException; the cell's CPU timer firing
            # inside DuckDB surfaces as a bare RuntimeError("Query interrupted").
            interrupted = isinstance(exc, duckdb.InterruptException) or (
                isinstance(exc, RuntimeError) and "interrupted" in str(exc).lower()
            )
            if self.watchdog.fired or interrupted:
                raise SqlError(
                    f"the query was stopped after {allowed:.1f} s (the cell's time limit); "
                    "narrow it with WHERE, aggregate, or add LIMIT"
                ) from None
            if isinstance(exc, duckdb.OutOfMemoryException):
                raise SqlError(
                    f"the query needs more memory than the sandbox allows ({_first_line(exc)}); "
                    "aggregate or add LIMIT instead of collecting rows"
                ) from None
            if isinstance(exc, duckdb.Error):
                raise SqlError(_explain(exc, self.columns)) from None
            raise
        else:
            if _finds_nothing(rows):
                self._say_absent_values(query)  # still under the watchdog: its queries scan too
        finally:
            self.watchdog.disarm()
        more = len(rows) > MAX_RESULT_ROWS
        return SqlResult(columns, rows[:MAX_RESULT_ROWS], more, query_limit(query))

    def _say_absent_values(self, query: str) -> None:
        """Print a note for each `column = 'value'` of a query that found nothing whose value no
        row holds: a guessed value (`event = 'auth_success'`, `payment = 'Cash'`) counts 0 and
        reads as an answer. The note names the column's values, the same spelling in another
        case first. Printed, so a `sql(...)[0][0]` shows it too; once per column and value."""
        duckdb = self._duckdb
        for name, literal in _EQUALS_TEXT.findall(query):
            column = self._text_columns.get(name.lower())
            value = literal.replace("''", "'")
            if column is None or column in ("line", "message") or (column, value) in self._absent_said:
                continue
            ident = '"' + column.replace('"', '""') + '"'
            try:
                if self.con.execute(
                    f"SELECT count(*) FROM {self._table} WHERE {ident} = ?", [value]
                ).fetchone() != (0,):
                    continue
                top = self.con.execute(
                    f"SELECT {ident}, count(*) AS n FROM {self._table} WHERE {ident} IS NOT NULL "
                    f"GROUP BY {ident} ORDER BY lower({ident}) = lower(?) DESC, n DESC LIMIT {_ALL_VALUES + 1}",
                    [value],
                ).fetchall()
            except duckdb.Error:
                return
            self._absent_said.add((column, value))
            # A short vocabulary (an event column) is listed whole: the value a question needs
            # may be its rarest (one 'accepted_password' among 520 'failed_password').
            shown = top if len(top) <= _ALL_VALUES else top[:_SOME_VALUES]
            listed = ", ".join(f"{_sql_literal(v)} {n:,}" for v, n in shown)
            which = "its values" if len(top) <= _ALL_VALUES else "its most common values"
            more = "" if len(top) <= _ALL_VALUES else ", …"
            print(
                f"(sql: no row has {column} = {_sql_literal(value)}; "
                + (f"{which}: {listed}{more})" if top else "the column is empty)")
            )


_ALL_VALUES = 30  # a column of at most this many values is listed whole in the note of nothing found
_SOME_VALUES = 8  # else its most common ones

# `column = 'text'` in a query, the column bare or double-quoted.
_EQUALS_TEXT = re.compile(r'(?<![\w.])"?([A-Za-z_]\w*)"?\s*==?\s*\'((?:[^\']|\'\')*)\'')


def _finds_nothing(rows: list[tuple[Any, ...]]) -> bool:
    """No rows, or one row of zeros and NULLs (a count or a sum over nothing)."""
    return not rows or (len(rows) == 1 and all(v is None or v == 0 for v in rows[0]))


def _sql_literal(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _explain(exc: BaseException, columns: list[str]) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    msg = "\n".join(lines[:6]) if lines else type(exc).__name__
    low = text.lower()
    if "external access" in low or "enable_external_access" in low:
        msg += "\n(sql() reads only the table `log`: no files, no network, no extensions)"
    elif "lock_configuration" in low or "configuration has been locked" in low:
        msg += "\n(sql() settings are fixed in the sandbox)"
    elif "read-only" in low or "read only" in low:
        msg += "\n(the table is read-only: select from it; TEMP tables and views are allowed)"
    elif "referenced column" in low and "not found" in low:
        # DuckDB names only near spellings; a model guessing a field needs the whole list.
        msg += (
            f"\n(the table `log` has the columns {', '.join(columns)}; a field it lacks can be taken "
            "from `line`, e.g. regexp_extract(line, 'id=(\\d+)', 1))"
        )
    return msg


def _unavailable(reason: str) -> Any:
    def sql(query: str = "") -> SqlResult:
        raise SqlError(f"sql() is not available here: {reason}")

    return sql


def sql_helper(spec: dict[str, Any]) -> Any:
    """The `sql` callable for a worker spec: a session over spec['table_path'], or one that explains.

    Called before lock-down (it opens the database and starts the watchdog thread).
    """
    table_path = spec.get("table_path")
    if not table_path:
        if spec.get("table_error"):
            return _unavailable(f"no table could be built for this input ({spec['table_error']})")
        return _unavailable(
            "no table was built for this input (a text built by the investigation, or DuckDB missing)"
        )
    try:
        session = SqlSession(
            table_path,
            start_line=spec.get("start_line"),
            end_line=spec.get("end_line"),
            memory_bytes=int(spec.get("memory_bytes") or 0),
        )
    except Exception as exc:  # noqa: BLE001 (the worker still serves everything else)
        return _unavailable(f"the table could not be opened ({_first_line(exc)})")
    return session.sql
