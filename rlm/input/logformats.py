"""Log formats as tables: which columns a recognized format has, and the SQL that takes a line apart.

The profile (rlm.input.source) names the format from the leading lines; this module
refines that name into a table layout (`TableFormat`): the parsed columns with
their DuckDB types, and one SQL select over the raw lines (`src(line_no,
line)`) that fills them. Parsing happens in DuckDB's vectorised engine when
the table is built (rlm.input.tables), never line by line in Python.

A line that does not fit its format keeps NULL in every parsed column; it is
never dropped, so `line_no` always matches `grep -n`.

Pure standard library: the parent imports it to build tables, tests import it
to check each format against loghub's `_structured.csv` files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlm.text.sqltext import sql_name, sql_string

__all__ = ["TableFormat", "assumed_year", "recognize", "written_time_forms", "SSHD_EVENTS", "SSHD_LOGINS"]


@dataclass(frozen=True)
class TableFormat:
    """How to turn the lines of one format into the columns of `log`."""

    name: str  # e.g. "apache-combined", "syslog", "log4j-hadoop", "csv", "jsonl", "text"
    kind: str  # "lines": `select` over src(line_no, line); "csv" / "jsonl": DuckDB's readers
    columns: tuple[tuple[str, str], ...] = ()  # parsed columns (name, DuckDB type), beside line_no / line
    select: str = ""  # for kind "lines": SELECT ... FROM src, with `ok` naming a parsed line
    note: str = ""  # said in the profile (e.g. the year syslog timestamps assume)
    delimiter: str | None = None  # for kind "csv"
    # Columns with few distinct values whose common values the profile shows (what `event`
    # holds is what a model must write in a WHERE); CSV and JSON lines find theirs.
    categories: tuple[str, ...] = ()
    # Columns questions count distinct or rank by (an IP, a user, a path), and the one they
    # total: the profile's example queries use them (rlm.input.tablevalues.example_queries).
    entities: tuple[str, ...] = ()
    measure: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    # For kind "mixed" (rlm.input.mixedformat): the runs of lines, each of one format.
    runs: tuple[Any, ...] = ()
    # Columns computed from the parsed ones, (name, type, SQL over them), last in `log`: a
    # table builds them after the rest (rlm.input.tables: its queries on the others need not
    # wait); `whole_select` is the select with them.
    later: tuple[tuple[str, str, str], ...] = ()

    @property
    def whole_select(self) -> str:
        """`select` with the `later` columns after its own."""
        if not self.later:
            return self.select
        later = ",\n  ".join(f"{expr} AS {sql_name(name)}" for name, _, expr in self.later)
        return f"SELECT *,\n  {later}\nFROM ({self.select})"


def _regex_select(
    regex: str, groups: list[str], outputs: list[tuple[str, str, str]], *, fields: str | None = None
) -> str:
    """SELECT over src: one regexp_extract into a struct, then typed output columns.

    outputs: (name, type, expression over `m.<group>`); every output is NULL
    where the line does not match (the first group, never empty in a match, is then empty).
    `fields`: a select over src giving (line_no, line, m) another way (a faster path).
    """
    names = "[" + ", ".join(sql_string(g) for g in groups) + "]"
    cols = ",\n  ".join(
        f"CASE WHEN ok THEN {expr} END::{typ} AS {sql_name(name)}" for name, typ, expr in outputs
    )
    fields = (
        fields or f"SELECT line_no, line, regexp_extract(line, {sql_string(regex)}, {names}) AS m FROM src"
    )
    return (
        f"SELECT line_no, line,\n  {cols}\n"
        f"FROM (SELECT line_no, line, m, m.{groups[0]} <> '' AS ok FROM ({fields}))"
    )


# --------------------------------------------------------------------------- access logs

ACCESS_COLUMNS = (
    ("ip", "VARCHAR"),
    ("ident", "VARCHAR"),
    ("user", "VARCHAR"),
    ("ts", "TIMESTAMPTZ"),
    ("method", "VARCHAR"),
    ("path", "VARCHAR"),
    ("protocol", "VARCHAR"),
    ("status", "INTEGER"),
    ("bytes", "BIGINT"),
    ("referrer", "VARCHAR"),
    ("agent", "VARCHAR"),
)

# Common and combined log format, taken apart with string splits: a regex with
# eleven capture groups runs RE2's slow path and costs ~10x more on big files.
# q: the line split at double quotes: [prefix, request, ' status bytes ', referrer, ' ', agent, ''];
# p: the prefix at spaces: [ip, ident, user, '[dd/Mon/yyyy:hh:mm:ss', '+zzzz]', ''];
# s: ' status bytes ' at spaces: ['', status, bytes, ''].
# A line is parsed when its timestamp and status parse. The parsed fields travel as
# one struct that is NULL for an unparsed line (one CASE, not one per column), and
# the usual '+0000' offset skips the string concatenation %z needs (a third of the
# timestamp's cost; a TIMESTAMP is cast in the build's UTC session). An agent with
# no quote inside is q[6] as it is; joining the list back costs 5x more.
_ACCESS_SELECT = r"""
SELECT line_no, line, f.*
FROM (
  SELECT line_no, line,
    CASE WHEN t IS NOT NULL AND st IS NOT NULL AND len(q) >= 3 THEN {
      'ip': p[1], 'ident': p[2], 'user': p[3], 'ts': t,
      'method': r[1], 'path': r[2], 'protocol': r[3], 'status': st,
      'bytes': try_cast(s[3] AS BIGINT),
      'referrer': CASE WHEN len(q) >= 5 THEN q[4] END,
      'agent': CASE WHEN len(q) = 7 THEN q[6] WHEN len(q) > 7 THEN array_to_string(q[6:len(q) - 1], '"') END
    } END AS f
  FROM (
    SELECT line_no, line, q, p, r, s,
      CASE WHEN p[5] = '+0000]' THEN try_strptime(p[4], '[%d/%b/%Y:%H:%M:%S')::TIMESTAMPTZ
        ELSE try_strptime(substr(p[4], 2) || ' ' || rtrim(p[5], ']'), '%d/%b/%Y:%H:%M:%S %z') END AS t,
      CASE WHEN length(s[2]) = 3 THEN try_cast(s[2] AS INTEGER) END AS st
    FROM (
      SELECT line_no, line, q, string_split(q[1], ' ') AS p, string_split(q[2], ' ') AS r,
        string_split(q[3], ' ') AS s
      FROM (SELECT line_no, line, string_split(line, '"') AS q FROM src)
    )
  )
)"""

_ACCESS_RE = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "[^"]*" \d{3} (?:\d+|-)( "[^"]*" ".*")?')


def _access(name: str) -> TableFormat:
    return TableFormat(
        name=name,
        kind="lines",
        columns=ACCESS_COLUMNS,
        select=_ACCESS_SELECT,
        categories=("status", "method"),
        entities=("ip", "path"),
        measure="bytes",
    )


# --------------------------------------------------------------------------- syslog

SYSLOG_COLUMNS = (
    ("ts", "TIMESTAMP"),
    ("host", "VARCHAR"),
    ("program", "VARCHAR"),
    ("pid", "INTEGER"),
    ("message", "VARCHAR"),
    ("event", "VARCHAR"),
    ("user", "VARCHAR"),
    ("src_ip", "VARCHAR"),
    ("src_port", "INTEGER"),
)

# sshd messages and the event each one is, tried in order (first match wins). A login's
# event names its method too, as the log words it: "Failed password for" is failed_password,
# "Failed none for" failed_none, "Accepted publickey for" accepted_publickey.
SSHD_LOGINS: tuple[tuple[str, str], ...] = (
    ("failed", r"^(?:message repeated \d+ times: \[ )?Failed (\S+) for "),
    ("accepted", r"^(?:message repeated \d+ times: \[ )?Accepted (\S+) for "),
)
SSHD_EVENTS: tuple[tuple[str, str], ...] = (
    ("invalid_user", r"^Invalid user "),
    ("invalid_user_request", r"^input_userauth_request: invalid user "),
    ("auth_failure", r"authentication failure;"),
    ("more_auth_failures", r"^PAM \d+ more authentication failures?;"),
    (
        "too_many_failures",
        r"^(?:error: )?(?:Disconnecting: Too many authentication failures|maximum authentication attempts exceeded)",
    ),
    ("disconnect", r"^(?:error: )?Received disconnect from |^Disconnected from "),
    ("connection_closed", r"^Connection (?:closed|reset) by "),
    ("reverse_mapping_failed", r"^reverse mapping checking getaddrinfo for |POSSIBLE BREAK-IN ATTEMPT"),
    ("no_identification", r"^Did not receive identification string"),
    ("bad_protocol", r"^Bad protocol version identification"),
    ("check_pass", r"check pass; user unknown"),
    ("session_opened", r"session opened for user "),
    ("session_closed", r"session closed for user "),
    ("repeated", r"^message repeated \d+ times"),
)

# The user name, in order of the phrasings above; the first non-empty match wins.
_SSHD_USER = (
    # user names may hold spaces ("invalid user  0101"): anchor on what follows them
    r"^(?:message repeated \d+ times: \[ )?(?:Failed|Accepted) \S+ for (?:invalid user )?(.*) from \S+ port \d+",
    r"^Invalid user (.*) from \S+(?: port \d+)?$",
    r"invalid user (\S*) \[preauth\]",
    r"\buser=(\S+)",
    r"(?:authentication failures|attempts exceeded) for (?:invalid user )?(\S+)",
    r"session (?:opened|closed) for user (\S+)",
)
_SSHD_IP = r"(?:from|by|rhost=|Address|\[)\s?((?:\d{1,3}\.){3}\d{1,3}|[0-9a-fA-F]{0,4}:[0-9a-fA-F:]*:[0-9a-fA-F]{1,4})\b"
_SSHD_PORT = r" port (\d+)"


def _sshd_columns() -> list[tuple[str, str, str]]:
    logins = [
        f"WHEN regexp_matches(message, {sql_string(rx)}) THEN "
        f"{sql_string(ev + '_')} || replace(lower(regexp_extract(message, {sql_string(rx)}, 1)), '-', '_')"
        for ev, rx in SSHD_LOGINS
    ]
    others = [
        f"WHEN regexp_matches(message, {sql_string(rx)}) THEN {sql_string(ev)}" for ev, rx in SSHD_EVENTS
    ]
    event = "CASE " + " ".join([*logins, *others])
    event += " ELSE 'other' END"
    user = "coalesce(" + ", ".join(
        f"nullif(regexp_extract(message, {sql_string(rx)}, 1), '')" for rx in _SSHD_USER
    )
    # "Invalid user  from ..." names an empty user: say so with '' rather than NULL.
    user += ", CASE WHEN regexp_matches(message, '^Invalid user  from ') THEN '' END)"
    ip = f"nullif(regexp_extract(message, {sql_string(_SSHD_IP)}, 1), '')"
    port = f"try_cast(nullif(regexp_extract(message, {sql_string(_SSHD_PORT)}, 1), '') AS INTEGER)"
    return [
        ("event", "VARCHAR", event),
        ("user", "VARCHAR", user),
        ("src_ip", "VARCHAR", ip),
        ("src_port", "INTEGER", port),
    ]


# RFC 3164 (optionally with <PRI>, and the loghub Thunderbird prefix
# "- 1131566461 2005.11.09 dn228 "): "Mon dd hh:mm:ss host program[pid]: message". A tag may be
# words ("syslogd 1.4.1: restart.", "-- root[2421]: ..."); a line with no tag before a colon
# keeps its time and host, its program NULL and the rest its message. Such lines had no time at
# all, and a count of a day's lines missed them.
_RFC3164 = (
    r"^(?:<\d{1,3}>)?(?:\S+ \d{10} \d{4}\.\d\d\.\d\d \S+ )?"
    r"([A-Z][a-z]{2}) +(\d{1,2}) (\d\d:\d\d:\d\d) (\S+) +"
    r"(?:([^:\[\s]+(?: [^:\[\s]+)*)(?:\[(\d+)\])?: ?)?(.*)$"
)
_RFC3164_PY = re.compile(_RFC3164)
# RFC 5424: "<PRI>1 TIMESTAMP HOST APP PROCID MSGID [SD|-] MSG".
_RFC5424 = r"^<\d{1,3}>\d (\S+) (\S+) (\S+) (\S+) (\S+) (-|\[.*?\]) ?(.*)$"
_RFC5424_PY = re.compile(_RFC5424)


# The usual RFC 3164 line, its date fixed-width ("Jun 14 15:16:01", "Jun  9 …"), checked by a
# regex without captures (RE2's fast automaton) and taken apart with string functions; the
# capturing regex above, on its slow path with seven groups, reads only the other lines (a PRI,
# a Thunderbird prefix, "Jun 9" unpadded, or no match at all). Both give the same fields. On
# 256 MB of loghub's Linux syslog, one thread: the fields and ts in 6.3 s of CPU against 7.85 s.
_RFC3164_FAST = r"^[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} \S+ [^:\[\s]+(?:\[[0-9]+\])?:"


def _syslog_3164_fields(groups: list[str]) -> str:
    """src with `m`, the struct of the line's syslog fields (all '' where it is not one)."""
    names = "[" + ", ".join(sql_string(g) for g in groups) + "]"
    fast = (
        "struct_pack(mon := substr(line, 1, 3), day := ltrim(substr(line, 5, 2)), time := substr(line, 8, 8), "
        "host := h, program := split_part(tag, '[', 1), "
        "pid := CASE WHEN contains(tag, '[') THEN rtrim(split_part(tag, '[', 2), ']') ELSE '' END, "
        "message := CASE WHEN starts_with(msg, ' ') THEN substr(msg, 2) ELSE msg END)"
    )
    return (
        f"SELECT line_no, line, CASE WHEN fast THEN {fast} "
        f"ELSE regexp_extract(line, {sql_string(_RFC3164)}, {names}) END AS m FROM ("
        "SELECT line_no, line, fast, h, substr(after, 1, c - 1) AS tag, substr(after, c + 1) AS msg FROM ("
        "SELECT *, instr(after, ':') AS c FROM ("
        "SELECT *, substr(rest, length(h) + 2) AS after FROM ("
        "SELECT *, split_part(rest, ' ', 1) AS h FROM ("
        f"SELECT line_no, line, regexp_matches(line, {sql_string(_RFC3164_FAST)}) AS fast, substr(line, 17) AS rest "
        "FROM src)))))"
    )


