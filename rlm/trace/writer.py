"""The run trace: one versioned JSON document per run, on disk as the run goes.

The document is rewritten atomically (temp file + rename) after every event,
so a crash, a kill -9 or Ctrl-C leaves the last complete version behind,
with status "running" that the reader reports as "crashed". Traces hold
capped previews only, never the input's content, and are redacted of secrets.
Its size grows linearly with the number of steps.

A trace that cannot be written is never dropped in silence: `on_problem` is
called at the moment it happens (the CLI says it on stderr and in --json).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm import __version__
from rlm.errors import InputError
from rlm.trace.redact import redact

SCHEMA = "rlm-trace/1"
PREVIEW_CHARS = 2000


def new_run_id() -> str:
    """Sortable by time with `ls`: 2026-11-21T07-40-12-ab12."""
    return time.strftime("%Y-%m-%dT%H-%M-%S") + "-" + secrets.token_hex(2)


def preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    if not text:
        return ""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters]"


class TraceWriter:
    def __init__(
        self,
        directory: str | None,
        run_id: str | None = None,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.run_id = run_id or new_run_id()
        self.path: Path | None = None
        self.warning: str | None = None
        self.on_problem = on_problem
        self._lock = threading.Lock()
        if directory is not None:
            try:
                Path(directory).mkdir(parents=True, exist_ok=True)
                self.path = Path(directory) / f"{self.run_id}.json"
            except OSError as exc:
                self._problem(f"cannot create the trace directory {directory} ({exc.strerror or exc})")
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "tool_version": __version__,
            "run_id": self.run_id,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "finished_at": None,
            "status": "running",
            "exit_code": None,
            "pid": os.getpid(),
            "settings": {},
            "input": {},
            "question": None,
            "sandbox": {},
            "warnings": [],
            "nodes": [],
            "steps": [],
            "subcalls": [],
            "bridge_calls": [],
            "provider_events": [],
            "ledger": [],
            "synthesis": None,
            "answer": None,
            "totals": {},
        }

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.doc.update(fields)
        self.flush()

    def warn(self, message: str) -> None:
        with self._lock:
            if message not in self.doc["warnings"]:
                self.doc["warnings"].append(message)
        self.flush()

    def add_node(self, node: dict[str, Any]) -> None:
        with self._lock:
            self.doc["nodes"].append(node)
        self.flush()

    def update_node(self, node_id: str, **fields: Any) -> None:
        with self._lock:
            for node in self.doc["nodes"]:
                if node["id"] == node_id:
                    node.update(fields)
        self.flush()

    def add_step(self, step: dict[str, Any]) -> None:
        with self._lock:
            self.doc["steps"].append(step)
        self.flush()

    def add_subcall(self, call: dict[str, Any]) -> None:
        # Not flushed on its own: a fan-out makes many at once, and the step that
        # made them flushes them (a crash loses at most the calls of one step).
        with self._lock:
            self.doc["subcalls"].append(call)

    def add_bridge_call(self, call: dict[str, Any]) -> None:
        """What an llm_query/partition_map called from model code returned, so --verify can serve it."""
        with self._lock:
            self.doc["bridge_calls"].append(call)
        self.flush()

    def add_provider_event(self, event: dict[str, Any]) -> None:
        """A retry, a long wait or a give-up on the model provider."""
        with self._lock:
            self.doc["provider_events"].append(event)
        self.flush()

    def _problem(self, why: str) -> None:
        self.warning = f"{why}: this run leaves no trace"
        self.path = None
        if self.on_problem is not None:
            self.on_problem(self.warning)

    def flush(self) -> None:
        if self.path is None:
            return
        problem = None
        with self._lock:
            if self.path is None:
                return
            text = json.dumps(redact(self.doc), ensure_ascii=False, indent=1)
            tmp = self.path.with_suffix(".json.tmp")
            try:
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, self.path)
            except OSError as exc:
                problem = f"cannot write the trace {self.path} ({exc.strerror or exc})"
                with contextlib.suppress(OSError):
                    tmp.unlink()
        if problem:
            self._problem(problem)


def read_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a trace; a run that never finished is reported as crashed."""
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
    if doc.get("status") == "running":
        doc["status"] = "crashed"
    return doc
