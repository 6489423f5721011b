"""Parsed tables: the input as the DuckDB table `log`, built once per file by the parent.

`ensure_table` builds `<cache key>.t<version>.duckdb` beside the line index,
keyed like it, with `log(line_no BIGINT, line VARCHAR, ...)` and the columns
its format parses (rlm.input.logformats); a description of it
(`<key>.t<version>.json`) feeds the profile (`describe_table`). A second
question about the same file finds both and pays nothing. The worker opens
the file read-only and serves sql() over it (rlm.sandbox.worker.sql_session);
how a connection to it behaves on both sides is rlm.text.tabledb.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rlm.input.mixedformat import Segment
from rlm.input.tablecopy import copy_for_duckdb, crlf_only, cut_long_lines, has_cr, head_has_cr
from rlm.privatefiles import private_workdir, publish_private, read_private, write_private
from rlm.text.sqltext import sql_name, sql_string
from rlm.text.tabledb import LATER_COLUMN, NO_EXTENSION_LOADING, first_line, settle_connection

__all__ = [
    "TABLE_VERSION",
    "BUILD_PREFIX",
    "EXAMPLES_LINE",
    "LINE_CUT_BYTES",
    "TableError",
    "ensure_table",
    "build_table",
    "describe_table",
    "table_paths",
    "build_progress",
]

TABLE_VERSION = 14  # 14: a syslog line whose tag is not one word keeps its time and host; 13: a found text column of fewer than 40 values listed whole; 12: a syslog's sshd columns in tables of their own, joined by position; 11: the text columns that hold IP addresses; 10: a CSV's `line` computed from its fields, not stored; 9: lead-ins of free-text columns; 8: parts of different formats each parsed by its own; 2: a log stored in parts, current storage format; 3: common values; 4: sshd login events name their method; 5: example queries; 6: up to 40 values a column; 7: a CSV's header and blank JSON lines are not rows
# A build's work folder in the cache (rlm.privatefiles.private_workdir): the sweep of the cache
# folder (rlm.input.cachedir) removes those a killed process left.
BUILD_PREFIX = "rlm-build-"
# A line longer than this is stored cut to it (at a character boundary) in `line`, and the
# table's note says so: one huge line must not cost the whole file its sql().
LINE_CUT_BYTES = 1 << 20
_FIRST_LINES = 200  # lines the format is recognized on
_JSON_SAMPLE = 2000  # JSON lines whose keys make the columns
# Tables are built for files of records, lines up to 1 MB (rlm.source.TABLE_LINE_MAX_BYTES).
# DuckDB sizes its read buffers by the longest line it allows: 1 GB here cost a 1 GB buffer.
_MAX_LINE_BYTES = 4 << 20
# The reader's buffer: DuckDB's default is 16 lines of the longest allowed (64 MB here), and
# two parts' readers then left their inserts too little of a 160 MB cap (out of memory: the
# build was retried at four times the cap, peak 865 MiB). Four of the longest lines still fit.
_READ_BUFFER_BYTES = 4 * _MAX_LINE_BYTES
# The build's DuckDB memory (RLM_TABLE_BUILD_MB to change it); past it, DuckDB spills beside the
# cache. At least this, and what a thread per processor needs (_MB_PER_THREAD each, plus
# _MB_HEADROOM), as long as that is at most 1/_RAM_SHARE of the memory this process may use
# (_ram_mb): at 160 MB on two cores a CSV's parallel reader had one thread (1 GB CSV: its records
# and lines stored in 21.2 s; at 576 MB, two threads, 11.9-16.1 s).
BUILD_MEMORY_MB = 160
_MB_HEADROOM = 64
_RAM_SHARE = 8
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


# Who hears how a build goes (the run's live status line and --jsonl events): called about twice
# a second with (share of the file's bytes read so far, the file's bytes, seconds so far).
ProgressSink = Callable[[float, int, float], None]
_PROGRESS: contextvars.ContextVar[ProgressSink | None] = contextvars.ContextVar(
    "rlm_build_progress", default=None
)
_PROGRESS_EVERY = 0.5  # seconds between two reports


# Set while a table is built in a thread of its own (rlm.input.tablejob): the build's waiting
# loop stops its queries within half a second of it, as a Ctrl-C stops a build in the main thread.
_CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "rlm_build_cancel", default=None
)


# Set while a table is built in a thread of its own (rlm.input.tablejob): told the path of a
# table of the columns a format does not build later (TableFormat.later), as soon as they are
# stored, so that the run's queries on them need not wait for the rest (rlm.sandbox.worker.sql_session).
# Told None when the build ends: the early table goes with the build's folder.
EarlySink = Callable[[str | None], None]
_EARLY: contextvars.ContextVar[EarlySink | None] = contextvars.ContextVar("rlm_build_early", default=None)


def build_early(sink: EarlySink | None) -> contextvars.Token[EarlySink | None]:
    """Tell `sink` of the early table of every build in this context (the caller resets the token)."""
    return _EARLY.set(sink)


@contextlib.contextmanager
def early_only_if(sound: Callable[[], bool]) -> Iterator[None]:
    """Within this block, an early table is told only where `sound()` holds when it is stored
    (the file not rewritten meanwhile: its rows would mix two versions)."""
    sink = _EARLY.get()
    if sink is None:
        yield
        return
    token = _EARLY.set(lambda path: sink(path) if path is None or sound() else None)
    try:
        yield
    finally:
        _EARLY.reset(token)


class BuildCancelled(Exception):
    """The build was stopped from outside (the run ended while its table was still building)."""


def build_cancel(event: threading.Event | None) -> contextvars.Token[threading.Event | None]:
    """Make builds in this context stop when `event` is set (the caller resets the token)."""
    return _CANCEL.set(event)


def _check_cancel() -> None:
    event = _CANCEL.get()
    if event is not None and event.is_set():
        raise BuildCancelled("the table's build was stopped")


@contextlib.contextmanager
def build_progress(sink: ProgressSink | None) -> Iterator[None]:
    """Report the progress of every table built inside this block to `sink`."""
    token = _PROGRESS.set(sink)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def table_paths(cache_base: str) -> tuple[str, str]:
    """(database, description) paths for a cache key path like `<dir>/<key>`."""
    return f"{cache_base}.t{TABLE_VERSION}.duckdb", f"{cache_base}.t{TABLE_VERSION}.json"


def table_cached(cache_base: str | None) -> bool:
    """Whether the cache holds a sound table under this key (ensure_table would only load it)."""
    if cache_base is None:
        return False
    db_path, info_path = table_paths(cache_base)
    return _load_info(info_path, db_path)[0] is not None


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
    segments: Sequence[Segment] | None = None,
) -> dict[str, Any] | None:
    """The description of `path`'s table, built now unless the cache holds it; None when DuckDB is missing.

    The description is a dict: path, format, columns [[name, type]], rows (what
    `count(*)` over `log` gives: its records), parsed, not_rows (the lines `log` leaves
    out, in words), examples, note, values, build_s. Raises TableError when the build fails.
    With no cache (`cache_base` None, or a cache that cannot be written) the table is a
    private temp file the Source removes (`owned`). A cached table found damaged is said
    in `warnings` and built anew. `cut`: lines to store cut (see build_table). `segments`: the
    parts of a text several files make, each parsed by its own format when they differ
    (rlm.input.mixedformat).
    """
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return None
    from rlm.input.logformats import recognize
    from rlm.input.mixedformat import mixed_format

    year = time.gmtime(os.stat(path).st_mtime).tm_year
    if cache_base is not None:
        db_path, info_path = table_paths(cache_base)
        info, damage = _load_info(info_path, db_path)
        if info is not None:
            return info
        if damage and warnings is not None:
            warnings.append(f"a damaged cache entry of this input was rebuilt (table: {damage})")
    fmt = (mixed_format(segments, year=year) if segments else None) or recognize(
        profile_format, sample[:_FIRST_LINES], year=year
    )
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


def columns_ahead(profile_format: str, sample: list[str]) -> list[tuple[str, str]]:
    """The columns a log's table will have, known from its format before it is built (the
    build reads the format from the same leading lines): line_no, line and what the format
    parses out. Empty for a CSV or JSON lines, whose columns the build's reader decides (their
    header or keys are among the first lines the prompt shows), and for unparsed text."""
    try:
        import duckdb
    except ImportError:
        return []  # no table will be built either (ensure_table)
    from rlm.input.logformats import recognize

    fmt = recognize(profile_format, sample[:_FIRST_LINES])
    if fmt.kind != "lines" or not fmt.columns:
        return []
    # Each type as DuckDB names it in the built table's description (TIMESTAMPTZ is
    # TIMESTAMP WITH TIME ZONE there): the model is told one name for one type.
    parsed = [(name, str(duckdb.sqltype(typ))) for name, typ in fmt.columns]
    return [("line_no", "BIGINT"), ("line", "VARCHAR"), *parsed]


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
        and isinstance(info.get("not_rows") or "", str)
        and _lead_ins(info.get("lead_ins") or {})
        and isinstance(info.get("addresses"), list)
        and all(isinstance(n, str) for n in info["addresses"])
    )


def _lead_ins(value: Any) -> bool:
    """{column name: [lead-in, ...]}, each of the shape the build keeps, nothing else: they go
    into the model's prompt, and a cached file is read as data, never trusted."""
    from rlm.input.tablevalues import LEAD_IN_SHAPE

    return isinstance(value, dict) and all(
        isinstance(k, str)
        and isinstance(v, list)
        and all(isinstance(x, str) and LEAD_IN_SHAPE.fullmatch(x) for x in v)
        for k, v in value.items()
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
            config=NO_EXTENSION_LOADING,
        )
        try:
            found = con.execute("SELECT count(*) FROM log").fetchone()
        finally:
            con.close()
    except duckdb.Error as exc:
        return f"its database cannot be opened: {first_line(exc)}"
    if found is None or found[0] != rows:
        return f"its database holds {found[0] if found else 0:,} rows, its description {rows:,}"
    return None


