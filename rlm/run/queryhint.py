"""A query of the question's own shape, on the table's own columns and values: the model's first step.

Small models copy the example they are shown. Shown generic examples (the
profile's four shapes on the most common value), a 1.5B model ran all of them
and passed the file's line count to final; shown a count, it counted where the
question asked which user. So the question itself is mapped onto the table the
way text-to-SQL systems link a schema: its words are matched against the
columns' names and the values the table holds (`failed password` is
`event = 'failed_password'`, `5xx` a status range, `on 18 May 2015` a date of
`ts`), and its wording gives the shape (how many, how many distinct, which …
most, which … appear, total, average, largest, does any). The result is one
query and how to read the answer off its rows; the model runs it, checks it,
and may change it. A question whose shape or terms do not map gives no hint:
a wrong query shown as right is worse than none.

Only the question and the table's description (rlm.input.tables) are read;
nothing here touches the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlm.text.sqltext import sql_name, sql_value

__all__ = ["QueryHint", "hint_for"]


@dataclass(frozen=True)
class QueryHint:
    """A query for the question and how its rows answer it."""

    shape: str  # count, distinct, rank, list, group, sum, avg, max, min, exists
    sql: str
    answer: str  # a Python expression over `result` (the query's rows) that is the answer

    def code(self) -> str:
        """The cell a model can run as it is."""
        return f"result = sql({_py_str(self.sql)})\nprint(result)"


_NUMERIC = frozenset(
    "TINYINT SMALLINT INTEGER BIGINT HUGEINT UTINYINT USMALLINT UINTEGER UBIGINT UHUGEINT FLOAT DOUBLE "
    "DECIMAL REAL".split()
)
# Column names a query must quote (DuckDB's reserved words that make likely column names).
_RESERVED = frozenset(
    "select from where group order limit table column default end case when all any".split()
)
_TEMPORAL = ("TIMESTAMP", "DATE")
_STOP = frozenset(
    "a an the of in on at to for by with from and or is are was were be been had has have do does did "
    "how many much which what who whom whose when where there their this that these those it its any "
    "line lines log file entry entries record records row rows number count total times time one per "
    "each all as most least not no yes than more less".split()
)
# Words a question says for a column's name (after stemming; see _stem).
_SYNONYMS = {
    "src": "source",
    "dst": "destination",
    "dest": "destination",
    "addr": "address",
    "username": "user",
    "login": "user",
    "account": "user",
    "url": "path",
    "uri": "path",
    "page": "path",
    "endpoint": "path",
    "severity": "level",
    "logger": "component",
    "daemon": "program",
    "process": "program",
    "service": "program",
    "hostname": "host",
    "msg": "message",
    "ts": "timestamp",
    "colour": "color",
    "verb": "method",
    "code": "status",
    "response": "status",
}
# Phrases that name one thing in two words.
_PHRASES = (
    (r"\buser[- ]?agents?\b", "agent"),
    (r"\buser ?names?\b", "user"),
    (r"\bip[- ]addresse?s?\b", "ip"),
    (r"\bstatus codes?\b", "status"),
    (r"\bhttp status\b", "status"),
    (r"\blog levels?\b", "level"),
    (r"\bsource addresse?s?\b", "source ip"),
)
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
_MONTH = (
    r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?"
)
_DATE_PATTERNS = (
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), "ymd"),
    (re.compile(rf"\b(?:in|during) {_MONTH},? (\d{{4}})\b"), "my"),
    (re.compile(rf"\b(?:in|during) {_MONTH}(?! \d)"), "m"),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{_MONTH},? (\d{{4}})\b"), "dmy"),
    (re.compile(rf"\b{_MONTH} (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{4}})\b"), "mdy"),
    (re.compile(rf"\b{_MONTH} (\d{{1,2}})(?:st|nd|rd|th)?\b"), "md"),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{_MONTH}\b"), "dm"),
)
_CLOCK = r"(\d{1,2}:\d{2}(?::\d{2})?)"
_COMPARE = {
    "more than": ">",
    "greater than": ">",
    "over": ">",
    "above": ">",
    "at least": ">=",
    "less than": "<",
    "fewer than": "<",
    "under": "<",
    "below": "<",
    "at most": "<=",
}


def hint_for(question: str, table: dict[str, Any] | None) -> QueryHint | None:
    """The query for `question` over the table `table` describes (rlm.input.tables), or None."""
    if not table or len(table.get("columns") or []) <= 2:
        return None
    schema = _Schema(table)
    q = _normalise(question)
    words = _words(q)
    linked = _conditions(question, q, words, schema)
    shape = _shape(q)
    if shape is None or linked is None:
        return None
    where, used = linked
    hint = _query(shape, q, words, schema, where, used)
    # Every figure the question gives must be in the query (a number, a year, a time): a query that
    # dropped one ('in August 2015', 'top 3') counts something else and would read as the answer.
    if hint is None or not _figures(q) <= _figures(hint.sql):
        return None
    if re.search(rf"\b{_MONTH}\b", q) and "strftime" not in hint.sql and "DATE '" not in hint.sql:
        return None
    return hint


def _figures(text: str) -> set[float]:
    """The numbers standing alone in a text ('404', '2015', '05' of a date, '3.5'), by value."""
    return {float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)}


def _query(
    shape: str, q: str, words: list[str], schema: _Schema, where: list[str], used: set[str]
) -> QueryHint | None:
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    if shape in ("count", "exists"):
        if not where:
            return None  # "how many lines" needs no hint; a count of everything is rarely the question
        if shape == "count" and _SUMS.search(q):
            return None  # 'how many bytes were sent': a total of a field the table does not have
        sql = f"SELECT count(*) AS n FROM log{clause}"
        answer = "result[0][0]" if shape == "count" else '["no", "yes"][result[0][0] > 0]'
        return QueryHint(shape, sql, answer)
    if shape in ("sum", "avg", "max", "min"):
        measure = _measure(words, schema, used)
        if measure is None:
            return None
        value = f"{shape}({schema.sql(measure)})"
        digits = _decimals(q)
        if digits is not None and shape in ("sum", "avg"):
            value = f"round({value}, {digits})"
        alias = {"sum": "total", "avg": "average", "max": "largest", "min": "smallest"}[shape]
        return QueryHint(shape, f"SELECT {value} AS {alias} FROM log{clause}", "result[0][0]")
    entity = _entity(q, words, schema, used)
    bucket = _time_bucket(q, schema) if entity is None else None
    if entity is None and bucket is None:
        return None
    ident = bucket[1] if bucket else schema.sql(entity or "")
    entity = bucket[0] if bucket else entity or ""
    if shape == "distinct":
        return QueryHint(shape, f"SELECT count(DISTINCT {ident}) AS n FROM log{clause}", "result[0][0]")
    not_null = f"{ident} IS NOT NULL"
    filtered = f" WHERE {' AND '.join([*where, not_null])}"
    if shape in ("rank", "rank_low"):
        order = "ASC" if shape == "rank_low" else "DESC"
        measure = _measure(words, schema, used | {entity}) if _ranks_a_measure(q) else None
        score = f"sum({schema.sql(measure)})" if measure else "count(*)"
        sql = f"SELECT {_named_as(ident, entity)}, {score} AS n FROM log{filtered} GROUP BY 1 ORDER BY n {order} LIMIT 5"
        return QueryHint("rank", sql, "result[0][0]")
    sql = f"SELECT {_named_as(ident, entity)}, count(*) AS n FROM log{filtered} GROUP BY 1 ORDER BY n DESC"
    if shape == "list":
        return QueryHint(shape, sql, "[row[0] for row in result]")
    return QueryHint("group", sql.replace("ORDER BY n DESC", "ORDER BY 1"), "result")


# --------------------------------------------------------------------------- the table


class _Schema:
    """The table's columns as a question names them."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.types: dict[str, str] = {}
        self.exprs: dict[str, str] = {}  # a struct's field: its SQL
        for name, typ in table["columns"]:
            if name in ("line_no", "line"):
                continue
            self.types[name] = str(typ).upper()
            for field, ftyp in _struct_fields(str(typ)):
                path = f"{name}.{field}"
                self.types[path] = ftyp.upper()
                self.exprs[path] = f"{_ident(name)}.{_ident(field)}"
        self.tokens = {name: _name_tokens(name) for name in self.types}
        self.values: dict[str, list[Any]] = {
            name: [v for v, _ in pairs]
            for name, pairs in (table.get("values") or {}).items()
            if name in self.types
        }

    def sql(self, name: str) -> str:
        """How a query names the column (a struct's field as struct.field)."""
        return self.exprs.get(name) or _ident(name)

    def numeric(self, name: str) -> bool:
        return self.types.get(name, "").split("(")[0].strip() in _NUMERIC

    def temporal(self) -> str | None:
        timed = [n for n, t in self.types.items() if t.startswith(_TEMPORAL)]
        preferred = [n for n in timed if n in ("ts", "timestamp", "time", "date", "datetime")]
        return (preferred or timed)[0] if timed else None


