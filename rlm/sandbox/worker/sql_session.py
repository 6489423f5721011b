"""sql() inside the worker: a read-only, confined DuckDB session over the input's table.

The parent builds the table file (rlm.input.tables); the worker opens it
read-only BEFORE lock-down (`sql_helper`, called while the worker starts),
with DuckDB's own switches off: no external access (no other file, no
network, no ATTACH / COPY / INSTALL / LOAD), no extension auto-loading, no
spilling to disk, a memory limit, one thread, and the configuration locked. A
watchdog thread, started before lock-down too, interrupts a query when the
cell's CPU time is nearly spent, so a runaway query costs that query, not the
worker.

Worker-safe: the standard library at import; duckdb is imported when a
session opens, before lock-down, and only by a worker whose input has a table.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from rlm.sandbox.worker.files import file_case
from rlm.sandbox.worker.sql_result import MAX_RESULT_CELLS, SqlResult, query_limit
from rlm.text.sqltext import sql_name, sql_string
from rlm.text.tabledb import LATER_COLUMN, NO_EXTENSION_LOADING, first_line, settle_connection

__all__ = ["SqlError", "SqlSession", "sql_helper"]


class SqlError(Exception):
    """A query failed: the message is DuckDB's, or says which limit stopped it."""


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
_FETCH_ROWS = 50_000  # rows fetched from DuckDB at a time, the cap checked between fetches


class _TooLarge(Exception):
    """A result over MAX_RESULT_CELLS, or over the memory left: the rows fetched so far are dropped."""

    def __init__(self, rows: int, columns: int, memory: bool = False) -> None:
        super().__init__(rows, columns)
        self.rows, self.columns, self.memory = rows, columns, memory


