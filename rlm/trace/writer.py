"""The run trace: one versioned JSON document per run, on disk as the run goes.

The document is rewritten atomically (temp file + rename) after every event,
so a crash, a kill -9 or Ctrl-C leaves the last complete version behind,
with status "running" that the reader reports as "crashed". Traces hold
capped previews only, never the input's content, and are redacted of secrets.
Its size grows linearly with the number of steps.

A trace that cannot be written is never dropped in silence: `on_problem` is
called at the moment it happens (the CLI says it on stderr and in --json).

A trace holds previews of the input and of the model's work: it is its user's alone, a
0600 file (rlm.privatefiles) in a folder made 0700 when rlm makes it, written under a
random temporary name and renamed, never through a symlink planted at its name.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm import __version__
from rlm.privatefiles import make_private_dirs, write_private
from rlm.trace.redact import redact
from rlm.trace.schema import (
    BridgeCallRecord,
    NodeRecord,
    ProviderEventRecord,
    StepRecord,
    SubcallRecord,
    TraceDoc,
    new_trace,
)

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
                make_private_dirs(directory)
                self.path = Path(directory) / f"{self.run_id}.json"
            except OSError as exc:
                self._problem(f"cannot create the trace directory {directory} ({exc.strerror or exc})")
        self.doc: TraceDoc = new_trace(
            self.run_id, __version__, time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getpid()
        )

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.doc.update(fields)  # type: ignore[typeddict-item]  # keys checked by the schema tests
        self.flush()

    def warn(self, message: str) -> None:
        with self._lock:
            if message not in self.doc["warnings"]:
                self.doc["warnings"].append(message)
        self.flush()

    def add_node(self, node: NodeRecord) -> None:
        with self._lock:
            self.doc["nodes"].append(node)
        self.flush()

    def update_node(self, node_id: str, **fields: Any) -> None:
        with self._lock:
            for node in self.doc["nodes"]:
                if node["id"] == node_id:
                    node.update(fields)  # type: ignore[typeddict-item]
        self.flush()

    def add_step(self, step: StepRecord) -> None:
        with self._lock:
            self.doc["steps"].append(step)
        self.flush()

    def add_subcall(self, call: SubcallRecord) -> None:
        # Not flushed on its own: a fan-out makes many at once, and the step that
        # made them flushes them (a crash loses at most the calls of one step).
        with self._lock:
            self.doc["subcalls"].append(call)

    def add_bridge_call(self, call: BridgeCallRecord) -> None:
        """What an llm_query/partition_map called from model code returned, so --verify can serve it."""
        with self._lock:
            self.doc["bridge_calls"].append(call)
        self.flush()

    def add_provider_event(self, event: ProviderEventRecord) -> None:
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
            try:
                write_private(str(self.path), text)
            except OSError as exc:
                problem = f"cannot write the trace {self.path} ({exc.strerror or exc})"
        if problem:
            self._problem(problem)