def _with_cut_note(note: str | None, cut: list[tuple[int, int]] | None) -> str | None:
    if not cut:
        return note
    said = (
        f"{len(cut):,} line{'s' if len(cut) != 1 else ''} over {LINE_CUT_BYTES >> 20} MiB "
        f"{'are' if len(cut) != 1 else 'is'} stored cut to {LINE_CUT_BYTES >> 20} MiB in `line` "
        "(peek and context_lines read them whole)"
    )
    return f"{note}; {said}" if note else said


# The line end the build's readers split at (SQL text): '\n', or '\r\n' for a file whose every
# carriage return ends a line (tablecopy.crlf_only). DuckDB splits at a lone '\r' either way; told
# '\r\n', it reads "a\r\n" and "b\n" as the lines a and b, as context_lines does.
_NEW_LINE: contextvars.ContextVar[str] = contextvars.ContextVar("rlm_table_new_line", default="\\n")


def _raw_source(path: str, numbered: bool = True, *, skip: int = 0, limit: int | None = None) -> str:
    """A DuckDB scan of `path` as one VARCHAR column, one row per '\\n'-terminated line, in file order.

    Unnumbered, line_no is NULL: numbering with row_number() serialises the
    scan and costs about half of a big build; the stored table is numbered by
    its rowid instead (see _create_log). `skip` and `limit` select a run of
    lines: the reader counts the lines it skips as it reads them (a stray
    carriage return splits both alike), and a LIMIT over one thread streams.
    """
    lit = sql_string(path)
    number = "row_number() OVER ()" if numbered else "NULL::BIGINT"
    return (
        f"SELECT {number} AS line_no, coalesce(line, '') AS line FROM read_csv({lit}, "
        "columns={'line': 'VARCHAR'}, header=false, delim='\\x1f', quote='', escape='', auto_detect=false, "
        f"new_line='{_NEW_LINE.get()}', strict_mode=false, max_line_size={_MAX_LINE_BYTES}, buffer_size={_READ_BUFFER_BYTES}, "
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
            path = cut_long_lines(path, work, cut, LINE_CUT_BYTES)  # built from a copy with those lines cut
        # DuckDB reads UTF-8 only, and splits lines at a carriage return too. Most files
        # are '\n'-only UTF-8: the table is built straight from them, no pass over the
        # file beforehand. A file whose every '\r' ends a line (CRLF endings, some LF among
        # them) is read as it is too, DuckDB told '\r\n' ends a line (_NEW_LINE): looking
        # for a stray '\r' costs about a second a GB, the copy below 7-9 s (1 GB syslog with
        # CRLF endings). Otherwise DuckDB gets a copy with '\n' endings (a line's final '\r'
        # dropped, as context_lines does; any other '\r' read as a space) and invalid bytes
        # as U+FFFD, exactly as peek and context_lines show them: made at once when the
        # encoding or the first lines call for it, after the build when a '\r' further on
        # made DuckDB's lines more than the file's.
        # Parts of different formats are read a run of lines each (a skip and a limit): a stray
        # '\r' anywhere would shift every later run, and the limits would hide it from the
        # count below, so a text of several formats is looked through for one first.
        new_line = "\\n"
        if not utf8:
            source = copy_for_duckdb(path, work, encoding)
        elif head_has_cr(path) or (fmt.kind == "mixed" and has_cr(path)):
            source, new_line = _without_stray_cr(path, work)
        else:
            source = path
        try:
            built = _build(duckdb, fmt, source, tmp_db, work, n_lines, parts=parts, new_line=new_line)
        except duckdb.OutOfMemoryException:
            # Wide rows (JSON objects with hundreds of nested fields: a row group holds a
            # buffer per field) need more than the cap: once more at four times it, with as
            # many threads as before. Each thread holds such buffers (and, keeping file order,
            # its batches until their turn): on a 1 GB JSON lines file of NGINX Plus status
            # objects, 640 MB ran out with two threads and built in 10 s with one.
            _remove_db(tmp_db)
            built = _build(
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
                new_line=new_line,
            )
        # Lines more than the file's: a '\r' past the first lines that DuckDB read as a line end.
        # Built again as its carriage returns call for, and from a copy if that still differs.
        while built.lines != n_lines and source == path and has_cr(path):
            _remove_db(tmp_db)
            if new_line == "\\n":
                source, new_line = _without_stray_cr(path, work)
            else:
                source, new_line = copy_for_duckdb(path, work, None), "\\n"
            built = _build(duckdb, fmt, source, tmp_db, work, n_lines, parts=parts, new_line=new_line)
        if built.lines != n_lines:
            raise TableError(f"the table has {built.lines:,} lines but the file {n_lines:,}")
        _check_cancel()
        # 0400 before it has its name: read-only, even to the user's own processes, and to a
        # worker handed a hard link of it (rlm.sandbox.client), Landlock or not.
        publish_private(tmp_db, db_path, mode=0o400)
        columns = built.columns
        values, examples, leads, addresses = _what_columns_hold(duckdb, db_path, columns, fmt)
    except Exception as exc:
        # DuckDB answers a Ctrl-C or SIGTERM that lands inside a query with an error of its
        # own ("Query interrupted", or "connection is busy" from a part still running): the
        # user's stop, never "no table" and a run that goes on.
        _stop_if_asked(exc)
        if isinstance(exc, duckdb.Error):
            raise TableError(f"DuckDB could not build the table: {first_line(exc)}") from None
        raise
    finally:
        if (sink := _EARLY.get()) is not None:
            sink(None)  # before its folder, and the early table in it, go
        workdir.close()
    return {
        "version": TABLE_VERSION,
        "path": db_path,
        "format": fmt.name if columns else "text",
        "columns": [["line_no", "BIGINT"], ["line", "VARCHAR"], *[[n, t] for n, t in columns]],
        "rows": built.rows,
        "parsed": built.parsed,
        "not_rows": built.not_rows,
        "examples": examples,
        "note": _with_cut_note(built.note, cut),
        "values": values,
        "lead_ins": leads,
        "addresses": addresses,
        "build_s": round(time.perf_counter() - started, 3),
    }


def _without_stray_cr(path: str, work: str) -> tuple[str, str]:
    """What DuckDB reads of a UTF-8 file with carriage returns, and the line end it splits at:
    the file itself at '\r\n' when every '\r' ends a line, else a '\n'-only copy."""
    if crlf_only(path):
        return path, "\\r\\n"
    return copy_for_duckdb(path, work, None), "\\n"


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
) -> tuple[dict[str, list[list[Any]]], list[str], dict[str, list[str]], list[str]]:
    """The profile's common values of the built table's categorical columns, its example
    queries, the lead-ins of its free-text columns and its columns of IP addresses
    (rlm.input.tablevalues)."""
    from rlm.input.tablevalues import (
        address_columns,
        common_values,
        example_queries,
        found_measure,
        lead_ins,
        reserved_words,
    )

    con = duckdb.connect(db_path, read_only=True, config={"memory_limit": f"{_build_memory_mb()}MB"})
    try:
        if not columns:
            return {}, example_queries([], {}, []), lead_ins(con, [], {}), []
        values, entities = common_values(con, columns, fmt.categories, fmt.entities)
        reserved = reserved_words(con)
        leads = lead_ins(con, columns, values)
        addresses = address_columns(con, columns)
    finally:
        con.close()
    # A log format declares what its totals are of (if anything); CSV and JSON lines have it found.
    measure = fmt.measure if fmt.categories else found_measure(columns)
    return values, example_queries(columns, values, entities, measure, reserved), leads, addresses


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
    new_line: str = "\\n",
) -> _Built:
    """Create `log` in a new database `tmp_db`, its lines ending at `new_line` (_NEW_LINE)."""
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
            **NO_EXTENSION_LOADING,
        },
    )
    try:
        settle_connection(con, duckdb.Error)
        if fmt.kind == "jsonl":
            # JSON lines: every string column zstd-compressed (nested objects' long strings). Not
            # a CSV's fields: forced on them, a 400 MB CSV's took 8.8 s to store against 3.3-6 s
            # with DuckDB's own choice (its `line` is zstd all the same: _create_csv).
            con.execute("SET force_compression = 'zstd'")
        note = fmt.note
        told = _NEW_LINE.set(new_line)
        try:
            columns, parsed = _create_log(con, fmt, source, n_lines, n_parts, (tmp_db, work))
        finally:
            _NEW_LINE.reset(told)
        if isinstance(parsed, str):  # the format's columns could not be parsed: say why
            note, parsed = parsed, 0
        lines = con.execute("SELECT count(*) FROM log").fetchone()[0]
        not_rows = _data_rows_only(con, fmt, parsed) if columns else None
        rows = con.execute("SELECT count(*) FROM log").fetchone()[0] if not_rows else lines
    finally:
        con.close()
    return _Built(columns, parsed, lines, rows, note, not_rows)


