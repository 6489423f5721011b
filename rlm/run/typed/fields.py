"""The values a quoted line's placeholders stand for, offered as columns of the table.

Questions about logs name a value inside free text by quoting its line with a placeholder where
the value goes (`rhost=<host>`, `Took N seconds`). The table's parse rarely has that value as a
column, and a small model then ranks or totals the nearest column it has (a host field, a pid):
on the development sets' traces, none of a third of the questions, those about such values, was
answered right. Each named placeholder of a quoted text becomes a column of its own, named as
the question writes it (`<host>`, `N`): the value read from the raw line by a pattern built from
the quoted text, NULL on a line the text does not fit.

What is taken depends on the question's quoting alone, never on particular words: every quoted
text (rlm.run.typed.quoted) with a placeholder that has a name (`<...>` with a word inside, a
lone capital, NUM ...); `...` fits any text and names nothing. A field is a number (TRY_CAST:
NULL where the text is not one) when every value it reads in the first lines of the input is
one; where none of those lines fits, when its placeholder is not in angle brackets (`N`). A
placeholder one text writes twice (`copied N chunks in N ms`) is named each time with the word
beside it (`copied N`, `N ms`). A name the table already has, or one taken by an earlier
text's placeholder, is not offered twice.

Where the question asks for an IP address (rlm.run.answer_kind) and the table has no column of
them, the last address written in each raw line is a field too, `<ip>`: the address a message
names (a connection from, a peer) is otherwise in no column the model can rank. So is the first
MAC address (`<mac>`) or UUID (`<uuid>`) of each line where the question names one and no
column's name does: values of a fixed shape, written inside messages, never parsed out.

Where the question says a value is written after a fixed text (`the uid= value`, `the
figure after '>>>'`: rlm.run.typed.markers), that value is a field too, named by the text
(`<uid>`), marked as asked for: a query of another column is moved onto it
(rlm.run.typed.measure).

Where the question asks an amount of a word ("how many bytes", "the sum of the block sizes", "the
most bytes": a word just after how many, total, average, largest ...) and the first lines write
a number with that word, before it (`48213 bytes`) or after it (`size 67108864`, `time: 0.24`),
that number is a field too, named by the word (`<bytes>`), `counted`: a count of lines, or a
total of another column, is then moved onto it where the question's words say so
(rlm.run.typed.measure). The word chooses nothing by itself: a word no line writes with a
number gives no field.

A question quotes a line as it reads, leaving out asides in brackets: `N bytes sent` fits
`N bytes (1.16 KB) sent`. Where the quoted text fits none of the first lines and those are the
whole input, it is no line of it (a date's format, `Mon D`; a line of another file), and a
column of it would be empty on every line: none is offered.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rlm.run.answer_kind import IP, asked_kind, columns_of_kind
from rlm.run.typed.markers import VALUE, Marker, question_markers
from rlm.run.typed.placeholders import ASIDES, PLACEHOLDER, as_read, quoted_texts, unquoted
from rlm.text.sqltext import sql_string

__all__ = [
    "ADDRESS_TEMPLATE",
    "SHAPE_TEMPLATES",
    "FIELDS_KEY",
    "MAX_FIELDS",
    "QuotedField",
    "Sample",
    "names_a_field",
    "quoted_fields",
    "read_fields",
    "sample_lines",
    "stated_amounts",
    "with_quoted_fields",
]

FIELDS_KEY = "quoted_fields"  # where a node's table description holds them
MAX_FIELDS = 4  # each is one more name in every enum of the schema
_MIN_FIXED = 3  # characters of fixed text (spaces aside) a quote needs to fit its lines alone (`####`)
_UNNAMED = re.compile(r"<\s*>|\.{2,}|…")
_EDGE_PUNCTUATION = ".,;:)]}'\""  # ends a sentence or a bracket, not a value written at the end
SAMPLE_BYTES = 4 << 20  # the input's first lines a field's kind is read from (tens of ms to scan)
_SAMPLE_VALUES = 64  # values enough to call a field's kind
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
ADDRESS_TEMPLATE = "… <ip> …"  # the address field's template: the last IP address in the line
_ADDRESS_NAME = "<ip>"
# The last IPv4 address of a line, not inside a longer run of digits and dots (a version, an OID),
# a port after it or not. The last: a line's prefix (a listener's `0.0.0.0:2181` in a thread's
# name) comes before its message, where the address a question is about is written.
_ADDRESS = r"^.*(?:^|[^0-9.])([0-9]{1,3}(?:\.[0-9]{1,3}){3})(?:[^0-9.]|\.?$|\.[^0-9])"


class Sample(NamedTuple):
    """The input's first lines, which a field's kind is read from, and whether they are all of it."""

    lines: Sequence[str] = ()
    whole: bool = False


@dataclass(frozen=True)
class QuotedField:
    """One named placeholder of a quoted text: a column read from the raw line."""

    name: str  # as the question writes it: "<host>", "N"
    template: str  # the quoted text it is part of
    pattern: str  # a regular expression (RE2 and Python alike) whose group `group` is the value
    group: int
    number: bool
    seen: str | None = None  # a value of it in the input's first lines: the examples' filter value
    marked: bool = False  # the value after a marker the question names: what it asks about
    counted: bool = False  # the number the lines write with a word the question counts (`N bytes`)

    def sql(self, line: str) -> str:
        """The value in SQL, read from the text column `line`: NULL where the line does not fit."""
        found = f"NULLIF(rtrim(regexp_extract({line}, {sql_string(self.pattern)}, {self.group}), {sql_string(_EDGE_PUNCTUATION)}), '')"
        return f"TRY_CAST(replace({found}, ',', '') AS DOUBLE)" if self.number else found

    def as_json(self) -> list[Any]:
        return [
            self.name,
            self.template,
            self.pattern,
            self.group,
            self.number,
            self.seen,
            self.marked,
            self.counted,
        ]


def _fields_of(quoted: str, sample: Sample) -> list[QuotedField]:
    """The named placeholders of one quoted text, each with the pattern of the whole text; none
    where the sample is the whole input and no line of it fits, or where its fixed text is too
    short to hold to."""
    template = quoted.strip()
    built = _pattern(template)
    if built is None or len(re.sub(r"\s", "", PLACEHOLDER.sub("", template))) < _MIN_FIXED:
        # Too little fixed text to fit (`<a>,<b>`): it would read a value from any line with a comma.
        return []
    pattern, names = built
    fits, found = _values_read(pattern, [g for _, g in names], sample.lines)
    if not fits and sample.whole:
        return []
    return [
        QuotedField(name, template, pattern, group, _is_number(name, found[group]), _typical(found[group]))
        for name, group in names
        if name.strip("<> ")
    ]


def _typical(values: list[str]) -> str | None:
    """The value read most often (the first such), for an example; None when none was read."""
    return max(values, key=values.count) if values else None


def _pattern(template: str) -> tuple[str, list[tuple[str, int]]] | None:
    """A quoted text as a regular expression with a group for each named placeholder, and
    (name, group) of each; None when it names none."""
    pieces: list[str] = []
    names: list[tuple[str, int]] = []  # (name, group)
    end = 0
    marks = list(PLACEHOLDER.finditer(template))
    skip_space = False
    for i, mark in enumerate(marks):
        fixed = template[end : mark.start()]
        pieces.append(as_read(fixed.lstrip() if skip_space else fixed))
        skip_space = False
        last = i == len(marks) - 1 and not template[mark.end() :].strip()
        if _UNNAMED.fullmatch(mark.group()):
            # Any text, spaces around it included: `failure; ... rhost=` fits `failure; rhost=`.
            pieces[-1] = pieces[-1].removesuffix(r"\s+")
            pieces.append(r"\s*.*?")
            skip_space = True
        else:
            # A value is one token (or none: NULL): up to the fixed text after it, or a space at the end.
            pieces.append(r"(\S*)" if last else r"(\S*?)")
            names.append((mark.group(), len(names) + 1))
        end = mark.end()
    if not any(name.strip("<> ") for name, _ in names):
        return None
    pieces.append(as_read(template[end:].lstrip() if skip_space else template[end:]))
    return "(?i)" + "".join(pieces), _told_apart(template, names, marks)


def _told_apart(
    template: str, names: list[tuple[str, int]], marks: list[re.Match[str]]
) -> list[tuple[str, int]]:
    """The names of a text's placeholders, each written more than once (`moved N files in N ms`)
    named with the word the text writes next to it: its unit after it (`N ms`), else the word
    before it that names it (`moved N`), else the one after, a name taken going to the next.
    One column named `N` held the first alone, and the second was the one asked."""
    named = [m for m in marks if not _UNNAMED.fullmatch(m.group())]
    seen = Counter(name for name, _ in names)
    # The text's own words: a placeholder beside another (`from N: N:`) is named by neither.
    blank = PLACEHOLDER.sub(lambda m: " " * len(m.group()), template)
    out: list[tuple[str, int]] = []
    for (name, group), mark in zip(names, named, strict=True):
        if seen[name] > 1:
            after = re.match(r"[^\w%]*?(\w+|%)", blank[mark.end() :])
            before = re.search(r"(\w+)\W*?$", blank[: mark.start()])
            unit = [f"{name} {after[1]}"] if after and _UNIT_WORD.fullmatch(after[1]) else []
            words = [
                *unit,
                *([f"{before[1]} {name}"] if before else []),
                *([f"{name} {after[1]}"] if after else []),
            ]
            taken = {n for n, _ in out}
            name = next((n for n in words if n not in taken), f"{name} ({len(out) + 1})")
        out.append((name, group))
    return out


# A unit a log writes after its number: the number's name where a text writes two of one kind.
_UNIT_WORD = re.compile(
    r"%|[kmgt]?i?b|bytes?|[mnµu]?s|secs?|seconds?|millis(?:econds?)?|minutes?|mins?|hours?|hrs?|days?|ms",
    re.I,
)


def _values_read(pattern: str, groups: list[int], sample: Sequence[str]) -> tuple[int, dict[int, list[str]]]:
    """How many of the first lines of `sample` the pattern fits (at most _SAMPLE_VALUES), and
    each group's values in them.

    Read by DuckDB's RE2, in time linear in the text: the lines are the input's, and a quoted
    text with several `...` is a pattern Python's backtracking engine can take hours over on a
    crafted line."""
    found: dict[int, list[str]] = {g: [] for g in groups}
    if not sample:
        return 0, found
    import duckdb  # the table's own engine, loaded by every run that has a table

    picked = ", ".join(["1", *(f"regexp_extract(l, $p, {g})" for g in groups)])
    query = f"SELECT {picked} FROM (SELECT unnest($lines) AS l) WHERE regexp_matches(l, $p) LIMIT {_SAMPLE_VALUES}"
    try:
        with duckdb.connect() as con:
            rows = con.execute(query, {"p": pattern, "lines": list(sample)}).fetchall()
    except duckdb.Error:
        return -1, found  # a pattern RE2 refuses: nothing is known of its fit; kinds by the names
    for row in rows:
        for g, value in zip(groups, row[1:], strict=True):
            cleaned = str(value or "").rstrip(_EDGE_PUNCTUATION).replace(",", "")
            if cleaned:
                found[g].append(cleaned)
    return len(rows), found


def _is_number(name: str, values: list[str]) -> bool:
    """Whether a field is a number: by the values it reads, else by how it is written."""
    if values:
        return all(_NUMBER.fullmatch(v) for v in values)
    return not name.startswith("<")


def sample_lines(path: str) -> Sample:
    """The whole lines in the first SAMPLE_BYTES of a UTF-8 file; none when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SAMPLE_BYTES + 1)
    except OSError:
        return Sample()
    lines = head.decode("utf-8", errors="replace").splitlines()
    if len(head) <= SAMPLE_BYTES:
        return Sample(lines, whole=True)
    return Sample(lines[:-1] if len(lines) > 1 else lines)