_NO_YEAR = "syslog lines carry no year: ts assumes {year} (the year the file was last modified)"
_NO_YEAR_READ = re.compile(re.escape(_NO_YEAR).replace(re.escape("{year}"), r"(\d{4})"))


def assumed_year(note: str) -> int | None:
    """The year a table's note says its times were given (a syslog's lines carry none); None
    where it says none."""
    m = _NO_YEAR_READ.search(note)
    return int(m.group(1)) if m else None


def _syslog_3164(year: int, *, fast: bool = True) -> TableFormat:
    """RFC 3164 syslog; `fast`: the usual lines by string functions (else all by the regex)."""
    groups = ["mon", "day", "time", "host", "program", "pid", "message"]
    ts = f"try_strptime('{year} ' || m.mon || ' ' || lpad(m.day, 2, '0') || ' ' || m.time, '%Y %b %d %H:%M:%S')"
    inner = _regex_select(
        _RFC3164,
        groups,
        [
            ("ts", "TIMESTAMP", ts),
            ("host", "VARCHAR", "m.host"),
            ("program", "VARCHAR", "nullif(m.program, '')"),
            ("pid", "INTEGER", "try_cast(nullif(m.pid, '') AS INTEGER)"),
            ("message", "VARCHAR", "m.message"),
        ],
        fields=_syslog_3164_fields(groups) if fast else None,
    )
    return _with_sshd(
        "syslog",
        inner,
        note=_NO_YEAR.format(year=year),
    )


