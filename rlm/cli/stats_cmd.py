"""`rlm stats PATH...`: what an input holds, without any model (registered in rlm/cli/app.py).

The inputs are read as `rlm ask` reads them (several files, quoted globs, directories,
compressed files, remote objects; --order, --skip-bad, --include, --exclude, --max-file-mb),
into the same cached index and table; the summary is computed over the table by
rlm.input.stats. Human text on stdout, every piece of the file's text made visible
(rlm.text.visible); with --json, one document (schema `rlm-stats/1`):

    schema       "rlm-stats/1"
    input        the input's name (several parts: "first … last")
    format       the format detected (apache-access, syslog, log, csv, jsonl, text, ...)
    encoding     the text's encoding
    lines        lines in the whole text
    bytes        bytes on disk (of every part; compressed ones as stored)
    text_bytes   bytes of text (decompressed, parts joined)
    parts        each part read, in reading order: name, size, plain_size, compression,
                 lines, first_line, last_line (its range in the whole), format (its own,
                 recognized on its first lines; null if unknown)
    skipped      each part left out: name, why
    time_range   with --since/--until: since and until (resolved, ISO 8601), said (in words),
                 lines (in range), left_out (the parts with no line in it: name, why); else null
    table        the table `log`: format (e.g. apache-combined), rows, parsed, columns; or null
    time         the time column's span, or null: column, read_as, utc (true: times are
                 instants, shown in UTC), first and last (earliest and latest, ISO 8601),
                 span_s, rows_with_time, rows_without_time
    histogram    rows per time bucket, or null: bucket_s, bucket (in words), start (of the
                 first bucket, ISO 8601), counts (one a bucket, at most 60), total (their sum:
                 the rows with a time)
    errors       error rows, or null: column, rule (in words), rows (all of them), counts (per
                 histogram bucket, when there is a histogram)
    templates    the most common templates, or null: of (the text they are made of), chars,
                 masks, distinct, top: [{template, count, first_line}]
    notes        what could not be summed up, and why

Exit codes: 0 shown; 1 an internal error; 2 usage error; 3 an input unreadable; 130
interrupted. Errors are one line on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from rlm.cli.jsonout import print_json
from rlm.cli.settings_flags import with_settings_flags
from rlm.errors import ExitCode, RlmError
from rlm.text.textcap import human_size
from rlm.text.timeshow import duration, sparkline, when
from rlm.text.visible import visible
from rlm.trace.redact import redact_text

_SHOWN_TEMPLATE_CHARS = 120  # of a template, in the text; --json has the whole


def _fail(message: str, code: int) -> None:
    print(f"rlm: {visible(redact_text(message))}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


@with_settings_flags(
    "order",
    "skip_bad",
    "include",
    "exclude",
    "max_file_mb",
    "since",
    "until",
    help={
        "skip_bad": "Of several inputs, leave out a missing, unreadable or damaged one (said on stderr "
        "and in the summary) instead of stopping with exit 3"
    },
)
def stats_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH...",
            help="The files to sum up, as `rlm ask` takes them (- for standard input, alone; a quoted "
            "glob; a directory; s3://, gs:// and https:// URLs). Several are read as one text.",
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document on stdout (rlm-stats/1).")
    ] = False,
    top: Annotated[
        int, typer.Option("--top", metavar="N", help="How many templates to list; 0: none (no masking pass).")
    ] = 10,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress on stderr.")] = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Sum up the input at PATH... without any model: parts, lines, bytes, format, time span,
    lines and error lines over time, and the most common message templates."""
    from rlm.input.parts import open_inputs, read_summary
    from rlm.input.stats import input_stats
    from rlm.input.tables import build_progress
    from rlm.input.timerange import parse_range
    from rlm.input.walk import WalkRules
    from rlm.run.settings import load_settings

    if top < 0:
        _fail(f"--top must be 0 or more, not {top}", int(ExitCode.USAGE))
    _register_url_secrets(paths)
    progress = _Progress(sys.stderr if not quiet and sys.stderr.isatty() else None)
    try:
        settings = load_settings(flags)
        with (
            build_progress(progress),
            open_inputs(
                paths,
                cache_dir=settings.cache_dir,
                stdin=sys.stdin.buffer,
                order=settings.order,
                skip_bad=settings.skip_bad,
                walk=WalkRules.parse(settings.include, settings.exclude, settings.max_file_mb),
                time_range=parse_range(settings.since, settings.until),
            ) as source,
        ):
            progress.done()
            profile = source.profile
            summary = read_summary(profile)
            # A part left out, or a time range (what it holds), is the user's to know.
            if summary is not None and (profile.skipped or profile.time_range is not None):
                print(f"rlm: {redact_text(summary)}", file=sys.stderr, flush=True)
            for note in profile.warnings:
                print(f"rlm: {visible(redact_text(note))}", file=sys.stderr, flush=True)
            progress.say(f"summing up {profile.lines:,} lines…")
            doc = input_stats(profile, top=top)
            progress.done()
    except KeyboardInterrupt:
        progress.done()
        _fail("interrupted", int(ExitCode.INTERRUPTED))
        return
    except RlmError as exc:
        progress.done()
        _fail(exc.message, int(exc.exit_code))
        return
    except Exception as exc:  # the last resort: one line, never a traceback
        progress.done()
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        _fail(f"internal error ({what}); please report it", int(ExitCode.NO_ANSWER))
        return
    try:
        if as_json:
            print_json(doc)
        else:
            sys.stdout.write(redact_text(render(doc)))
            sys.stdout.flush()
    except BrokenPipeError:
        # `rlm stats big.log | head` closes the pipe early: not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _register_url_secrets(paths: list[str]) -> None:
    """The credentials written into a remote input's URL, registered so nothing shows them."""
    if not any("://" in p for p in paths):
        return
    from rlm.input.remote import url_secrets
    from rlm.trace.redact import register_secret

    for path in paths:
        for value in url_secrets(path):
            register_secret(value)


