"""The typed actions' vocabulary, declared once: the ops, the fields each takes, their choices
and bounds.

The JSON schema (rlm.run.typed.schema), the checker (rlm.run.typed.check) and the text that
tells the model about them (rlm.run.typed.describe) all read these, so the three never say
different things.
"""

from __future__ import annotations

from rlm.sandbox.worker.sql_result import SHOWN_ROWS

__all__ = [
    "AGGREGATES",
    "AS_WRITTEN",
    "ASKS",
    "BUCKETS",
    "DAY_BUCKETS",
    "CMPS",
    "EMPTY",
    "DEFAULT_K",
    "EQUALITY",
    "FIELDS",
    "GROUP_K",
    "MAX_AFTER",
    "MAX_FILTERS",
    "MAX_K",
    "MAX_MIN_COUNT",
    "MAX_PEEK_LINES",
    "MAX_ROW_COLUMNS",
    "OPS",
    "ORDERING",
    "ORDERS",
    "PERIODS",
    "REQUIRED",
    "ROW_NOUNS",
    "SQL_OPS",
    "TAKES",
    "TEXT_MATCH",
    "TEXT_MATCHES",
]

# What each op asks of the table, in the order the model is told them.
SQL_OPS = ("count", "count_distinct", "top", "sum", "avg", "min", "max", "group", "rows")
OPS = (*SQL_OPS, "grep", "peek", "final")

# `after` (count_distinct, top, sum, avg, min, max: FIELDS): the column's value is then the one
# written right after that text in a text column (a user named inside a message, the size after
# "size "), not the whole text; at most MAX_AFTER characters of it.
MAX_AFTER = 60
AGGREGATES = ("sum", "avg", "min", "max")  # what `group` computes of `column` beside the count
# The time buckets `group` counts per: a period (the finest first), or each clock hour 0-23 over all days.
PERIODS = ("minute", "hour", "day", "month")
BUCKETS = (*PERIODS, "hour_of_day")
DAY_BUCKETS = ("day", "month")  # those of a DATE column
EQUALITY = ("=", "!=")
ORDERING = ("<", "<=", ">", ">=")
TEXT_MATCH = ("contains", "starts_with")  # case-insensitive, text columns only
CMPS = (*EQUALITY, *ORDERING, *TEXT_MATCH)
# rlm's own, never offered to the model: the text a question quotes, matched in the case it is
# written (rlm.run.typed.quoted). Taken back as shown where the model sends the action again.
AS_WRITTEN = "contains_as_written"
TEXT_MATCHES = (*TEXT_MATCH, AS_WRITTEN)
# The value of a filter (= or !=) that is the rows holding no value: NULL, or an empty text. A
# CSV's empty field is NULL in the table, where `= ''` matched nothing.
EMPTY = ""
ORDERS = ("most", "least", "key")  # `group`: by the measure, high or low first, or by the key
TAKES = ("first", "last")  # `rows`: the first or the last k in the order asked

# Nouns that name a row of any table, not a kind of row ("the most messages", "that Pid's
# lines"): no condition, whatever value's word they also are.
ROW_NOUNS = frozenset(
    "line row entry record event message request response hit occurrence appearance mention time snapshot "
    "call trip ride order transaction visit attempt try item log".split()
)
MAX_FILTERS = 4  # a time range and two more conditions; each filter costs the grammar a copy
DEFAULT_K = 10  # top values and rows, when `k` is not given
# Groups, when `k` is not given: as many as the REPL's echo of a result shows.
GROUP_K = SHOWN_ROWS
MAX_K = 50  # a larger k is brought down to it
# `min_count` (count_distinct, top, group): only the values (groups) found on at least that many
# lines ("the users tried N or more times"). Without it the cut is left to whoever reads the
# counts of a top k, and a value past k is left out.
MAX_MIN_COUNT = 1_000_000_000
MAX_ROW_COLUMNS = 6  # columns `rows` shows beside line_no
MAX_PEEK_LINES = 100  # a longer peek is brought down to it

# What a question asks for, in its own kind of words, for each op: every action begins by
# saying it ("asks"), and the server's grammar then holds the op to the one that gives it. A
# small model matches a question's words to these far better than to an op's name: with them
# (and the question restated last), the 1.5B offline model's first action took the operation
# asked for on 22 of 23 dev questions, against 19 with the question restated alone and 13 with
# neither (the same captured prompts sent to its server, greedy); without them it reached for
# `rows` (the file's last lines) where a most common value was asked. A total, an average and
# each extreme have their own phrase and schema branch: sharing one ("a total or average"), the
# op was then the example's (a sum where an average was asked). Which line has the largest
# value (the slowest of the runs a line reports) is a `rows` ordered by it: told "details of
# particular lines" alone, the model grouped by hour instead.
ASKS: dict[str, str] = {
    "count": "how many lines match",
    "count_distinct": "how many different values",
    "top": "which value appears on the most lines",
    "sum": "a total",
    "avg": "an average",
    "min": "the lowest, smallest or earliest value",
    "max": "the highest, largest or latest value",
    "group": "which value or period has most or least, or a figure for each",
    "rows": "the lines: first, last, or of the largest or smallest value",
    "grep": "text inside raw lines",
    "peek": "the lines at a position",
    "final": "nothing more: the answer is known",
}

# The fields each op takes (besides "op"), and those it cannot go without.
FIELDS: dict[str, tuple[str, ...]] = {
    "count": ("where",),
    "count_distinct": ("column", "after", "min_count", "where"),
    "top": ("column", "after", "k", "min_count", "where"),
    "sum": ("column", "after", "where"),
    "avg": ("column", "after", "where"),
    "min": ("column", "after", "where"),
    "max": ("column", "after", "where"),
    "group": ("by", "bucket", "agg", "column", "order", "k", "min_count", "where"),
    "rows": ("columns", "order_by", "take", "k", "where"),
    "grep": ("pattern", "max_matches", "ignore_case"),
    "peek": ("start", "length"),
    "final": ("answer",),
}
REQUIRED: dict[str, tuple[str, ...]] = {
    "count": (),
    "count_distinct": ("column",),
    "top": ("column",),
    "sum": ("column",),
    "avg": ("column",),
    "min": ("column",),
    "max": ("column",),
    "group": ("by",),
    "rows": ("columns",),
    "grep": ("pattern",),
    "peek": ("start",),
    "final": ("answer",),
}