def _syslog_5424() -> TableFormat:
    groups = ["ts", "host", "app", "procid", "msgid", "sd", "message"]
    inner = _regex_select(
        _RFC5424,
        groups,
        [
            ("ts", "TIMESTAMP", "try_cast(try_cast(m.ts AS TIMESTAMPTZ) AT TIME ZONE 'UTC' AS TIMESTAMP)"),
            ("host", "VARCHAR", "nullif(m.host, '-')"),
            ("program", "VARCHAR", "nullif(m.app, '-')"),
            ("pid", "INTEGER", "try_cast(m.procid AS INTEGER)"),
            ("message", "VARCHAR", "m.message"),
        ],
    )
    return _with_sshd("syslog-rfc5424", inner, note="ts is in UTC")


def _with_sshd(name: str, inner: str, note: str) -> TableFormat:
    # Read by regular expressions from sshd's messages: about half of a syslog's build where a
    # third of its lines are sshd's (1 GB: 13 s of 24.6 s), built after the other columns.
    sshd = tuple(
        (col, typ, f"CASE WHEN program LIKE 'sshd%' THEN {expr} END::{typ}")
        for col, typ, expr in _sshd_columns()
    )
    return TableFormat(
        name=name,
        kind="lines",
        columns=SYSLOG_COLUMNS,
        select=inner,
        later=sshd,
        categories=("event", "program"),
        entities=("src_ip", "user"),
        note=note,
    )


