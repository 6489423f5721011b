"""sql() results inside the worker: the rows a query returns, and how they read in the REPL.

A result is a list of row tuples (model code indexes and loops over it) with
`.columns`, and it holds every row the query gives: a result too big for the
worker's memory is refused with an error, never handed back short
(MAX_RESULT_CELLS). Its echo is a small table of the first rows, each value
whole, that says how many rows there are and when the query's own LIMIT may
have cut them.

Worker-safe: standard library only.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.sandbox.worker.formatting import MAX_CELL_OUTPUT

__all__ = ["MAX_RESULT_CELLS", "SqlResult", "query_limit", "render_table"]

# The values (rows x columns) one sql() result may hold. Held as Python tuples a value costs
# 56-193 bytes (measured on the Apache table: a small int 58, a timestamp 105, an IP 118, a user
# agent 193, with the tuple's and the list's share), so 3 million cost 170-580 MB: within the
# worker's default headroom of 1 GiB, half of which DuckDB may use while the query runs. That is
# 3 million rows of one column, 230,000 rows of the Apache table's 13. A bigger result is an
# error that says to aggregate or LIMIT in SQL, never a short list.
MAX_RESULT_CELLS = 3_000_000
SHOWN_ROWS = 20  # rows the REPL echo shows
# Columns are padded to line up up to this width; a longer value is shown whole all the same
# (padding every row to a 2,000-character URL would fill the output with spaces).
ALIGNED_CELL_CHARS = 60


class SqlResult(list[Any]):
    """sql() inside code: a list of every row tuple with `.columns`; echoed as a small table."""

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]], limit: int | None = None) -> None:
        super().__init__(rows)
        self.columns = columns
        self.limit = limit  # the query's own final LIMIT, if any

    def __repr__(self) -> str:
        return render_table(self.columns, self, limit=self.limit)  # no copy: it may hold millions of rows

    __str__ = __repr__


def _cell(v: Any) -> str:
    """A value as the table shows it: whole, line breaks escaped; past the cell's output cap cut,
    with the number of characters left out (the row in the result keeps it whole)."""
    s = "NULL" if v is None else str(v)
    s = s.replace("\n", "\\n").replace("\r", "\\r")
    if len(s) <= MAX_CELL_OUTPUT:
        return s
    return (
        s[:MAX_CELL_OUTPUT]
        + f" …[+{len(s) - MAX_CELL_OUTPUT:,} characters not shown; the row holds the whole value]"
    )


# A query's own final LIMIT (and OFFSET): a result that fills it may have been cut by it.
_FINAL_LIMIT = re.compile(r"\blimit\s+(\d+)(?:\s+offset\s+\d+)?\s*;?\s*$", re.IGNORECASE)


def query_limit(query: str) -> int | None:
    """The LIMIT a query ends with, if any."""
    m = _FINAL_LIMIT.search(query)
    return int(m.group(1)) if m else None


def render_table(columns: list[str], rows: list[tuple[Any, ...]], *, limit: int | None = None) -> str:
    """The echo of a result: the first SHOWN_ROWS rows as a table, and a line saying how many there are."""
    if not columns:
        return "(no result)"
    shown = rows[:SHOWN_ROWS]
    grid = [[_cell(v) for v in row] for row in shown]
    widths = [
        max([len(c)] + [min(len(r[i]), ALIGNED_CELL_CHARS) for r in grid]) for i, c in enumerate(columns)
    ]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("-+-".join("-" * w for w in widths))
    for r in grid:
        lines.append(" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    n = len(rows)
    if n > SHOWN_ROWS:
        lines.append(f"({n:,} rows, the first {SHOWN_ROWS} shown; the returned list holds them all)")
    else:
        lines.append(f"({n} row{'s' if n != 1 else ''})")
    if limit is not None and n == limit:
        # Small models read "(10 rows)" of a copied `LIMIT 10` as the number of distinct values.
        lines[-1] = lines[-1][:-1] + (
            f"; as many as the query's LIMIT {limit}, so there may be more: "
            "count them with count(*) or count(DISTINCT …) and no LIMIT)"
        )
    return "\n".join(lines)