@dataclass(frozen=True)
class _Built:
    columns: list[tuple[str, str]]
    parsed: int  # lines (or records) whose fields were parsed
    lines: int  # the file's lines the database holds (`log_lines` where some are not rows)
    rows: int  # `SELECT count(*) FROM log`
    note: str | None
    not_rows: str | None  # which lines `log` leaves out, in words, or None


def _data_rows_only(con: Any, fmt: Any, parsed: int) -> str | None:
    """Leave out of `log` the lines that hold no record, so that `count(*)` counts records:
    a CSV's header (and the blank lines after its last record), a JSON-lines file's blank
    lines. Every line stays in `log_lines` (and in context_lines); line_no keeps the file's
    numbering. Returns which lines were left out, in words, or None when none were."""
    if fmt.kind == "csv":
        con.execute("ALTER VIEW log RENAME TO log_lines")
        # The records straight from their table, not through log_lines: a query that does not read
        # `line` reads the fields alone.
        fields = [(str(r[0]), str(r[1])) for r in con.execute("DESCRIBE log_fields").fetchall()]
        con.execute(f"CREATE VIEW log AS {_csv_records(fields, fmt.delimiter or ',')}")
        after = con.execute(f"SELECT count(*) FROM log_lines WHERE line_no > {parsed + 1}").fetchone()[0]
        blank = (
            f" and the {after:,} blank line{'s' if after != 1 else ''} after the last record" if after else ""
        )
        return f"line 1 (the header){blank}"
    if fmt.kind == "jsonl":
        blank = con.execute("SELECT count(*) FROM log_data WHERE trim(line) = ''").fetchone()[0]
        if not blank:
            return None
        con.execute("CREATE VIEW log_lines AS SELECT rowid + 1 AS line_no, * FROM log_data")
        con.execute("CREATE OR REPLACE VIEW log AS SELECT * FROM log_lines WHERE trim(line) <> ''")
        return f"{blank:,} blank line{'s' if blank != 1 else ''}"
    return None