def _struct_fields(typ: str) -> list[tuple[str, str]]:
    """The fields of a STRUCT(...) type, one level: [(name, type)]."""
    if not typ.upper().startswith("STRUCT(") or not typ.endswith(")"):
        return []
    body, parts, depth, start = typ[7:-1], [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    out = []
    for part in parts:
        m = re.match(r'\s*("(?:[^"]|"")+"|\S+)\s+(.+)', part)
        if m:
            out.append((m.group(1).strip('"').replace('""', '"'), m.group(2).strip()))
    return out


def _name_tokens(name: str) -> tuple[str, ...]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if p]
    return tuple(_SYNONYMS.get(_stem(p), _stem(p)) for p in parts)


# --------------------------------------------------------------------------- the question


def _normalise(question: str) -> str:
    q = " " + question.lower() + " "
    for pattern, replacement in _PHRASES:
        q = re.sub(pattern, replacement, q)
    return re.sub(r"\s+", " ", q).strip()


def _stem(word: str) -> str:
    if word in _STOP or len(word) < 3 or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def _words(q: str) -> list[str]:
    # 'pickup_borough' and 'requests.total' are the words of the column they name
    return [_SYNONYMS.get(_stem(w), _stem(w)) for w in re.findall(r"[a-z0-9]+", q)]


