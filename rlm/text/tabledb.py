"""The table's DuckDB file as both processes open it, written once.

The parent builds the file (rlm.input.tables) and the worker queries it
(rlm.sandbox.worker.sql_session); they must agree on how a connection to it
behaves: it never installs or loads a DuckDB extension by itself (nothing may
be fetched, and after lock-down nothing can be loaded), it shows timestamps in
UTC whatever the machine's zone, and it prints no progress bar (DuckDB writes
it on stdout, which belongs to the answer). A DuckDB error is told in one line
on both sides.

Worker-safe (rlm.text): standard library only. DuckDB is the caller's (its
error class is handed in), so the worker imports this before lock-down and the
parent pays nothing for it until it opens a table.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_EXTENSION_LOADING", "first_line", "settle_connection"]

# connect() configuration every connection to a table file starts from.
NO_EXTENSION_LOADING: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


def settle_connection(con: Any, duckdb_error: type[BaseException]) -> None:
    """Timestamps with a time zone show in UTC, and no progress bar (connection options, so they
    cannot be given to connect()). A DuckDB without time zones (`duckdb_error`) keeps its own."""
    con.execute("SET enable_progress_bar = false")
    try:
        con.execute("SET TimeZone = 'UTC'")
    except duckdb_error:
        pass


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (DuckDB's run to several), or its class's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# What a column of an early table, still being built, raises when a query reads it
# (rlm.input.tables, rlm.sandbox.worker.sql_session).
LATER_COLUMN = "rlm: this column is still being built"
