"""What `rlm stats` says of an input, in a few lines of the model's first-turn profile.

The time the input spans, its lines over that time as a sparkline, its error rows, and (on a
table of up to TEMPLATE_ROWS rows: the masking pass reads every row's text, ~20 s on a
gigabyte of lines that never repeat) its most common message templates: rlm.input.stats
computes them over the table with DuckDB, as `rlm stats` does. Nothing here calls a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlm.input.source import Profile
from rlm.input.stats import input_stats
from rlm.text.timeshow import duration, sparkline, when
from rlm.text.visible import visible

__all__ = ["TEMPLATE_ROWS", "first_turn_summary", "summary_or_warn"]

TEMPLATE_ROWS = 1_000_000
_TEMPLATES_SHOWN = 3
_TEMPLATE_CHARS = 48


def summary_or_warn(profile: Profile, warn: Callable[[str], None]) -> str | None:
    """first_turn_summary, or None with `warn` told why when it cannot be made: a failure
    costs the prompt that line only (the table's columns are told all the same)."""
    try:
        return first_turn_summary(profile)
    except Exception as exc:  # noqa: BLE001 (the run goes on without the summary, and says why)
        warn(f"the input's summary could not be made: {type(exc).__name__}: {exc}")
        return None


def first_turn_summary(profile: Profile) -> str | None:
    """The summary's lines for the prompt; None when the input has no table to sum up."""
    if profile.table is None or profile.table_path is None:
        return None
    rows = int(profile.table["rows"])
    doc = input_stats(profile, top=_TEMPLATES_SHOWN if rows <= TEMPLATE_ROWS else 0)
    said: list[str] = []
    time, histogram, errors = doc["time"], doc["histogram"], doc["errors"]
    if time is not None and time["first"] is not None:
        zone = " UTC" if time["utc"] else ""
        said.append(
            f"{visible(time['column'])} {when(time['first'])} → {when(time['last'])}{zone} "
            f"({duration(time['span_s'])})"
        )
    if histogram is not None and len(histogram["counts"]) > 1:
        said.append(f"rows per {histogram['bucket']} {sparkline(histogram['counts'])}")
    if errors is not None:
        said.append(f"{errors['rows']:,} error rows ({visible(errors['rule'])})")
    templates = doc["templates"]
    if templates is not None and templates["top"]:
        top = ", ".join(f"{_cut(visible(t['template']))!r} {t['count']:,}" for t in templates["top"])
        said.append(f"top templates: {top}")
    return "Summary (rlm stats): " + "; ".join(said) if said else None


def _cut(text: Any) -> str:
    s = str(text)
    return s if len(s) <= _TEMPLATE_CHARS else s[: _TEMPLATE_CHARS - 1] + "…"
