"""A time as the file's own lines write it, read for the table's time column.

A model that has seen lines copies a time as a line writes it (`081109`, `Dec 10 06:55:46`,
`2015-10-18 18:01:47,978`), not as the table's `ts` shows it, and compares `ts` to that. Refused
with an example of the table's form, a small model sent the same value again step after step.
The forms are the format's own (rlm.input.logformats.written_time_forms), never guessed from
the value: in another table a six-digit value is a number, not a date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from rlm.input.logformats import assumed_year, written_time_forms

TIME_COLUMN = "ts"  # the column a line format reads its time into


@dataclass(frozen=True)
class WrittenTime:
    """How the file's lines write the time column's value."""

    forms: tuple[str, ...]  # strptime formats, the whole time first, then its date alone
    year: int | None  # for forms that write no year: the year the table took (else None)

    def read(self, text: str) -> tuple[datetime, str] | None:
        """(the time, the unit it is given to: "second" or "day") where `text` is in one of the
        forms; None where it is in none."""
        for form in self.forms:
            value, pattern = text, form
            if "%y" not in form.lower():
                if self.year is None:
                    continue
                value, pattern = f"{self.year} {text}", f"%Y {form}"
            try:
                when = datetime.strptime(value, pattern)
            except ValueError:
                continue
            return when, "second" if "%S" in form else "day"
        return None

    def day(self, text: str) -> date | None:
        """The day `text` is, where it is the date alone in the lines' form and as long as that
        form writes one (`081110`; not `1234`, which the form would read as 2012-03-04)."""
        form = self.forms[-1]
        if "%y" not in form.lower() or len(text) != len(_SAMPLE.strftime(form)):
            return None
        read = self.read(text)
        return read[0].date() if read is not None and read[1] == "day" else None


_SAMPLE = datetime(2000, 10, 20)  # a date whose every part is written in full


def written_time(table: dict[str, Any]) -> WrittenTime | None:
    """How the table's lines write its time column, where its format says; None otherwise."""
    forms = written_time_forms(str(table.get("format") or ""))
    if not forms:
        return None
    return WrittenTime(forms, assumed_year(str(table.get("note") or "")))
