"""The run trace: one versioned JSON document per run, on disk as the run goes.

While the run goes, every event (a step, a node, a sub-call, a finding, a model call, the
end) is appended as one line to the run's event log, `<run_id>.jsonl`
(rlm.trace.eventlog): each costs the size of that event, so writing a trace is linear in
its steps. `close()`, at the run's end (answered, failed, interrupted or crashed), folds
them into the document `<run_id>.json` and removes the log. A kill -9 or a power loss
leaves the log, which every reader folds (status "running", read as "crashed").
Traces hold capped previews only, never the input's content, and are redacted of secrets
line by line, and the document again as a whole.

A trace that cannot be written is never dropped in silence: `on_problem` is
called at the moment it happens (the CLI says it on stderr and in --json).

A trace holds previews of the input and of the model's work: it is its user's alone, 0600
files (rlm.privatefiles) in a folder made 0700 when rlm makes it. The log is created new
(never through a symlink, never over a file at its name), the document written under a
random temporary name and renamed.
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
from rlm.privatefiles import make_private_dirs, write_private
from rlm.trace import eventlog
from rlm.trace.redact import redact_dumps
from rlm.trace.schema import (
    BridgeCallRecord,
    CassetteCallRecord,
    CassetteClientRecord,
    NodeRecord,
    ProviderEventRecord,
    StepRecord,
    SubcallRecord,
    TraceDoc,
    new_trace,
)

PREVIEW_CHARS = 2000
# Fresh names tried when a run id is taken (two runs started in the same second drew the same
# four hex digits, or something was planted at the name).
_NAME_TRIES = 5


def new_run_id() -> str:
    """Sortable by time with `ls`: 2026-11-21T07-40-12-ab12."""
    return time.strftime("%Y-%m-%dT%H-%M-%S") + "-" + secrets.token_hex(2)


def preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    if not text:
        return ""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters]"


def dump_document(doc: Any) -> str:
    """The document as its file holds it: a top-level field a line, and each item of a list
    (a step, a node, a finding) on a line of its own — readable with `less` and `grep`, and
    serialised by the C encoder (an indented dump is done in Python, several times slower)."""
    if not isinstance(doc, dict):
        return json.dumps(doc, ensure_ascii=False)
    fields = []
    for key, value in doc.items():
        name = json.dumps(key, ensure_ascii=False)
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(item, ensure_ascii=False) for item in value)
            fields.append(f"{name}: [\n  {items}\n ]")
        else:
            fields.append(f"{name}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n " + ",\n ".join(fields) + "\n}\n"


class TraceWriter:
    """The trace of one run: the document in memory (`doc`), its events appended to the log.

    `path` is the document's name, `<run_id>.json`, from the start: every reader takes it
    for the run's trace and folds the log while the document is not yet written. None when
    the run keeps no trace (--no-trace, or a trace that could not be written: `warning`).
    """

    def __init__(
        self,
        directory: str | None,
        run_id: str | None = None,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.run_id = run_id or new_run_id()
        self._named = run_id is not None  # a name chosen by the caller is never changed
        self.path: Path | None = None
        self.warning: str | None = None
        self.on_problem = on_problem
        self._lock = threading.Lock()
        self._fd = -1
        self._closed = False
        # What the log holds of each list-valued field `update` was given, so the next update
        # logs only the items that changed (the ledger is given whole at every finding).
        self._logged: dict[str, list[Any]] = {}
        if directory is not None:
            try:
                make_private_dirs(directory)
                self.path = Path(directory) / f"{self.run_id}.json"
            except OSError as exc:
                self._problem(f"cannot create the trace directory {directory} ({exc.strerror or exc})")
        self.doc: TraceDoc = new_trace(
            self.run_id, __version__, time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getpid()
        )

    @property
    def log_path(self) -> Path | None:
        """The live event log while the run goes (None once folded, or without a trace)."""
        if self.path is None or self._closed:
            return None
        return eventlog.log_path(self.path)

    # -- events ------------------------------------------------------------------------
    def update(self, **fields: Any) -> None:
        with self._lock:
            self.doc.update(fields)  # type: ignore[typeddict-item]  # keys checked by the schema tests
            events: list[dict[str, Any]] = []
            plain: dict[str, Any] = {}
            for name, value in fields.items():
                if isinstance(value, list) and name in self._logged:
                    keep = eventlog.common_prefix(self._logged[name], value)
                    events.append({"e": "extend", "field": name, "keep": keep, "items": value[keep:]})
                else:
                    plain[name] = value
                if isinstance(value, list):
                    # Items copied one level down: a record changed in place later is still
                    # seen as changed (findings are flat records).
                    self._logged[name] = [dict(v) if isinstance(v, dict) else v for v in value]
            if plain:
                events.insert(0, {"e": "set", "fields": plain})
            problem = self._emit(events)
        self._say(problem)

    def warn(self, message: str) -> None:
        with self._lock:
            if message in self.doc["warnings"]:
                return
            self.doc["warnings"].append(message)
            problem = self._emit([{"e": "append", "to": "warnings", "item": message}])
        self._say(problem)

    def add_node(self, node: NodeRecord) -> None:
        self._append("nodes", node)

    def update_node(self, node_id: str, **fields: Any) -> None:
        with self._lock:
            for node in self.doc["nodes"]:
                if node["id"] == node_id:
                    node.update(fields)  # type: ignore[typeddict-item]
            problem = self._emit([{"e": "node", "id": node_id, "fields": fields}])
        self._say(problem)

    def add_step(self, step: StepRecord) -> None:
        self._append("steps", step)

    def add_subcall(self, call: SubcallRecord) -> None:
        self._append("subcalls", call)

    def add_bridge_call(self, call: BridgeCallRecord) -> None:
        """What an llm_query/partition_map called from model code returned, so --verify can serve it."""
        self._append("bridge_calls", call)

    def add_provider_event(self, event: ProviderEventRecord) -> None:
        """A retry, a long wait or a give-up on the model provider."""
        self._append("provider_events", event)

    def add_model_client(self, role: str, client: CassetteClientRecord) -> None:
        """What `rlm replay --rerun` needs to know of one model client of the run (its role)."""
        with self._lock:
            cassette = self.doc.setdefault("cassette", {"clients": {}, "calls": []})
            cassette.setdefault("clients", {})[role] = client
            problem = self._emit([{"e": "client", "role": role, "client": client}])
        self._say(problem)

    def add_model_call(self, call: CassetteCallRecord) -> None:
        """One model call of the run, keyed by its request, as the client returned it."""
        with self._lock:
            cassette = self.doc.setdefault("cassette", {"clients": {}, "calls": []})
            cassette.setdefault("calls", []).append(call)
            problem = self._emit([{"e": "call", "call": call}])
        self._say(problem)

    def _append(self, to: str, item: Any) -> None:
        with self._lock:
            self.doc[to].append(item)  # type: ignore[literal-required]  # one of eventlog.LISTS
            problem = self._emit([{"e": "append", "to": to, "item": item}])
        self._say(problem)

    # -- the files -----------------------------------------------------------------------
    def flush(self) -> None:
        """Make sure what is recorded is on disk: the log is started (a folder that cannot
        take the trace is said at once); after `close`, the document is written again."""
        with self._lock:
            problem = self._emit([])
        self._say(problem)

    def close(self) -> None:
        """The run's end: fold the events into the document `<run_id>.json`, then remove the
        log. Events after it (none are expected) rewrite the document whole."""
        with self._lock:
            if self._closed:
                return
            problem = self._open() if self.path is not None else None
            if problem is None and self.path is not None:
                problem = self._write_document()
                if problem is None:
                    self._remove_log()
            self._closed = True
            self._close_fd()
        self._say(problem)

    def _emit(self, events: list[dict[str, Any]]) -> str | None:
        """Append the events (redacted) to the log; after `close`, rewrite the document.
        Called with the lock held, after `doc` took the events in; returns a problem."""
        if self.path is None:
            return None
        if self._closed:
            return self._write_document()
        if self._fd < 0:
            return self._open()  # its first line is `doc` as it is now: these events included
        if not events:
            return None
        try:
            eventlog.append(self._fd, self._lines(events))
        except OSError as exc:
            return self._lost(f"cannot write the trace {self.path} ({exc.strerror or exc})")
        return None

    def _open(self) -> str | None:
        """Create the log, its first line the document as it is now; a name already taken is
        replaced by a fresh run id (unless the caller chose it)."""
        if self._fd >= 0 or self.path is None:
            return None
        # Messages name the trace as the user knows it: the document, `<run_id>.json`.
        for _ in range(_NAME_TRIES):
            try:
                if self.path.exists():  # a finished trace of that name: never written over
                    raise FileExistsError(str(self.path))
                first = self._lines([{"e": "start", "doc": self.doc}])
                self._fd = eventlog.create_log(eventlog.log_path(self.path), first)
                break
            except FileExistsError:
                if self._named:
                    return self._lost(f"cannot write the trace {self.path} (a file of that name exists)")
                self.run_id = new_run_id()
                self.doc["run_id"] = self.run_id
                self.path = self.path.with_name(f"{self.run_id}.json")
            except OSError as exc:
                return self._lost(f"cannot write the trace {self.path} ({exc.strerror or exc})")
        else:
            return self._lost(f"cannot write a trace in {self.path.parent} (every name tried exists)")
        return None

    def _write_document(self) -> str | None:
        assert self.path is not None
        text = redact_dumps(self.doc, dump_document)
        try:
            write_private(str(self.path), text)
        except OSError as exc:
            why = f"cannot write the trace {self.path} ({exc.strerror or exc})"
            if self._fd >= 0:
                # The log holds every event: it stays, and readers fold it.
                self.warning = f"{why}: its events stay in {eventlog.log_path(self.path)}"
                return self.warning
            return self._lost(why)
        return None

    @staticmethod
    def _lines(events: list[dict[str, Any]]) -> bytes:
        return "".join(redact_dumps(e, eventlog.dump_line) + "\n" for e in events).encode("utf-8")

    def _remove_log(self) -> None:
        """Remove the log, and only the file this writer created (the same inode it holds open)."""
        if self._fd < 0 or self.path is None:
            return
        log = eventlog.log_path(self.path)
        with contextlib.suppress(OSError):
            mine, there = os.fstat(self._fd), os.lstat(log)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                os.unlink(log)

    def _close_fd(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def _lost(self, why: str) -> str:
        """The trace cannot be kept: from here on nothing is written."""
        self.warning = f"{why}: this run leaves no trace"
        self.path = None
        self._close_fd()
        return self.warning

    def _problem(self, why: str) -> None:
        self._say(self._lost(why))

    def _say(self, problem: str | None) -> None:
        if problem is not None and self.on_problem is not None:
            self.on_problem(problem)