def _shape(q: str) -> str | None:
    if re.match(r"(does|do|did|is|are|was|were|has|have)\b", q) and re.search(r"\b(any|ever)\b", q):
        return "exists"
    counting = re.search(r"\b(how many|number of|count of|count the)\b", q)
    if counting and re.search(r"\b(distinct|unique|different)\b", q):
        return "distinct"
    if re.search(r"\b(average|mean)\b", q):
        return "avg"
    if re.search(r"\b(which|what|who)\b", q):
        if re.search(
            r"\b(largest|highest|maximum|max|biggest|greatest|smallest|lowest|minimum|min)\b (value|amount)\b",
            q,
        ):
            return "min" if re.search(r"\b(smallest|lowest|minimum|min)\b", q) else "max"
        if re.search(r"\b(fewest|least|lowest|rarest)\b", q):
            return "rank_low"
        if re.search(r"\b(most|top|highest|largest|biggest|busiest|greatest|maximum|max)\b", q):
            return "rank"
        if re.search(
            r"\b(appear|appears|occur|occurs|exist|exists|are there|present|used|seen|one per line)\b", q
        ):
            return "list"
    if re.search(r"\b(per|for each|by each|broken down by)\b", q) and counting:
        return "group"
    if re.match(r"(list|show|give)\b", q):
        return "list"
    if _SUMS.search(q):
        return "sum"
    if re.search(r"\b(maximum|largest|highest|biggest|peak)\b", q):
        return "max"
    if re.search(r"\b(minimum|smallest|lowest)\b", q):
        return "min"
    if counting:
        return "count"
    return None


# A total of a field: 'in total', 'summed over', 'how many bytes' (a unit is a field's, not a count of lines).
_SUMS = re.compile(
    r"\b(sum|summed|totals?|total of)\b(?! (number|count))|\bhow many (bytes|seconds|minutes|hours|ms|milliseconds|kb|mb|gb)\b"
)


def _decimals(q: str) -> int | None:
    m = re.search(r"\b(one|two|three|four|\d) decimal", q)
    if not m:
        return None
    word = m.group(1)
    return int(word) if word.isdigit() else ("one", "two", "three", "four").index(word) + 1


def _ranks_a_measure(q: str) -> bool:
    """'which IP got the most bytes' ranks by a total, 'which IP made the most requests' by a count."""
    return bool(re.search(r"\b(most|least|fewest|highest|lowest) (total )?[a-z_]+", q)) and not re.search(
        r"\b(most|least|fewest) (often|frequent|frequently|common|commonly|request|requests|line|lines|time|times|entr)",
        q,
    )


# --------------------------------------------------------------------------- linking


def _find(seq: list[str], sub: tuple[str, ...] | list[str]) -> int:
    """Where `sub` first stands in `seq`, or -1."""
    return next(iter(_find_all(seq, tuple(sub))), -1)