def _create_log(
    con: Any, fmt: Any, source: str, n_lines: int, parts: int = 1, db: tuple[str, str] | None = None
) -> tuple[list[tuple[str, str]], int | str]:
    """CREATE `log`; returns (parsed columns with their types, lines parsed or why none were).
    `db`: the database's path and the build's folder, where an early table is copied."""
    if fmt.kind == "lines":
        return _create_lines(con, fmt, source, n_lines, parts, db)
    if fmt.kind == "mixed":
        return _create_mixed(con, fmt, source, n_lines, parts)
    if fmt.kind == "jsonl":
        return _create_jsonl(con, source)
    if fmt.kind == "csv":
        return _create_csv(con, fmt, source, n_lines)
    _create_text(con, source)
    return [], 0


def _create_text(con: Any, source: str) -> None:
    """`log` as the file's lines alone, stored in file order and numbered by rowid (no window,
    no sort: DuckDB's ordered parallel insert keeps file order)."""
    con.execute("CREATE TABLE log_data (line VARCHAR USING COMPRESSION zstd)")
    _run_side_by_side(
        con, [f"INSERT INTO log_data SELECT line FROM ({_raw_source(source, numbered=False)})"], source=source
    )
    con.execute("CREATE VIEW log AS SELECT rowid + 1 AS line_no, * FROM log_data")


