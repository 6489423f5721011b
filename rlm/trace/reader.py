"""Loading a trace for any reader: one place that reads, checks the schema and says what is wrong.

A trace is the document `<run_id>.json`, or, for a run still going or one that died before
its end (kill -9, power loss), its event log `<run_id>.jsonl` (rlm.trace.eventlog), folded
here into the same document. Either name may be given: `<run_id>.json` is read from its
log while the document does not exist, and a finished document wins over a log left
beside it. A trace left `running` is read as `crashed` (its process died). A document
that is not an rlm trace, or whose fields do not have the shape of `rlm.trace.schema`, is
an InputError (exit 3) naming the first problem. Traces written before the event log (one
JSON document, rewritten as the run went) read as they always did.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

from rlm.errors import InputError
from rlm.trace import eventlog
from rlm.trace.schema import TraceDoc, problems


def trace_file(path: str | os.PathLike[str]) -> Path:
    """The file that holds the trace named `path`: the document, else its live log."""
    p = Path(path)
    if p.suffix == ".json" and not p.exists():
        log = eventlog.log_path(p)
        if log.is_file():
            return log
    if p.suffix == eventlog.LOG_SUFFIX:
        document = eventlog.document_path(p)
        if document.is_file():
            return document  # the run ended: its folded document is the trace
    return p


def read_raw(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The trace as written (a log folded; status as recorded), unchecked. InputError when
    there is none, or it is not an rlm trace."""
    p = trace_file(path)
    if not p.exists():
        raise InputError(f"trace not found: {Path(path)}")
    if p.is_dir():
        raise InputError(f"{p} is a directory, not a trace file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read trace {p}: {exc}") from None
    doc: Any
    if p.suffix == eventlog.LOG_SUFFIX:
        doc, _ = eventlog.fold(text)
        if doc is None:
            raise InputError(f"{p} is not a valid trace (its first line is not the start of a run)")
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p} is not a valid trace (JSON error at line {exc.lineno})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("rlm-trace/"):
        raise InputError(f"{p} is not an rlm trace (no 'schema' field)")
    return doc


def read_trace(path: str | os.PathLike[str], *, check: bool = True) -> TraceDoc:
    """Load a trace; with `check`, reject one whose fields do not match the schema."""
    doc = read_raw(path)
    if check:
        found = problems(doc)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise InputError(f"{trace_file(path)} is not a valid trace: {found[0]}{more}")
    if doc.get("status") == "running":
        doc["status"] = "crashed"
    return cast(TraceDoc, doc)