def quoted_fields(question: str, column_names: list[str], sample: Sample = Sample()) -> list[QuotedField]:
    """The named placeholders of the texts the question quotes, at most MAX_FIELDS, none with
    the name of a column of `column_names` (any case); their kinds read from `sample` lines."""
    taken = {n.casefold() for n in column_names}
    out: list[QuotedField] = []
    for template in quoted_texts(question):
        for field in _fields_of(template, sample):
            if field.name.casefold() in taken or len(out) >= MAX_FIELDS:
                continue
            taken.add(field.name.casefold())
            out.append(field)
    return out


# A word the question names a value by ("which rhost value", "the uid field"): a key where the
# lines write it so (`rhost=`), never by the word alone.
_KEY_WORD = re.compile(r"\b([A-Za-z_][\w.-]{1,40})\s+(?:values?|fields?)\b")


def _marker_field(marker: Marker, sample: Sample) -> QuotedField | None:
    """The value after a marker as a field; None where the sample is the whole input and no line
    of it holds the marker with a value after it."""
    # A key begins a word: `user=` is not the end of `ruser=` (whose empty value was read as the
    # next key's name). Its value is glued to its `=`; after `:` or `#` a space may come first.
    start = r"(?:^|[^A-Za-z0-9_])" if re.match(r"\w", marker.head) else ""
    gap = "" if marker.head.endswith("=") else r"\s*"
    pattern = (
        "(?i)"
        + start
        + as_read(marker.head)
        + (f"({as_read(marker.lead)}" + VALUE[1:] if marker.lead else gap + VALUE)
    )
    fits, found = _values_read(pattern, [1], sample.lines)
    if not fits and sample.whole:
        return None
    number = bool(found[1]) and all(_NUMBER.fullmatch(v) for v in found[1])
    return QuotedField(marker.name, marker.template, pattern, 1, number, _typical(found[1]), marked=True)