# --------------------------------------------------------------------------- log4j-style


@dataclass(frozen=True)
class _Log4j:
    name: str
    regex: str
    groups: tuple[str, ...]
    ts_format: str  # strptime format of the `ts` group (after `ts_fix`)
    extra: tuple[
        tuple[str, str], ...
    ] = ()  # further columns: (name, type), taken from the group of that name
    ts_fix: str = "m.ts"  # SQL turning the ts group into what ts_format reads


_LOG4J = (
    # HDFS (loghub): "081109 203615 148 INFO dfs.DataNode$PacketResponder: message"
    _Log4j(
        "log4j-hdfs",
        r"^(\d{6} \d{6}) (\d+) ([A-Z]+) ([^:\s]+): (.*)$",
        ("ts", "pid", "level", "component", "message"),
        "%y%m%d %H%M%S",
        (("pid", "INTEGER"),),
    ),
    # Hadoop (loghub): "2015-10-18 18:01:47,978 INFO [main] org.apache...MRAppMaster: message"
    _Log4j(
        "log4j-hadoop",
        r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ([A-Z]+) \[([^\]]*)\] ([^:\s]+): (.*)$",
        ("ts", "level", "thread", "component", "message"),
        "%Y-%m-%d %H:%M:%S,%g",
        (("thread", "VARCHAR"),),
    ),
    # ZooKeeper (loghub): "2016-03-02 09:15:27,118 - INFO  [thread:Class@line] - message"
    _Log4j(
        "log4j-zookeeper",
        r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - ([A-Z]+) +\[(.*?):?([^:\]]*)@(\d+)\] - (.*)$",
        ("ts", "level", "thread", "component", "source_line", "message"),
        "%Y-%m-%d %H:%M:%S,%g",
        (("thread", "VARCHAR"), ("source_line", "INTEGER")),
    ),
    # Spark (loghub): "17/06/09 20:10:40 INFO executor.CoarseGrainedExecutorBackend: message"
    _Log4j(
        "log4j-spark",
        r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) ([A-Z]+) ([^:\s]+): (.*)$",
        ("ts", "level", "component", "message"),
        "%y/%m/%d %H:%M:%S",
    ),
    # OpenStack (loghub): "nova-api.log.1.2017-05-16_13:53:08 2017-05-16 00:00:00.008 25746 INFO
    # nova.osapi_compute.wsgi.server [req-... - - -] message"
    _Log4j(
        "log4j-openstack",
        r"^(\S+) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (\d+) ([A-Z]+) (\S+) (?:\[([^\]]*)\] )?(.*)$",
        ("logfile", "ts", "pid", "level", "component", "request", "message"),
        "%Y-%m-%d %H:%M:%S.%f",
        (("logfile", "VARCHAR"), ("pid", "INTEGER"), ("request", "VARCHAR")),
    ),
    # Generic: "2024-01-02[T ]10:11:12[.,frac] [LEVEL] rest" or "... LEVEL [thread] component: message"
    _Log4j(
        "log4j",
        r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\S* +\[?(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|SEVERE|FATAL|CRITICAL)\]?:? +(?:\[([^\]]*)\] +)?(?:([\w.$-]+): +)?(.*)$",
        ("ts", "level", "thread", "component", "message"),
        "%Y-%m-%d %H:%M:%S.%f",
        (("thread", "VARCHAR"),),
        ts_fix="replace(replace(m.ts, 'T', ' '), ',', '.') || CASE WHEN contains(m.ts, '.') OR contains(m.ts, ',') THEN '' ELSE '.0' END",
    ),
)


