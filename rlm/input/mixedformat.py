"""Several parts of different formats in one table: each run of lines parsed by its own format.

Read as one text, `access.log` and `app.jsonl` make one `log`. Each part's format is
recognised on its own first lines, as the profile's is (rlm.input.detect, logformats), and
consecutive parts of one format make a run. When the runs are of more than one format, the
table stores each run parsed by its own format, and `log` is their union by name: a column
one format has and another lacks is NULL on the other's rows, `line_no` and `line` are every
row's (rlm.input.tables).

A log format rlm knows is parsed by its own SQL; JSON lines by a select over the keys of the
run's first objects (json_extract_string, cast to the type their values have there); a
CSV part among others is stored as lines (its header would be a row, its fields need its
own reader), which the table's note says.

Pure standard library: the parent imports it to build tables.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rlm.input.detect import detect_format
from rlm.input.logformats import TableFormat, recognize
from rlm.text.sqltext import sql_name, sql_string

__all__ = ["Run", "Segment", "mixed_format"]

_SAMPLE = 200  # lines a part's format (and a JSON part's keys) is recognised on
_JSON_KEYS = 200  # a JSON part's columns: its first keys, this many at most
_TEXT = TableFormat(name="text", kind="lines", select="SELECT line_no, line FROM src")


@dataclass(frozen=True)
class Segment:
    """One part of the text: its lines (0-based first, end exclusive), first lines and name."""

    first: int
    end: int
    sample: Sequence[str]
    name: str


@dataclass(frozen=True)
class Run:
    """Consecutive lines of one format: `first` (0-based) to `end` (exclusive)."""

    first: int
    end: int
    fmt: TableFormat
    names: tuple[str, ...]


def mixed_format(segments: Sequence[Segment], *, year: int) -> TableFormat | None:
    """The table layout of parts of different formats (kind "mixed", its `runs`); None when
    they are all of one format (the table is then built as for one file)."""
    runs: list[Run] = []
    for seg in segments:
        fmt = _format_of(seg, year)
        if runs and runs[-1].fmt == fmt and runs[-1].end == seg.first:
            runs[-1] = replace(runs[-1], end=seg.end, names=(*runs[-1].names, seg.name))
        else:
            runs.append(Run(seg.first, seg.end, fmt, (seg.name,)))
    distinct: list[TableFormat] = []
    for r in runs:
        if r.fmt not in distinct:
            distinct.append(r.fmt)
    if len(distinct) <= 1:
        return None
    unparsed = [n for r in runs if r.fmt.params.get("unparsed") for n in r.names]
    listed = "; ".join(
        f"lines {r.first + 1:,}-{r.end:,} {r.fmt.name}"
        + (
            f" ({', '.join(c for c, _ in r.fmt.columns[:6])}{', …' if len(r.fmt.columns) > 6 else ''})"
            if r.fmt.columns
            else ""
        )
        for r in runs[:6]
    ) + (f"; and {len(runs) - 6} more runs" if len(runs) > 6 else "")
    note = (
        f"the files are of {len(distinct)} formats, each parsed by its own, `log` their union "
        f"by name (a column another format has is NULL on these rows): {listed}"
    )
    if unparsed:
        note += f"; a CSV among other formats is stored as lines ({', '.join(unparsed[:3])})"
    for r in runs:
        if r.fmt.params.get("capped"):
            note += f"; lines {r.first + 1:,}-{r.end:,} have {r.fmt.params['capped']} (`line` holds the rest)"
    return TableFormat(
        name="mixed: " + ", ".join(dict.fromkeys(r.fmt.name for r in runs)),
        kind="mixed",
        note=note,
        categories=tuple(dict.fromkeys(c for r in runs for c in r.fmt.categories)),
        entities=tuple(dict.fromkeys(c for r in runs for c in r.fmt.entities)),
        measure=next((r.fmt.measure for r in runs if r.fmt.measure), None),
        runs=tuple(runs),
    )


def _format_of(seg: Segment, year: int) -> TableFormat:
    rows = [s.rstrip("\r\n") for s in seg.sample[:_SAMPLE]]
    fmt = recognize(detect_format(rows[:50], seg.name, b""), rows, year=year)
    if fmt.kind == "jsonl":
        return _json_lines(rows)
    if fmt.kind == "csv":
        return replace(_TEXT, params={"unparsed": "csv"})
    return fmt


# JSON values' types as columns: what every sampled value of a key is, else text.
_TYPES = ((bool, "BOOLEAN"), (int, "BIGINT"), (float, "DOUBLE"), (str, "VARCHAR"))


def _json_lines(rows: list[str]) -> TableFormat:
    """A JSON-lines part as a line format: a column for each top-level key of its first objects."""
    seen: dict[str, set[str]] = {}
    for row in rows:
        try:
            value = json.loads(row)
        except (ValueError, RecursionError):  # not JSON, or nested past what the parser follows
            continue
        if isinstance(value, dict):
            for key, v in value.items():
                seen.setdefault(key, set()).add(_type_of(v))
    outs, columns = [], []
    for key, types in list(seen.items())[:_JSON_KEYS]:
        if '"' in key or "\\" in key:
            continue  # not addressable in a JSON path without escapes DuckDB reads differently
        types.discard("NULL")
        if types == {"BIGINT", "DOUBLE"}:
            types = {"DOUBLE"}
        typ = types.pop() if len(types) == 1 else "VARCHAR"
        alias = key + "_" if key in ("line_no", "line") else key
        path = sql_string(f'$."{key}"')
        expr = (
            f"json_extract(line, {path})"
            if typ == "JSON"
            else f"TRY_CAST(json_extract_string(line, {path}) AS {typ})"
        )
        outs.append(f"CASE WHEN ok THEN {expr} END AS {sql_name(alias)}")
        columns.append((alias, typ))
    select = (
        f"SELECT line_no, line{''.join(', ' + o for o in outs)} FROM (SELECT line_no, line, "
        "json_valid(line) AND starts_with(ltrim(line), '{') AS ok FROM src)"
    )
    capped = (
        {"capped": f"{len(seen):,} keys, the first {_JSON_KEYS} as columns"} if len(seen) > _JSON_KEYS else {}
    )
    return TableFormat(name="jsonl", kind="lines", columns=tuple(columns), select=select, params=capped)


def _type_of(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return "JSON"
    for kind, name in _TYPES:
        if type(value) is kind:
            return name
    return "VARCHAR"