# Values of a fixed shape a question names by their kind: (the words, the field's name, the
# template it is described by, a pattern whose group 1 is the line's first such value).
_SHAPES = (
    (
        re.compile(r"\bMAC(?:\s+address(?:es)?|s)?\b"),
        "<mac>",
        "… <mac> …",
        r"(?i)(?:^|[^0-9a-f:])([0-9a-f]{2}(?::[0-9a-f]{2}){5})(?:[^0-9a-f:]|$)",
    ),
    (
        re.compile(r"\bUUIDs?\b", re.I),
        "<uuid>",
        "… <uuid> …",
        r"(?i)(?:^|[^0-9a-f-])([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:[^0-9a-f-]|$)",
    ),
)
SHAPE_TEMPLATES = frozenset(template for _, _, template, _ in _SHAPES)


def _shape_fields(
    question: str, names: list[str], taken: list[QuotedField], sample: Sample
) -> list[QuotedField]:
    """A field of each fixed-shape value the question names (a MAC address, a UUID) that no
    column's name says it holds (`mac`, `instance_uuid`) and some of the first lines hold."""
    out: list[QuotedField] = []
    for words, name, template, pattern in _SHAPES:
        kind = name.strip("<>")
        if not words.search(unquoted(question)) or any(kind in n.casefold() for n in names):
            continue
        if len(taken) + len(out) >= MAX_FIELDS or any(f.name == name for f in taken):
            continue
        fits, found = _values_read(pattern, [1], sample.lines)
        if fits > 0:
            out.append(QuotedField(name, template, pattern, 1, False, _typical(found[1])))
    return out