def _create_lines(
    con: Any, fmt: Any, source: str, n_lines: int, parts: int, db: tuple[str, str] | None = None
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
    described = con.execute(f"DESCRIBE {_lines_select(fmt.select, source)}").fetchall()
    defs = ", ".join(
        f"{sql_name(name)} {typ}" + (" USING COMPRESSION zstd" if name == "line" else "")
        for name, typ, *_ in described
    )
    for table in tables:
        con.execute(f"CREATE TABLE {table} ({defs})")
    inserts = [
        f"INSERT INTO {table} BY NAME "
        + _lines_select(fmt.select, source, skip=lo, limit=hi - lo if i < parts - 1 else None)
        for i, (table, lo, hi) in enumerate(zip(tables, bounds, bounds[1:], strict=False))
    ]
    started, size = time.monotonic(), os.path.getsize(source)
    with _phase(0.0, _FIELDS_SHARE if fmt.later else 1.0, started, size):
        _run_side_by_side(
            con,
            inserts,
            spans=[(lo / n_lines, hi / n_lines) for lo, hi in zip(bounds, bounds[1:], strict=False)],
            source=source,
        )
    _log_view(con, tables, bounds, lambda table: f"* FROM {table}")
    if fmt.later:
        with _phase(_FIELDS_SHARE, 1.0, started, size):
            _add_later_columns(con, fmt, tables, bounds, n_lines, db)
    cols = _columns(con)
    if not cols:
        return [], 0
    first = cols[0][0]
    parsed = con.execute(f'SELECT count("{first}") FROM log').fetchone()[0]
    return cols, parsed


def _add_later_columns(
    con: Any, fmt: Any, tables: list[str], bounds: list[int], n_lines: int, db: tuple[str, str] | None
) -> None:
    """The format's `later` columns, computed from the stored ones into a table beside each part
    (later_data, later_data_1, ...) in the same row order; `log` then joins each part with its
    own by position. Before they are built, the table is copied for the run's early queries
    (_EARLY), those columns in it stand-ins that raise when read, once its lines are the file's
    (a stray '\r' makes a build again)."""
    sink = _EARLY.get()
    if sink is not None and db is not None:
        stored = con.execute("SELECT count(*) FROM log").fetchone()[0]
        if stored == n_lines:
            db_path, work = db
            # The early table has every column of the whole one, named and typed alike, so that a
            # query binds on it as on the whole (a missing `user` would bind to DuckDB's own
            # current_user; an alias or an outer query's column could take a missing name); a
            # later column read there raises LATER_COLUMN, and the worker runs the query again
            # on the whole table (rlm.sandbox.worker.sql_session).
            stand_ins = ", ".join(
                f"error({sql_string(LATER_COLUMN)})::{typ} AS {sql_name(name)}" for name, typ, _ in fmt.later
            )
            _log_view(con, tables, bounds, lambda table: f"*, {stand_ins} FROM {table}")
            con.execute("CHECKPOINT")
            # A name of its own each time: a worker may hold an earlier one (a hard link of it).
            fd, early = tempfile.mkstemp(prefix="early-", suffix=".duckdb", dir=work)
            os.close(fd)
            shutil.copyfile(db_path, early)  # by the kernel (sendfile): 1 GB syslog's, 238 MB
            os.chmod(early, 0o400)
            sink(early)
    sides = [table.replace("log_data", "later_data", 1) for table in tables]
    later = ", ".join(f"{expr} AS {sql_name(name)}" for name, _, expr in fmt.later)
    _check_cancel()
    _run_side_by_side(
        con,
        [
            f"CREATE TABLE {side} AS SELECT {later} FROM {table}"
            for table, side in zip(tables, sides, strict=True)
        ],
        source=db[0] if db is not None else "",  # its size is not told (_phase)
    )
    joined = dict(zip(tables, sides, strict=True))
    _log_view(con, tables, bounds, lambda table: f"* FROM {table} POSITIONAL JOIN {joined[table]}")


def _log_view(con: Any, tables: list[str], bounds: list[int], rest: Callable[[str], str]) -> None:
    """`log`: the parts' rows in file order, each part's numbered by its rowid plus the lines
    before it; `rest(table)` is what each part's SELECT gives after line_no."""
    con.execute(
        "CREATE OR REPLACE VIEW log AS "
        + " UNION ALL ".join(
            f"SELECT {table}.rowid + {lo + 1} AS line_no, {rest(table)}"
            for table, lo in zip(tables, bounds, strict=False)
        )
    )


# A syslog's build: the share of its time its own fields take, the rest its sshd columns
# (1 GB syslog, a third of its lines sshd's: 13 s of 24.6 s; from the stored fields, less).
_FIELDS_SHARE = 0.7


@contextlib.contextmanager
def _phase(lo: float, hi: float, started: float, size: int) -> Iterator[None]:
    """The build's progress within this block told as `lo`..`hi` of the whole build of a file
    of `size` bytes, its seconds counted from `started` (the time left at the build's pace)."""
    sink = _PROGRESS.get()
    if sink is None or (lo, hi) == (0.0, 1.0):
        yield
        return

    def scaled(share: float, _size: int, _seconds: float) -> None:
        sink(lo + share * (hi - lo), size, time.monotonic() - started)

    token = _PROGRESS.set(scaled)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _create_mixed(
    con: Any, fmt: Any, source: str, n_lines: int, parallel: int
) -> tuple[list[tuple[str, str]], int | str]:
    """`log` for parts of different formats (rlm.input.mixedformat): each run of lines parsed by
    its own format into a table of its own (log_data, log_data_1, ...), `parallel` at once, as a
    log's parts are (_create_lines); `log` is their union by name, numbered by rowid."""
    runs = fmt.runs
    tables = ["log_data"] + [f"log_data_{i}" for i in range(1, len(runs))]
    inserts, spans = [], []
    for table, run in zip(tables, runs, strict=True):
        select = _lines_select(run.fmt.whole_select, source, skip=run.first, limit=run.end - run.first)
        described = con.execute(f"DESCRIBE {select}").fetchall()
        defs = ", ".join(
            f"{sql_name(name)} {typ}" + (" USING COMPRESSION zstd" if name == "line" else "")
            for name, typ, *_ in described
        )
        con.execute(f"CREATE TABLE {table} ({defs})")
        inserts.append(f"INSERT INTO {table} BY NAME {select}")
        spans.append((run.first / max(1, n_lines), run.end / max(1, n_lines)))
    step = max(1, parallel)
    for at in range(0, len(inserts), step):
        _run_side_by_side(con, inserts[at : at + step], spans=spans[at : at + step], source=source)
    con.execute(
        "CREATE VIEW log AS "
        + " UNION ALL BY NAME ".join(
            f"SELECT rowid + {run.first + 1} AS line_no, * FROM {table}"
            for table, run in zip(tables, runs, strict=True)
        )
    )
    parsed = 0
    for table, run in zip(tables, runs, strict=True):
        if run.fmt.columns:  # a run's lines parsed: those whose first column of its format is set
            first = sql_name(run.fmt.columns[0][0])
            parsed += con.execute(f"SELECT count({first}) FROM {table}").fetchone()[0]
    return _columns(con), parsed


def _part_bounds(n_lines: int, parts: int) -> list[int]:
    """Where each run of lines starts (and the last ends), so that the runs end together: each
    part's reader first reads past the lines before its run, so later runs are shorter. With
    r the skip's share of a line's cost, run i is r * (its first line) shorter than run 0."""
    r = _SKIP_SHARE
    first = n_lines * r / (1 - (1 - r) ** parts)
    return [min(n_lines, round(first * (1 - (1 - r) ** i) / r)) for i in range(parts)] + [n_lines]


def _lines_select(select: str, source: str, *, skip: int = 0, limit: int | None = None) -> str:
    """A format's `select` over a run of lines, without line_no (the stored rows are numbered by rowid)."""
    unnumbered = _raw_source(source, numbered=False, skip=skip, limit=limit)
    return f"SELECT * EXCLUDE (line_no) FROM (WITH src AS ({unnumbered}) {select})"


def _run_side_by_side(
    con: Any, statements: list[str], *, spans: list[tuple[float, float]] | None = None, source: str = ""
) -> None:
    """Run each statement on a cursor of its own, each from a thread of its own (DuckDB drops
    the GIL while a query runs); the first error is raised once all have ended. While they run,
    the build's progress goes to the sink of build_progress, if any: each statement reads the
    file from its start and works on its `spans` share of it (a log's part skips to its lines;
    default: all of it), so the share done is what its reader has passed of its span."""
    sink = _PROGRESS.get()
    cancel = _CANCEL.get()
    _check_cancel()
    if len(statements) == 1 and sink is None and cancel is None:
        con.execute(statements[0])
        return
    spans = spans or [(0.0, 1.0)] * len(statements)
    errors: list[BaseException] = []
    cursors = [con.cursor() for _ in statements]
    if sink is not None:
        for cur in cursors:  # DuckDB tracks a query's progress only when asked to, and prints none
            cur.execute("SET enable_progress_bar = true")
            cur.execute("SET enable_progress_bar_print = false")

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
    started = time.monotonic()
    size = os.path.getsize(source) if sink is not None and source else 0
    shown = 0.0  # the share told last: DuckDB's own progress of a query may step back
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(_PROGRESS_EVERY)
                _check_cancel()
                if sink is not None and thread.is_alive():
                    shown = max(shown, _share_done(cursors, threads, spans))
                    sink(shown, size, time.monotonic() - started)
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


def _share_done(
    cursors: list[Any], threads: list[threading.Thread], spans: list[tuple[float, float]]
) -> float:
    """The share of the build's work done: each statement's reader position within its span."""
    done = 0.0
    for cur, thread, (lo, hi) in zip(cursors, threads, spans, strict=True):
        if not thread.is_alive():
            done += hi - lo
            continue
        try:
            at = max(0.0, float(cur.query_progress())) / 100
        except Exception:  # noqa: BLE001 (no query running on it yet, or already closed)
            at = 0.0
        done += min(max(at - lo, 0.0), hi - lo)
    total = sum(hi - lo for lo, hi in spans)
    return min(1.0, done / total) if total else 0.0


def _create_csv(con: Any, fmt: Any, source: str, n_lines: int) -> tuple[list[tuple[str, str]], int | str]:
    """`log` for a CSV: DuckDB's own parallel reader stores the records (`log_fields`), in file
    order, and nothing else: a record's line number is its position (one record a line, which
    is checked), and its `line` is its fields joined again as a CSV writer would, computed by
    the view when a query reads it. The raw text stored beside the fields took as long again
    as the fields (1 GB CSV, 2 cores: the fields alone 5.0 s, text and fields 8.1 s), for a
    column whose every value the fields already hold; peek() and context_lines show the raw
    lines. A quoted field that spans lines, or a blank line between records, makes the
    records fewer than the lines: the file is then stored as lines alone, its columns not
    split out, and the note says why."""
    import duckdb

    lit = sql_string(source)
    delim = ", delim='\\t'" if fmt.delimiter == "\t" else ""
    reader = f"read_csv({lit}, header=true, auto_detect=true, sample_size=20480{delim})"
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()
        outs, cols = [], []
        for name, typ in ((str(r[0]), str(r[1])) for r in described):
            alias = name + "_" if name in ("line_no", "line") else name
            outs.append(f"{sql_name(name)} AS {sql_name(alias)}")
            cols.append((alias, typ))
        fields = f"SELECT {', '.join(outs)} FROM {reader}"
        con.execute(f"CREATE TABLE log_fields AS {fields} LIMIT 0")
        _run_side_by_side(con, [f"INSERT INTO log_fields {fields}"], source=source)
    except duckdb.Error as exc:
        _stop_if_asked(exc)
        con.execute("DROP TABLE IF EXISTS log_fields")
        _create_text(con, source)
        return [], f"the CSV columns could not be parsed: {first_line(exc)}"
    records = con.execute("SELECT count(*) FROM log_fields").fetchone()[0]
    blank = _blank_lines_at_end(source, n_lines)
    if records != n_lines - 1 - blank:  # the records are lines 2 .. the last with text
        con.execute("DROP TABLE log_fields")
        _create_text(con, source)
        return [], (
            f"the CSV has {records:,} records on {n_lines - 1:,} lines (quoted fields span lines, or blank "
            "lines part records): "
            "its columns are not split out; parse `line` or use context_lines with the csv module"
        )
    # Every line of the file: the header and any blank lines after the last record with NULL
    # fields; `log` keeps the records only (_data_rows_only).
    nulls = ", ".join(f"NULL::{typ} AS {sql_name(n)}" for n, typ in cols)
    header = sql_string(_first_line(source))
    con.execute(
        f"CREATE VIEW log AS SELECT 1::BIGINT AS line_no, {header} AS line, {nulls} "
        f"UNION ALL {_csv_records(cols, fmt.delimiter or ',')} "
        f"UNION ALL SELECT range::BIGINT AS line_no, '' AS line, {nulls} FROM range({records + 2}, {n_lines + 1})"
    )
    return cols, records


_TAIL_BYTES = 1 << 20  # read at a time from a CSV's end, looking for blank lines after its last record


def _blank_lines_at_end(path: str, n_lines: int) -> int:
    """How many of the file's last lines are empty ('\\r' alone counts as empty): the line ends
    after its last other byte, read from its end a block at a time, less the last line's own."""
    size = end = os.path.getsize(path)
    newlines = 0
    with open(path, "rb") as fh:
        if size:
            fh.seek(size - 1)
            ends_in_newline = fh.read(1) == b"\n"
        while end > 0:
            start = max(0, end - _TAIL_BYTES)
            fh.seek(start)
            block = fh.read(end - start)
            kept = block.rstrip(b"\r\n")
            newlines += block.count(b"\n", len(kept))
            if kept:
                break
            end = start
    return min(max(0, newlines - (1 if size and ends_in_newline else 0)), n_lines)


def _first_line(path: str) -> str:
    """The file's first line (a CSV's header) as text, without its line end."""
    with open(path, "rb") as fh:
        head = fh.readline(LINE_CUT_BYTES)
    text = head.decode("utf-8", errors="replace").rstrip("\r\n")
    return text[1:] if text.startswith("\ufeff") else text


def _csv_records(cols: Sequence[tuple[str, str]], delimiter: str) -> str:
    """The CSV's records numbered by their lines (the header is line 1), each with `line`: its
    fields joined by the delimiter, a text field quoted where it holds the delimiter, a quote or
    a line end (a number's, a date's or a time's text holds none), computed only by a query that
    reads it. A LIKE over it takes 12 s of one thread on a 1 GB CSV (14 columns, 6 of them
    text); with every field checked for quoting by four `contains`, 34 s."""
    special = sql_string("[" + delimiter + '"\r\n]')
    parts = []
    for name, typ in cols:
        col = sql_name(name)
        if typ.upper() == "VARCHAR":
            parts.append(
                f"CASE WHEN regexp_matches({col}, {special}) THEN '\"' || replace({col}, '\"', '\"\"') || '\"' "
                f"ELSE coalesce({col}, '') END"
            )
        else:
            parts.append(f"coalesce(CAST({col} AS VARCHAR), '')")
    line = f"concat_ws({sql_string(delimiter)}, {', '.join(parts)})" if parts else "''"
    return f"SELECT rowid + 2 AS line_no, {line} AS line, * FROM log_fields"


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
    lit = sql_string(structure)
    outs = []
    for key in keys:
        alias = key + "_" if key in ("line_no", "line") else key
        outs.append(f"j.{sql_name(key)} AS {sql_name(alias)}")
    _run_side_by_side(
        con,
        [
            f"CREATE TABLE log_data AS SELECT line, {', '.join(outs)} FROM (SELECT line, "
            f"CASE WHEN {is_object} THEN try(from_json(line, {lit})) END AS j FROM ({raw}))"
        ],
        source=source,
    )
    con.execute("CREATE VIEW log AS SELECT rowid + 1 AS line_no, * FROM log_data")
    cols = _columns(con)
    parsed = con.execute(f"SELECT count(*) FROM log_data WHERE {is_object}").fetchone()[0]
    return cols, parsed


def _columns(con: Any) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute("DESCRIBE log").fetchall() if r[0] not in ("line_no", "line")]