class _Progress:
    """The table build's progress on a terminal's stderr, one line rewritten in place."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.shown = False

    def __call__(self, share: float, size: int, seconds: float) -> None:
        self.say(f"building the table of {human_size(size)}… {share:.0%} ({seconds:.0f} s)")

    def say(self, text: str) -> None:
        if self.out is None:
            return
        self.out.write(f"\rrlm: {text}\x1b[K")
        self.out.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown and self.out is not None:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.shown = False


# --------------------------------------------------------------------------- the text


def render(doc: dict[str, Any]) -> str:
    """The summary as text for a person: every piece of the input's text made visible."""
    out: list[str] = []

    def row(label: str, text: str) -> None:
        out.append(f"{label:<11}{text}")

    row("Input", visible(doc["input"]))
    fmt = doc["format"]
    table = doc["table"]
    if table is not None:
        fmt += f"; table `log`: {table['format']}, {_n(table['rows'], 'row')}"
        if len(table["columns"]) > 2:
            fmt += f", {table['parsed']:,} parsed"
    row("Format", fmt)
    on_disk = f"{human_size(doc['bytes'])} on disk"
    if doc["text_bytes"] != doc["bytes"]:
        on_disk += f", {human_size(doc['text_bytes'])} of text"
    row("Size", f"{_n(doc['lines'], 'line')}, {on_disk}, {doc['encoding']}")
    _parts(doc, row, out)
    time, histogram, errors = doc["time"], doc["histogram"], doc["errors"]
    if time is not None and time["first"] is not None:
        zone = " UTC" if time["utc"] else ""
        row(
            "Time",
            f"{when(time['first'])} → {when(time['last'])}{zone} ({duration(time['span_s'])}; "
            f"column {visible(time['column'])}, {time['read_as']})",
        )
        if time["rows_without_time"]:
            out.append(f"{'':<11}{_n(time['rows_without_time'], 'row')} without a time")
    if histogram is not None:
        counts = histogram["counts"]
        zone = " UTC" if time and time["utc"] else ""
        row(
            "Lines",
            f"per {histogram['bucket']}, {len(counts)} bucket{'s' if len(counts) != 1 else ''} from "
            f"{when(histogram['start'])}{zone}; the tallest {max(counts):,}",
        )
        out.append(f"{'':<11}│{sparkline(counts)}│")
    if errors is not None:
        of = f" of {_n(table['rows'], 'row')}" if table else ""
        found = f"{errors['rows']:,}{of}" if errors["rows"] else f"none{of}"
        row("Errors", f"{visible(errors['rule'])}: {found}")
        if histogram is not None and errors.get("counts") and errors["rows"]:
            peak = max(errors["counts"])
            out.append(f"{'':<11}│{sparkline(errors['counts'])}│ the tallest {peak:,}")
    templates = doc["templates"]
    if templates is not None and templates["top"]:
        row(
            "Templates",
            f"{templates['distinct']:,} distinct, of {visible(templates['of'])}: its first "
            f"{templates['chars']} characters, {' '.join(templates['masks'])} masked",
        )
        total = table["rows"] if table else doc["lines"]
        width = max(5, len(f"{templates['top'][0]['count']:,}"))
        out.append(f"{'':<11}{'count':>{width}}  {'share':>6}  {'line':>8}  template")
        for t in templates["top"]:
            share = f"{100 * t['count'] / total:.1f}%" if total else ""
            out.append(
                f"{'':<11}{t['count']:>{width},}  {share:>6}  {t['first_line']:>8,}  {_cut(visible(t['template']))}"
            )
    for note in doc["notes"]:
        row("Note", visible(note))
    return "\n".join(out) + "\n"


def _parts(doc: dict[str, Any], row: Any, out: list[str]) -> None:
    parts, skipped = doc["parts"], doc["skipped"]
    row("Parts", f"{len(parts):,} file{'s' if len(parts) != 1 else ''}, in reading order")
    lines_w = max(5, *(len(f"{p['lines']:,}") for p in parts))
    fmt_w = max(6, *(len(p["format"] or "?") for p in parts))
    out.append(f"{'':<11}{'lines':>{lines_w}}  {'size':>10}  {'format':<{fmt_w}}  name")
    shown = parts if len(parts) <= 40 else [*parts[:20], None, *parts[-20:]]
    for p in shown:
        if p is None:
            out.append(f"{'':<11}… {len(parts) - 40:,} more (--json lists them all)")
            continue
        packed = f" ({p['compression']})" if p["compression"] else ""
        out.append(
            f"{'':<11}{p['lines']:>{lines_w},}  {human_size(p['size']):>10}  {p['format'] or '?':<{fmt_w}}  "
            f"{visible(p['name'])}{packed}"
        )
    for s in skipped:
        out.append(f"{'':<11}skipped: {visible(s['name'])} ({visible(s['why'])})")


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_TEMPLATE_CHARS else text[: _SHOWN_TEMPLATE_CHARS - 1] + "…"