# A word a question asks an amount of: up to two words after "how many", "the total", "the
# largest" ..., the words between aside: `how many kilobytes altogether`, `the sum of the block sizes`.
_ASKING = frozenset(
    "many total sum summing summed average mean largest smallest most fewest maximum minimum highest lowest".split()
)
_BETWEEN = frozenset("how many the of all its their number amount count value values up".split())
# Not words of an amount: "how many times", "the most lines" count lines, whatever a line writes.
# Nor the little words between ("from", "with"): `from 10.0.0.1` is no amount of "from".
_NOT_COUNTED = frozenset(
    "a an in on per for and or to is was were are did do does times lines rows entries records occurrences "
    "from by with at into onto than via over under after before since until between during within without "
    "which what who that this these those it its they them their there here any each every one".split()
)
_AFTER_ASKING = 2
# A number as lines write one: `2364`, `1,203`, `0.5`. A comma only between groups of three
# digits: in `78,081109,2561,WARN` (a CSV line) no number is written with the word.
_FIGURE = r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_FIGURE_END = r"(?:[^\w.,]|$)"  # a number's end: not inside a longer token


# A unit the question writes after a number it states ("over 90 seconds", "a 500 ms
# timeout"): the lines' number written with it is then what the number is compared with.
_STATED_AMOUNT = re.compile(
    r"(?<![\w.])(?<!top )(?<!first )(?<!last )\d[\d,]*(?:\.\d+)?\s*([A-Za-z]{2,12})\b", re.I
)
# Words after a number that are no unit of an amount: a date's month, an ordinal, a rounding.
_NOT_UNITS = frozenset(
    "am pm st nd rd th decimal decimals digits places percent top jan feb mar apr may jun jul aug sep sept oct "
    "nov dec january february march april june july august september october november december".split()
)