_MB_PER_THREAD = 256  # of the build's memory cap, for each thread of a CSV or JSON lines build


def _build_memory_mb() -> int:
    """The build's memory cap: RLM_TABLE_BUILD_MB when set (at least 64), else as BUILD_MEMORY_MB says."""
    try:
        asked = int(os.environ.get("RLM_TABLE_BUILD_MB", "") or 0)
    except ValueError:
        asked = 0
    if asked:
        return max(64, asked)
    wanted = _MB_PER_THREAD * _cpus() + _MB_HEADROOM
    return max(BUILD_MEMORY_MB, min(wanted, _ram_mb() // _RAM_SHARE))


# Where a container's memory limit is read (cgroup v2, then v1): inside one, the machine's memory
# is the host's, and a cap taken from it could outgrow the container (its build killed).
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def _ram_mb() -> int:
    """The memory this process may use in MB: the machine's, or its container's limit when that is
    less (0 when neither can be told: the cap then stays at its least)."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (AttributeError, OSError, ValueError):
        ram = 0
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) is no limit; v1 says so with a number near 2**63
            ram = min(ram, int(text) >> 20) if ram else int(text) >> 20
    return ram


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


def _py_str(text: str) -> str:
    """`text` as a Python string literal, in double quotes when it can be (SQL quotes values with ')."""
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


EXAMPLES_LINE = "Examples, inside execute: "  # how the profile's line of example queries starts


def describe_table(info: dict[str, Any], max_chars: int = 420) -> str:
    """The profile's lines about the table: columns and types, lines parsed, common values, example queries."""
    cols = ", ".join(f"{n} {t}" for n, t in info["columns"])
    if len(cols) > max_chars - 120:
        cols = cols[: max_chars - 121].rsplit(",", 1)[0] + ", …"
    rows, parsed = int(info["rows"]), int(info.get("parsed") or 0)
    # A count(*) is a count of records: the lines it leaves out are said where the model reads it.
    not_rows = (
        f"; a row is a record, not rows: {info['not_rows']} (in `log_lines`)" if info.get("not_rows") else ""
    )
    # A CSV's `line` is rebuilt from its fields (_csv_records): said, as a value may read
    # otherwise than in the file ("2.0" for "2"); peek() shows the file's own text.
    rebuilt = "; `line` is a record's fields joined again" if info["format"] in ("csv", "tsv") else ""
    head = f"Table `log` ({info['format']}{not_rows}{rebuilt}): {cols}."
    if len(info["columns"]) > 2:
        others = "" if parsed == rows else "; the others have NULL fields"
        head += f" {parsed:,} of {rows:,} rows parsed{others}."
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