def _find_all(seq: list[str], sub: tuple[str, ...]) -> list[int]:
    n = len(sub)
    return [i for i in range(len(seq) - n + 1) if n and tuple(seq[i : i + n]) == sub]


def _conditions(
    question: str, q: str, words: list[str], schema: _Schema
) -> tuple[list[str], set[str]] | None:
    """The WHERE terms the question's words name and the columns they use; None when a value
    could be more than one column's and the question does not say which."""
    where: list[str] = []
    used: set[str] = set()
    taken: list[tuple[int, int]] = []  # spans of words already linked
    quoted = _quoted_spans(question, words)

    # A column's value named by its words: 'failed password' -> event = 'failed_password'.
    found: list[tuple[int, int, str, Any]] = []
    for column, values in schema.values.items():
        for value in values:
            tokens = _value_tokens(value)
            if not tokens or (len(tokens) == 1 and (tokens[0] in _STOP or len(tokens[0]) < 2)):
                continue
            for at in _find_all(words, tokens):
                end = at + len(tokens)
                # Inside quotes only the whole quoted text is a value ('Received disconnect' is not
                # event = 'disconnect'): the rest of a quote is text to search for.
                if not any(s < end and at < e and (s, e) != (at, end) for s, e in quoted):
                    found.append((at, end, column, value))
    # The longest match wins where two overlap ('invalid user request' over 'invalid user').
    found.sort(key=lambda f: (-(f[1] - f[0]), f[0]))
    chosen: dict[str, list[tuple[int, Any]]] = {}
    for start, end, column, value in found:
        if (start, end) in taken:
            continue  # the same words are a value of another column too: settled below
        if any(start < e and s < end for s, e in taken):
            continue
        columns = [c for a, b, c, v in found if (a, b) == (start, end)]
        if len(columns) > 1:
            # Queens is a pickup_borough and a dropoff_borough: the words just before it must say
            # which; where they do not, another mention of it may ('pickup_borough = Queens').
            column = _named(words[max(0, start - 3) : start], schema, set(), among=columns) or ""
            if not column:
                if any(
                    _named(words[max(0, a - 3) : a], schema, set(), among=columns)
                    for a, *_ in found
                    if a != start
                ):
                    continue
                return None
            value = next(v for a, b, c, v in found if (a, b) == (start, end) and c == column)
        taken.append((start, end))
        chosen.setdefault(column, []).append((start, value))
    for column, hits in chosen.items():
        ident = schema.sql(column)
        if len(hits) == 1:
            where.append(f"{ident} = {sql_value(hits[0][1])}")
            used.add(column)
            continue
        # Two values of one column: 'status 500 or 503' is either; 'Queens and Manhattan' is not a
        # condition one row can meet, so no hint.
        first, last = min(h[0] for h in hits), max(h[0] for h in hits)
        if "or" not in words[first:last] and "either" not in words[:last]:
            return None
        where.append(f"{ident} IN ({', '.join(sql_value(v) for _, v in hits)})")
        used.add(column)

    # A class of HTTP statuses: '5xx', '4xx errors'.
    status = next((c for c, t in schema.tokens.items() if "status" in t and schema.numeric(c)), None)
    m = re.search(r"\b([1-5])xx\b", q)
    if status and m and status not in used:
        base = int(m.group(1)) * 100
        where.append(f"{_ident(status)} BETWEEN {base} AND {base + 99}")
        used.add(status)

    # A comparison with a number: 'more than 3 passengers', 'a fare over 50'.
    for m in re.finditer(r"\b(" + "|".join(_COMPARE) + r") \$?(\d+(?:\.\d+)?)\b", q):
        op, number = _COMPARE[m.group(1)], m.group(2)
        after = _words(q[m.end() :])[:2]
        before = _words(q[: m.start()])[-3:]
        compared = _numeric_named(after, schema, used) or _numeric_named(list(reversed(before)), schema, used)
        if compared:
            where.append(f"{schema.sql(compared)} {op} {number}")
            used.add(compared)

    # A date or a time of day, on the table's timestamp.
    ts = schema.temporal()
    if ts is not None:
        where.extend(_time_terms(q, _ident(ts)))

    # Text the question quotes or says a field contains, not linked above.
    for text, column_words in _contained(question):
        at = _find(words, _value_tokens(text))
        if at >= 0 and (at, at + len(_value_tokens(text))) in taken:
            continue
        field = _named(column_words, schema, used, text_only=True) if column_words else None
        target = schema.sql(field) if field else "line"
        where.append(f"{target} ILIKE {sql_value('%' + text + '%')}")
        if field:
            used.add(field)
    return where, used