def stated_amounts(question: str) -> list[tuple[str, str]]:
    """(number, unit) of each number the question writes with a unit after it (`20 seconds`)."""
    return [
        (m.group(0)[: m.start(1) - m.start(0)].strip().replace(",", ""), m.group(1))
        for m in _STATED_AMOUNT.finditer(question)
        if m.group(1).lower() not in _NOT_UNITS | _NOT_COUNTED
    ]


def _counted_words(question: str) -> list[str]:
    """The words a question asks an amount of (_ASKING), or states one in (`20 seconds`), each
    once, as written."""
    words = re.findall(r"[A-Za-z]{2,30}", question)
    out: list[str] = [unit for _, unit in stated_amounts(question)]
    for i, word in enumerate(words):
        if word.lower() not in _ASKING:
            continue
        after = words[i + 1 :]
        while after and after[0].lower() in _BETWEEN | _ASKING:
            after.pop(0)
        for w in after[:_AFTER_ASKING]:
            if w.lower() in _NOT_COUNTED | _BETWEEN | _ASKING:
                break
            if w not in out:
                out.append(w)
    return out


def _next_word(question: str, word: str) -> str | None:
    """The word the question writes right after `word` (`received` of "bytes received"), where
    it may name what sets the number apart: not a word between ("of", "in", "the")."""
    found = re.search(rf"\b{re.escape(word)}\s+([A-Za-z]{{3,30}})\b", question)
    after = found.group(1) if found else None
    return after if after and after.lower() not in _NOT_COUNTED | _BETWEEN | _ASKING else None


def _listed_values(table: dict[str, Any]) -> set[str]:
    """The values the table's description lists of its columns, case folded."""
    listed = table.get("values") or {}
    return {
        str(pair[0]).casefold()
        for values in listed.values()
        if isinstance(values, list)
        for pair in values
        if isinstance(pair, list | tuple) and pair
    }


def _counted_fields(
    question: str, names: list[str], taken: list[QuotedField], sample: Sample, listed: set[str]
) -> list[QuotedField]:
    """The number the lines write just before a word the question asks an amount of (`2364
    bytes`), or else just after it (`size 67108864`), as a field of that word (`<bytes>`), where
    no column is named so and some of the first lines write it so (its plural or singular). Not
    of a value a column lists (`listed`): "WARN-level lines" counts lines of a level, and the
    number a line writes before `WARN` is its pid, no amount of warnings."""
    known = {n.casefold().strip("<>") for n in names} | {f.name.casefold().strip("<>") for f in taken}
    known |= listed
    out: list[QuotedField] = []
    for word in _counted_words(question):
        if len(taken) + len(out) >= MAX_FIELDS:
            break
        forms = dict.fromkeys([word.lower(), re.sub(r"(?<=[a-z])(?:es|s)$", "", word.lower())])
        if known & set(forms):
            continue
        spelled = "(?:" + "|".join(re.escape(f) for f in forms) + ")"
        # The number before the word and the question's next word, as the lines write both
        # (`502 bytes received`, not the `1203 bytes (1.17 KB) sent` before it on the line)
        # first; then the word as a key (`time: 0.24`); else the number a word of its own (after
        # a space or a bracket, not the tail of `blk_-123`) before the word or after it,
        # whichever fits more of the first lines.
        then = _next_word(question, word)
        read = [
            (pattern, template, *_values_read(pattern, [1], sample.lines))
            for pattern, template in (
                *(
                    [
                        (
                            rf"(?i)(?:^|[\s(\[]){_FIGURE}\s*{spelled}(?:s|es)?{ASIDES}{re.escape(then)}\b",
                            f"N {word} {then}",
                        )
                    ]
                    if then
                    else []
                ),
                (rf"(?i)(?:^|[^\w]){spelled}(?:s|es)?\s*[:=]\s*{_FIGURE}{_FIGURE_END}", f"{word}: N"),
                (rf"(?i)(?:^|[\s(\[]){_FIGURE}\s*{spelled}(?:s|es)?\b", f"N {word}"),
                (rf"(?i)(?:^|[^\w]){spelled}(?:s|es)?\s+{_FIGURE}{_FIGURE_END}", f"{word} N"),
            )
        ]
        first = next((r for r in read[: len(read) - 2] if r[2] > 0), None)
        pattern, template, fits, found = first or max(read[-2:], key=lambda r: r[2])
        if fits > 0:
            name = f"<{word.lower()}>"
            out.append(QuotedField(name, template, pattern, 1, True, _typical(found[1]), counted=True))
            known |= set(forms)
    return out