def _fetch_all(cur: Any, n_columns: int) -> list[tuple[Any, ...]]:
    """Every row of a result, fetched in batches; _TooLarge past MAX_RESULT_CELLS values or
    when the worker's memory runs out, so a result is whole or refused, never short."""
    cap_rows = max(1, MAX_RESULT_CELLS // max(1, n_columns))
    rows: list[tuple[Any, ...]] = []
    try:
        while True:
            batch = cur.fetchmany(min(_FETCH_ROWS, cap_rows + 1 - len(rows)))
            if not batch:
                return rows
            rows.extend(batch)
            if len(rows) > cap_rows:
                raise _TooLarge(len(rows) - 1, n_columns)
    except MemoryError:
        # Let the rows go before the error is built: its traceback keeps this frame alive.
        fetched = len(rows)
        rows.clear()
        batch = []
        raise _TooLarge(fetched, n_columns, memory=True) from None


class SqlSession:
    """A read-only, confined DuckDB connection to one table file, opened before lock-down.

    With `table_file` and no `db_path` the table is still being built: the connection is an
    empty in-memory one, warmed up on a stand-in `log`, and locked like any other before
    lock-down, DuckDB told the one path it may open (`allowed_paths`: that file and its
    write-ahead log's, in the one folder Landlock leaves readable). The first sql() asks the
    parent for the table (`ask("table", {})`, which waits for the build and places the file
    there) and attaches it read-only. No model query ever runs on an unlocked connection.
    (The placed file is 0400: a read-write ATTACH of it after a DETACH fails, Landlock or not.)"""

    def __init__(
        self,
        db_path: str | None,
        *,
        start_line: int | None = None,
        end_line: int | None = None,
        memory_bytes: int = 0,
        default_seconds: float = 30.0,
        files: list[Any] | None = None,
        table_file: str | None = None,
        ask: Callable[[str, dict[str, Any]], Any] | None = None,
    ) -> None:
        import duckdb

        self._duckdb = duckdb
        limit_mb = max(64, int(memory_bytes * 0.5) >> 20) if memory_bytes else 1024
        self.default_seconds = default_seconds
        self.con = duckdb.connect(
            db_path or ":memory:",
            read_only=db_path is not None,
            config={
                **NO_EXTENSION_LOADING,
                "threads": 1,
                "memory_limit": f"{limit_mb}MB",
                "max_memory": f"{limit_mb}MB",
                "temp_directory": "",
                "allow_community_extensions": False,
                "allow_unsigned_extensions": False,
                "allow_persistent_secrets": False,
            },
        )
        con = self.con
        settle_connection(con, duckdb.Error)
        self._absent_said: set[tuple[str, str]] = set()
        self._files = list(files or [])
        self._window = (start_line, end_line)
        self._pending: tuple[str, Callable[[str, dict[str, Any]], Any]] | None = None
        self._unavailable: str | None = None
        self._attaching = False
        self._early = False  # the table attached lacks its format's later columns, still being built
        if db_path is None and table_file and ask is not None:
            self._pending = (table_file, ask)
            # A stand-in of the table's first columns, so the warm-up below runs every path now.
            con.execute("CREATE TABLE log AS SELECT 1::BIGINT AS line_no, 'x' AS line")
            con.execute(f"SET allowed_paths = [{sql_string(table_file)}, {sql_string(table_file + '.wal')}]")
        self._open_table()
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
        # No file, network or setting for the queries from now on (a pending table's one path aside).
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        self.watchdog = _Watchdog(con)
        self._warming = True  # sql() runs on the stand-in, if any
        self._warm_up()
        self._warming = False
        if self._pending is not None:
            con.execute("DROP VIEW IF EXISTS temp.main.log")
            con.execute("DROP TABLE log")
            self._absent_said.clear()

    def _open_table(self) -> None:
        """Name the table's columns and make `log` the rows of this worker's window."""
        con = self.con
        # The file's table by its full name: a bare `main.log` inside a temp view is the view itself.
        self._table = (
            sql_name((con.execute("SELECT current_database()").fetchone() or ("",))[0]) + ".main.log"
        )
        # Named in the error of a query that asks for a column the table does not have.
        described = con.execute(f"DESCRIBE {self._table}").fetchall()
        self.columns = [str(r[0]) for r in described]
        self._text_columns = {str(r[0]).lower(): str(r[0]) for r in described if r[1] == "VARCHAR"}
        self._view: tuple[int, int] | None = None
        # Several inputs read as one (rlm.sandbox.worker.files): a column naming each row's file,
        # `file` unless the table has one of its own.
        self._file_column: str | None = None
        if self._files:
            self._file_column = next(
                n for n in ("file", "source_file", "input_file") if n not in self.columns
            )
            self.columns.append(self._file_column)
        start_line, end_line = self._window
        if start_line is not None or end_line is not None or self._files:
            a = max(1, int(start_line or 1))
            b = int(end_line) if end_line is not None else (1 << 62)
            self._view = (a, b)
            self._restore_log()

    def _attach(self, whole: bool) -> None:
        """The table once built: asked of the parent, attached read-only. Interrupted (the
        cell's time ran out), it is done again at the next sql(): the parent answers with the
        same file. With `whole` False the parent may hand the early table, without its format's
        later columns (rlm.input.tables.build_early); asked again, it hands the whole one under
        the same name once it is built, and that is attached instead. The connection was locked
        before lock-down: nothing here unlocks it."""
        assert self._pending is not None
        table_file, ask = self._pending
        if self._attaching:  # a generator's `finally` run by the collector inside this call
            raise SqlError("sql() was called while the table was being opened; call it again")
        self._attaching = True
        try:
            try:
                placed = ask("table", {"whole": whole})
            except Exception as exc:  # noqa: BLE001 (the parent's word: the build failed)
                self._pending, self._unavailable = None, f"no table could be built for this input ({exc})"
                return
            if not isinstance(placed, dict) or placed.get("name") != table_file.rsplit("/", 1)[-1]:
                self._pending, self._unavailable = (
                    None,
                    "the table could not be opened (the parent named no file)",
                )
                return
            early = placed.get("early") is True
            if early and self._early:  # the same early table: the whole one is still building
                return
            con = self.con
            try:
                con.execute("USE memory")
                con.execute("DETACH DATABASE IF EXISTS rlm_input")
                con.execute(f"ATTACH {sql_string(table_file)} AS rlm_input (READ_ONLY)")
                con.execute("USE rlm_input")
                self._open_table()
            except self._duckdb.Error as exc:
                self._pending, self._unavailable = None, f"the table could not be opened ({first_line(exc)})"
                return
            self._early = early
            if not early:
                self._pending = None
        finally:
            self._attaching = False

    def _statements(self, query: str) -> list[Any]:
        """The statements `query` holds (one, where it does not parse: DuckDB says why when it runs)."""
        try:
            return list(self.con.extract_statements(query))
        except self._duckdb.Error:
            return [query]

    def _warm_up(self) -> None:
        """Run sql() itself once through each path a model's first query takes: rows of the
        table (its own column types), an empty result, and the errors DuckDB raises (binder,
        parser, conversion, a refused setting), so nothing on those paths is imported or
        initialised lazily after lock-down, when it could not be."""
        self._statements("SELECT 1; SELECT 2")
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
            named = (
                f", {file_case(self._files)} AS {sql_name(self._file_column)}" if self._file_column else ""
            )
            self.con.execute(
                f"CREATE OR REPLACE TEMP VIEW log AS SELECT * REPLACE (line_no - {a - 1} AS line_no){named} "
                f"FROM {self._table} WHERE line_no BETWEEN {a} AND {b}"
            )

    def sql(self, query: str) -> SqlResult:
        """Run a read-only query over `log`; returns every row it gives, or fails when they are
        more than MAX_RESULT_CELLS values (rows x columns)."""
        if not isinstance(query, str):
            raise TypeError('sql(query): the query is a string of SQL, e.g. sql("SELECT count(*) FROM log")')
        if self._pending is not None and not self._warming:
            # The early table answers a query that reads none of the columns still being built;
            # one that reads one raises (_Later) and runs again on the whole table. Several
            # statements wait for it first: those before the one that raised would run twice.
            self._attach(whole=len(self._statements(query)) > 1)
        try:
            return self._run(query)
        except _Later:  # a column the early table lacks: the whole table, built, runs it
            self._attach(whole=True)
            return self._run(query)

    def _run(self, query: str) -> SqlResult:
        duckdb = self._duckdb
        if self._unavailable is not None:
            raise SqlError(f"sql() is not available here: {self._unavailable}")
        try:
            self._restore_log()
        except duckdb.Error:
            pass
        cpu_deadline, wall_deadline, allowed = self._deadlines()
        self.watchdog.arm(cpu_deadline, wall_deadline)
        try:
            cur = self.con.execute(query)
            columns = [d[0] for d in cur.description] if cur.description else []
            rows = _fetch_all(cur, len(columns)) if columns else []
        except _TooLarge as big:
            raise SqlError(_too_large(big)) from None
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
                    f"the query needs more memory than the sandbox allows ({first_line(exc)}); "
                    "aggregate or add LIMIT instead of collecting rows"
                ) from None
            if self._early and LATER_COLUMN in str(exc):
                raise _Later from None
            if isinstance(exc, duckdb.Error):
                raise SqlError(_explain(exc, self.columns)) from None
            raise
        else:
            if _finds_nothing(rows):
                self._say_absent_values(query)  # still under the watchdog: its queries scan too
        finally:
            self.watchdog.disarm()
        return SqlResult(columns, rows, query_limit(query))

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
            ident = sql_name(column)
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
            listed = ", ".join(f"{sql_string(str(v))} {n:,}" for v, n in shown)
            which = "its values" if len(top) <= _ALL_VALUES else "its most common values"
            more = "" if len(top) <= _ALL_VALUES else ", …"
            print(
                f"(sql: no row has {column} = {sql_string(value)}; "
                + (f"{which}: {listed}{more})" if top else "the column is empty)")
            )