def _quoted_spans(question: str, words: list[str]) -> list[tuple[int, int]]:
    """Where the question's quoted texts stand among its words."""
    spans = []
    for text, _ in _contained(question):
        tokens = _value_tokens(text)
        at = _find(words, tokens)
        if at >= 0:
            spans.append((at, at + len(tokens)))
    return spans


def _value_tokens(value: Any) -> tuple[str, ...]:
    text = str(value).lower()
    return tuple(_SYNONYMS.get(_stem(w), _stem(w)) for w in re.findall(r"[a-z0-9]+", text))


def _numeric_named(words: list[str], schema: _Schema, used: set[str]) -> str | None:
    for word in words:
        for column, tokens in schema.tokens.items():
            if column not in used and schema.numeric(column) and word in tokens:
                return column
    return None


def _named(
    words: list[str],
    schema: _Schema,
    used: set[str],
    *,
    text_only: bool = False,
    among: list[str] | None = None,
) -> str | None:
    """The column whose name's words are all in `words`, the one of most words."""
    best, score = None, 0
    for column, tokens in schema.tokens.items():
        if column in used or (text_only and schema.types[column] != "VARCHAR"):
            continue
        if among is not None and column not in among:
            continue
        hits = sum(t in words for t in tokens)
        if hits == len(tokens) and hits > score:
            best, score = column, hits
    return best


def _contained(question: str) -> list[tuple[str, list[str]]]:
    """(text, words naming the field before it) for quoted text and 'containing X' / 'mention X'."""
    out: list[tuple[str, list[str]]] = []
    for m in re.finditer(r"['\"“‘]([^'\"”’]{2,80})['\"”’]", question):
        before = _words(_normalise(question[: m.start()]))[-3:]
        out.append((m.group(1), before))
    if out:
        return out
    said = re.search(
        r"\b(?:contain|contains|containing|mention|mentions|mentioning|with the (?:text|word|phrase))\s+"
        r"(?:an? |the )?(.+?)(?:[?.!](?:\s|$)|$)",
        question,
        re.IGNORECASE,
    )
    if said:
        before = _words(_normalise(question[: said.start()]))[-3:]
        text = re.sub(
            r"\s+(?:in (?:it|them|the \w+)|at all)$", "", said.group(1).strip(), flags=re.IGNORECASE
        )
        out.append((text, before))
    return out


def _entity(q: str, words: list[str], schema: _Schema, used: set[str]) -> str | None:
    """The column the question counts distinct, ranks or lists: the one its words name fully,
    nearest after 'which' / 'what' / 'distinct'."""
    anchor = re.search(r"\b(which|what|who|distinct|unique|different|per|each|by|list|show)\b", q)
    start = len(_words(q[: anchor.start()])) if anchor else 0
    best: tuple[int, int, str] | None = None
    for column, tokens in schema.tokens.items():
        if column in used or not tokens:
            continue
        at = _find(words[start:], tokens)
        if at < 0:
            continue
        key = (-len(tokens), at, column)
        if best is None or key < best:
            best = key
    return best[2] if best else None


# 'per hour', 'the busiest day': a time slot of the timestamp stands for a column. Named by its
# unit alone it is the slot in the calendar (an hour of one day); 'hour of the day' is the clock's.
_BUCKETS = (
    (r"\bhour of (?:the )?day\b", "hour", "%H"),
    (r"\bday of (?:the )?week\b|\bweekday\b", "weekday", "%A"),
    (r"\bminutes?\b", "minute", "%Y-%m-%d %H:%M"),
    (r"\bhours?\b|\bhourly\b", "hour", "%Y-%m-%d %H:00"),
    (r"\bdays?\b|\bdates?\b|\bdaily\b", "day", "%Y-%m-%d"),
    (r"\bmonths?\b|\bmonthly\b", "month", "%Y-%m"),
)


def _time_bucket(q: str, schema: _Schema) -> tuple[str, str] | None:
    """(name, SQL) of the time slot a question ranks, lists or groups by, if it names one."""
    ts = schema.temporal()
    if ts is None:
        return None
    for pattern, name, fmt in _BUCKETS:
        if re.search(pattern, q):
            return name, f"strftime({_ident(ts)}, '{fmt}')"
    return None


