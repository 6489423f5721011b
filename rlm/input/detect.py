"""Which kind of text an input holds (its profile's `format`), and how to take each kind apart in code.

`detect_format` guesses from the first lines alone (access log, syslog, JSON
lines, a JSON document, CSV/TSV, a timestamped log, plain text);
`FORMAT_HINTS` is the line the prompt shows for it, since small models guess
field positions wrong. The columns a recognised log format is parsed into
are rlm.input.logformats.
"""

from __future__ import annotations

import csv
import json
import re
from typing import Any

__all__ = ["FORMAT_HINTS", "detect_format"]

_APACHE = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "[^"]*" \d{3} (?:\d+|-)')
_SYSLOG = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ ")
# A timestamp (or a log level) near the start of a line marks a log, whatever its layout.
_TIMESTAMPED = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T]\d\d:\d\d|\d{4}[./]\d{2}[./]\d{2}|\d{2}/\d{2}/\d{2,4}[ :]\d\d:\d\d|"
    r"\d{2}/[A-Z][a-z]{2}/\d{4}|\b\d{6} \d{6}\b|\b\d{10}(?:\.\d+)?\b|[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d|"
    r"\b\d\d[.:-]\d\d[ T]\d\d:\d\d:\d\d|\b(?:INFO|WARN|WARNING|ERROR|DEBUG|TRACE|FATAL)\b"
)


# How to take each detected format apart in code: small models guess field
# positions wrong (a status code counted by substring catches sizes and paths).
_ACCESS_HINT = (
    "line.split() gives [0] client IP, [3] '[day/Mon/year:time', [5] '\"METHOD', [6] path, "
    "[8] status code, [9] bytes (when the request has three parts)"
)
FORMAT_HINTS = {
    "apache-access": _ACCESS_HINT,
    "nginx-access": _ACCESS_HINT,
    "syslog": "line.split() gives [0] month, [1] day, [2] time, [3] host, [4] 'program[pid]:'; "
    "the message follows",
    "csv": "csv.DictReader(context_lines) yields one dict per row, keyed by the header line",
    "tsv": "csv.DictReader(context_lines, delimiter='\\t') yields one dict per row, keyed by the header",
    "jsonl": "one JSON object per line: json.loads(line)",
    "json": "the whole file is one JSON document: json.loads(context)",
}


def detect_format(sample: list[str], display: str, head: bytes) -> str:
    """A best guess from up to 50 leading lines; "text" when nothing fits."""
    rows = [s for s in sample if s.strip()]
    if not rows:
        return "text"

    def share(pred: Any) -> float:
        return sum(1 for s in rows if pred(s)) / len(rows)

    if share(_APACHE.match) >= 0.8:
        return "nginx-access" if "nginx" in display.lower() else "apache-access"
    if share(_is_json_object) >= 0.8:
        return "jsonl"
    first = rows[0].lstrip()
    if first in ("{", "[") or first.startswith(('{"', "[{", '["', "[[")):
        return "json"
    if share(_SYSLOG.match) >= 0.8:
        return "syslog"
    stamped = share(lambda s: _TIMESTAMPED.search(s, 0, 80) is not None)
    for sep, name in (("\t", "tsv"), (",", "csv"), (";", "csv")):
        counts = _separators(rows[:20], sep)
        consistent = sum(1 for c in counts if c == counts[0]) >= 0.8 * len(counts)
        # One comma per line is often a timestamp's milliseconds ("18:01:47,978").
        wide_enough = counts[0] >= 2 or (counts[0] == 1 and stamped < 0.6)
        if consistent and wide_enough and len(rows) > 1:
            return name
    if stamped >= 0.6:
        return "log"
    return "text"


def _separators(rows: list[str], sep: str) -> list[int]:
    """The separators of each row that part its fields: quote-aware, as a CSV reader reads them
    (a quoted "18:01:47,978" or a message with commas is one field); the raw count for rows that
    no reader takes (a stray quote), which were never read as a table's rows either."""
    try:
        return [len(fields) - 1 for fields in csv.reader(rows, delimiter=sep)]
    except csv.Error:
        return [s.count(sep) for s in rows]


def _is_json_object(s: str) -> bool:
    s = s.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return False
    try:
        return isinstance(json.loads(s), dict)
    except ValueError:
        return False