def _log4j_format(spec: _Log4j) -> TableFormat:
    outputs = [
        ("ts", "TIMESTAMP", f"try_strptime({spec.ts_fix}, {sql_string(spec.ts_format)})"),
        ("level", "VARCHAR", "m.level"),
        ("component", "VARCHAR", "nullif(m.component, '')"),
    ]
    for col, typ in spec.extra:
        expr = f"m.{col}" if typ == "VARCHAR" else f"try_cast(m.{col} AS {typ})"
        outputs.append((col, typ, f"nullif({expr}, '')" if typ == "VARCHAR" else expr))
    outputs.append(("message", "VARCHAR", "m.message"))
    return TableFormat(
        name=spec.name,
        kind="lines",
        columns=tuple((n, t) for n, t, _ in outputs),
        select=_regex_select(spec.regex, list(spec.groups), outputs),
        categories=("level", "component"),
        entities=("component",),
    )


# --------------------------------------------------------------------------- written times

_SYSLOG_TIME = "%b %d %H:%M:%S"  # an RFC 3164 line's time: no year
_ACCESS_TIME = "%d/%b/%Y:%H:%M:%S"


def written_time_forms(format_name: str) -> tuple[str, ...]:
    """How a format's lines write their time, as Python's strptime reads it: the whole time, then
    its date alone ("081109 203615", "081109"). A model that has seen lines compares the time
    column to a time copied from one, in the line's own form; the table's `ts` shows another.
    A syslog form has no year (`assumed_year` gives the one the table took)."""
    if format_name == "syslog":
        whole = _SYSLOG_TIME
    elif format_name.startswith(("apache-", "nginx-")):
        whole = _ACCESS_TIME
    else:
        spec = next((s for s in _LOG4J if s.name == format_name), None)
        if spec is None or spec.ts_fix != "m.ts":  # the generic form's times are ISO's own
            return ()
        whole = spec.ts_format.replace("%g", "%f")
    cut = min(i for i in (whole.find(" %H"), whole.find(":%H")) if i >= 0)
    return (whole, whole[:cut])


