"""Loading a trace for any reader: one place that reads, checks the schema and says what is wrong.

A trace left `running` is read as `crashed` (its process died). A document
that is not an rlm trace, or whose fields do not have the shape of
`rlm.trace.schema`, is an InputError (exit 3) naming the first problem.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import cast

from rlm.errors import InputError
from rlm.trace.schema import TraceDoc, problems


def read_trace(path: str | os.PathLike[str], *, check: bool = True) -> TraceDoc:
    """Load a trace; with `check`, reject one whose fields do not match the schema."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"trace not found: {p}")
    if p.is_dir():
        raise InputError(f"{p} is a directory, not a trace file")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read trace {p}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{p} is not a valid trace (JSON error at line {exc.lineno})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("rlm-trace/"):
        raise InputError(f"{p} is not an rlm trace (no 'schema' field)")
    if check:
        found = problems(doc)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise InputError(f"{p} is not a valid trace: {found[0]}{more}")
    if doc.get("status") == "running":
        doc["status"] = "crashed"
    return cast(TraceDoc, doc)
