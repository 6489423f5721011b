"""sql() results inside the worker: the rows a query returns, and how they read in the REPL.

A result is a list of row tuples (model code indexes and loops over it) with
`.columns`; its echo is a small table that says when rows were cut, by sql()'s
own cap or by the query's LIMIT.

Worker-safe: standard library only.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_RESULT_ROWS", "SqlResult", "query_limit", "render_table"]

MAX_RESULT_ROWS = 100_000  # rows sql() hands back; more means the query should aggregate or LIMIT
SHOWN_ROWS = 20  # rows the REPL echo shows
SHOWN_CELL_CHARS = 60


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
    """The echo of a result: the first SHOWN_ROWS rows as a table, and a line saying how many there are."""
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