# --------------------------------------------------------------------------- recognition


def _share(rows: list[str], rx: re.Pattern[str]) -> float:
    return sum(1 for s in rows if rx.match(s)) / len(rows) if rows else 0.0


def recognize(profile_format: str, sample: list[str], *, year: int = 2000) -> TableFormat:
    """The table layout for a file whose profile says `profile_format`, refined on `sample` (leading lines).

    `year` is the year syslog timestamps assume (they carry none).
    Unrecognized formats get the bare table: line_no and line.
    """
    rows = [s.rstrip("\r\n") for s in sample if s.strip()]
    if profile_format in ("apache-access", "nginx-access"):
        combined = sum(1 for s in rows if (m := _ACCESS_RE.match(s)) and m.group(1)) >= 0.5 * max(
            1, len(rows)
        )
        family = "nginx" if profile_format.startswith("nginx") else "apache"
        return _access(f"{family}-{'combined' if combined else 'common'}")
    if profile_format == "csv":
        return TableFormat(name="csv", kind="csv", delimiter=None)
    if profile_format == "tsv":
        return TableFormat(name="tsv", kind="csv", delimiter="\t")
    if profile_format == "jsonl":
        return TableFormat(name="jsonl", kind="jsonl")
    if profile_format in ("syslog", "log"):
        if _share(rows, _RFC5424_PY) >= 0.6:
            return _syslog_5424()
        if _share(rows, _RFC3164_PY) >= 0.6:
            return _syslog_3164(year)
        for spec in _LOG4J:
            if _share(rows, re.compile(spec.regex)) >= 0.6:
                return _log4j_format(spec)
    return TableFormat(name="text", kind="lines", select="SELECT line_no, line FROM src")