class _Later(Exception):
    """A query read a column of the early table that is still being built (LATER_COLUMN)."""


_ALL_VALUES = 30  # a column of at most this many values is listed whole in the note of nothing found
_SOME_VALUES = 8  # else its most common ones

# `column = 'text'` in a query, the column bare or double-quoted.
_EQUALS_TEXT = re.compile(r'(?<![\w.])"?([A-Za-z_]\w*)"?\s*==?\s*\'((?:[^\']|\'\')*)\'')


def _finds_nothing(rows: list[tuple[Any, ...]]) -> bool:
    """No rows, or one row of zeros and NULLs (a count or a sum over nothing)."""
    return not rows or (len(rows) == 1 and all(v is None or v == 0 for v in rows[0]))


def _too_large(big: _TooLarge) -> str:
    """The error of a result sql() will not hand back: the cap (or the memory) and what to do."""
    shape = f"{big.columns} column{'s' if big.columns != 1 else ''}"
    if big.memory:
        why = (
            f"the result does not fit in the sandbox's memory (it ran out after {big.rows:,} rows of {shape})"
        )
    else:
        why = (
            f"the result has more than {MAX_RESULT_CELLS:,} values (rows x columns), the most sql() returns: "
            f"over {big.rows:,} rows of {shape}"
        )
    return (
        f"sql(): {why}. Compute the figure in SQL instead of collecting rows: count(*), "
        "count(DISTINCT …), sum(…), GROUP BY, or select fewer columns, or add LIMIT"
    )


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


def sql_helper(spec: dict[str, Any], ask: Callable[[str, dict[str, Any]], Any] | None = None) -> Any:
    """The `sql` callable for a worker spec: a session over spec['table_path'], or one that explains.

    Called before lock-down (it opens the database and starts the watchdog thread). A table
    still being built (spec['table_dir'] and no path) is asked of the parent through `ask`.
    """
    table_path = spec.get("table_path")
    table_file = (
        f"{spec['table_dir']}/{spec['table_file']}"
        if spec.get("table_dir") and spec.get("table_file")
        else None
    )
    pending = not table_path and table_file is not None and ask is not None
    if not table_path and not pending:
        if spec.get("table_error"):
            return _unavailable(f"no table could be built for this input ({spec['table_error']})")
        return _unavailable(
            "no table was built for this input (a text built by the investigation, or DuckDB missing)"
        )
    try:
        session = SqlSession(
            table_path or None,
            start_line=spec.get("start_line"),
            end_line=spec.get("end_line"),
            memory_bytes=int(spec.get("memory_bytes") or 0),
            files=spec.get("parts"),
            table_file=table_file if pending else None,
            ask=ask if pending else None,
        )
    except Exception as exc:  # noqa: BLE001 (the worker still serves everything else)
        return _unavailable(f"the table could not be opened ({first_line(exc)})")
    return session.sql