def _address_field(taken: list[QuotedField], sample: Sample) -> QuotedField | None:
    """The last IP address of each line as a field, where some of the first lines hold one and
    no quoted placeholder is named `<ip>` already."""
    if len(taken) >= MAX_FIELDS or any(f.name.casefold() == _ADDRESS_NAME for f in taken):
        return None
    fits, found = _values_read(_ADDRESS, [1], sample.lines)
    if fits <= 0:
        return None
    return QuotedField(_ADDRESS_NAME, ADDRESS_TEMPLATE, _ADDRESS, 1, False, _typical(found[1]))


def with_quoted_fields(
    table: dict[str, Any], question: str, sample: Callable[[], Sample] = Sample
) -> dict[str, Any]:
    """The table's description with the question's quoted fields (a copy; the same when none),
    their kinds read from `sample()`, the input's first lines (read only when there are fields),
    and the address in each line where an IP address is asked and no column holds them."""
    names = [str(pair[0]) for pair in table.get("columns") or [] if isinstance(pair, list | tuple) and pair]
    if "line" not in names:
        return table  # no raw line to read a field from
    asked = asked_kind(question)
    address = asked is not None and asked.kind == IP and not columns_of_kind(IP, table)
    markers = question_markers(question)
    # "the rhost value": a word before "value" or "field" that the lines write as a key (`rhost=`).
    keyed = [
        w for w in _KEY_WORD.findall(unquoted(question)) if w.casefold() not in {n.casefold() for n in names}
    ]
    shaped = any(words.search(unquoted(question)) for words, _, _, _ in _SHAPES)
    counted = bool(_counted_words(question))
    if (
        not address
        and not markers
        and not keyed
        and not shaped
        and not counted
        and not quoted_fields(question, names)
    ):
        return table
    lines = sample()
    known = {m.text for m in markers}
    markers += [
        Marker(f"{word}=")
        for word in dict.fromkeys(keyed)
        if f"{word}=" not in known
        and any(re.search(rf"(?<![\w.-]){re.escape(word)}=", line) for line in lines.lines)
    ]
    fields = quoted_fields(question, names, lines)
    taken = {n.casefold() for n in [*names, *(f.name for f in fields)]}
    for marker in markers:
        if marker.name.casefold() not in taken and len(fields) < MAX_FIELDS:
            fields += [f for f in [_marker_field(marker, lines)] if f is not None]
            taken.add(marker.name.casefold())
    if address and _ADDRESS_NAME not in {n.casefold() for n in names}:
        fields += [f for f in [_address_field(fields, lines)] if f is not None]
    fields += _shape_fields(question, names, fields, lines) if shaped else []
    fields += _counted_fields(question, names, fields, lines, _listed_values(table)) if counted else []
    return {**table, FIELDS_KEY: [f.as_json() for f in fields]} if fields else table


def names_a_field(action: dict[str, Any], table: dict[str, Any], *, quoted_only: bool = False) -> bool:
    """Whether a typed action names a quoted field anywhere: its query is then of the lines the
    quoted text fits, as if it filtered on them. `quoted_only`: a field of a text the question
    quotes, not one read from any line (the last address, a value of a fixed shape, a number
    written with a word, the value after a marker): a query of those is of every line the field
    is read from, and the quote that names the lines still holds it."""
    fields = {
        f.name
        for f in read_fields(table)
        if not quoted_only
        or (f.template not in (ADDRESS_TEMPLATE, *SHAPE_TEMPLATES) and not f.counted and not f.marked)
    }
    if not fields:
        return False
    where = action.get("where") or []
    named = [action.get(k) for k in ("column", "by", "order_by")]
    named += list(action.get("columns") or []) if isinstance(action.get("columns"), list) else []
    named += [f.get("column") for f in (where if isinstance(where, list) else [where]) if isinstance(f, dict)]
    return any(isinstance(n, str) and n in fields for n in named)


def read_fields(table: dict[str, Any]) -> list[QuotedField]:
    """The quoted fields a table's description holds (those of with_quoted_fields)."""
    out = []
    for item in table.get(FIELDS_KEY) or []:
        name, template, pattern, group, number, seen, *flags = item
        out.append(
            QuotedField(
                str(name),
                str(template),
                str(pattern),
                int(group),
                bool(number),
                None if seen is None else str(seen),
                bool(flags and flags[0]),
                bool(len(flags) > 1 and flags[1]),
            )
        )
    return out