def _measure(words: list[str], schema: _Schema, used: set[str]) -> str | None:
    """The numeric column a total, an average or a maximum is of. A column named like the shape's
    own word ('the total of the fare column': `total`) only when no other is named."""
    best: tuple[bool, int, int, str] | None = None
    for column, tokens in schema.tokens.items():
        if column in used or not schema.numeric(column) or not tokens:
            continue
        at = _find(words, tokens)
        if at < 0 and len(tokens) > 1:
            at = _find(words, tokens[-1:])  # 'requests.total' named as 'the requests total'
            if at >= 0 and _find(words, tokens[:1]) < 0:
                at = -1
        if at >= 0:
            key = (set(tokens) <= _SHAPE_WORDS, -len(tokens), at, column)
            if best is None or key < best:
                best = key
    return best[3] if best else None


_SHAPE_WORDS = frozenset("total sum average mean max maximum min minimum largest highest".split())


def _time_terms(q: str, ts: str) -> list[str]:
    """WHERE terms for a date and a time of day the question names."""
    terms: list[str] = []
    day: str | None = None
    for pattern, form in _DATE_PATTERNS:
        m = pattern.search(q)
        if not m:
            continue
        g = m.groups()
        if form == "ymd":
            day = f"{g[0]}-{g[1]}-{g[2]}"
        elif form == "dmy":
            day = f"{g[2]}-{_MONTHS[g[1][:3]]:02d}-{int(g[0]):02d}"
        elif form == "mdy":
            day = f"{g[2]}-{_MONTHS[g[0][:3]]:02d}-{int(g[1]):02d}"
        elif form == "my":
            terms.append(f"strftime({ts}, '%Y-%m') = '{g[1]}-{_MONTHS[g[0][:3]]:02d}'")
        elif form == "m":
            terms.append(f"strftime({ts}, '%m') = '{_MONTHS[g[0][:3]]:02d}'")
        elif form == "md":
            terms.append(f"strftime({ts}, '%m-%d') = '{_MONTHS[g[0][:3]]:02d}-{int(g[1]):02d}'")
        else:
            terms.append(f"strftime({ts}, '%m-%d') = '{_MONTHS[g[1][:3]]:02d}-{int(g[0]):02d}'")
        break
    if day is not None:
        terms.append(f"CAST({ts} AS DATE) = DATE '{day}'")
    # The time of day as text: a cast to TIME is not defined for TIMESTAMPTZ, and zero-padded
    # 'HH:MM:SS' compares as the clock does.
    clock = f"strftime({ts}, '%H:%M:%S')"
    m = re.search(rf"\b(?:between|from) {_CLOCK} (?:and|to|until) {_CLOCK}", q)
    if m:
        end = _hms(m.group(2), end=True)
        # 'between 10:00 and 11:00' ends before 11:00; 'between 10:00:00 and 10:59:59' at 10:59:59.
        last = "<=" if end.endswith(":59") else "<"
        terms.append(f"{clock} >= '{_hms(m.group(1))}' AND {clock} {last} '{end}'")
        return terms
    m = re.search(rf"\b(after|since|from|before|until|by) {_CLOCK}", q)
    if m:
        op = {"after": ">", "since": ">=", "from": ">=", "before": "<", "until": "<=", "by": "<="}[m.group(1)]
        terms.append(f"{clock} {op} '{_hms(m.group(2))}'")
    return terms


def _hms(clock: str, *, end: bool = False) -> str:
    """'9:30' as '09:30:00'; as the end of a span, '10:59' is '10:59:59' (the whole minute)."""
    parts = clock.split(":")
    seconds = parts[2] if len(parts) > 2 else ("59" if end and parts[1] == "59" else "00")
    return f"{int(parts[0]):02d}:{parts[1]}:{seconds}"


# --------------------------------------------------------------------------- SQL text


def _ident(name: str) -> str:
    bare = re.fullmatch(r"[a-z_][a-z0-9_]*", name) and name not in _RESERVED
    return name if bare else sql_name(name)


def _named_as(ident: str, name: str) -> str:
    """The selected column, given a plain name where it is a struct's field or needs quotes."""
    alias = re.sub(r"\W+", "_", name.split(".")[-1]).strip("_").lower() or "value"
    alias = alias if alias not in ("n", "line", "line_no") and alias not in _RESERVED else f"{alias}_value"
    return ident if ident == alias else f"{ident} AS {alias}"


def _py_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
