"""`rlm ask --jsonl`: the run as a stream of JSON events on stdout, one per line.

For scripts that want to follow a run as it goes. Every event has `schema`
(`rlm-events/1`), `event` and `t` (seconds since the run started); the last two
are always `answer` and `summary`. Events and their fields:

    start     question, file
    node      node, parent, depth, question
    step      node, depth, step, action, args, ok, shown (the observation's first line)
    finding   id, kind, text, evidence, node
    fanout    node, chunks
    warning   message          retry / waiting / restart: as on stderr
    answer    answer, explanation, citations, status, exit_code
    summary   steps, usage, elapsed_s, trace, message
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, TextIO

from rlm.run.actions import Action, ParseError
from rlm.trace.redact import redact

SCHEMA = "rlm-events/1"


class JsonlEvents:
    """A progress callback that writes each engine event as one JSON line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self._lock = threading.Lock()
        # JSON escapes C0 controls but not C1 (`\x9b` is a CSI) nor bidi overrides: on a
        # terminal every non-ASCII character is escaped the JSON way (\u009b for U+009B, the same value);
        # into a pipe the text stays as it is.
        self._ascii = hasattr(stream, "isatty") and stream.isatty()

    def emit(self, event: str, **fields: Any) -> None:
        doc = {"schema": SCHEMA, "event": event, "t": round(time.monotonic() - self.started, 3), **fields}
        line = json.dumps(redact(doc), ensure_ascii=self._ascii, default=str)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "step":
            action, outcome = data["action"], data["outcome"]
            shown = next((ln for ln in outcome.observation.splitlines() if ln.strip()), "")
            self.emit(
                "step",
                node=data["node"],
                depth=data["depth"],
                step=data["step"],
                action=action.name if isinstance(action, Action) else None,
                args=action.args if isinstance(action, Action) else None,
                parse_error=action.message if isinstance(action, ParseError) else None,
                ok=outcome.ok,
                shown=shown[:300],
            )
        elif kind in ("node", "finding", "fanout", "warning", "retry", "waiting", "restart", "start"):
            self.emit(kind, **data)

    def finish(self, result: Any, question: str, cited: list[dict[str, str]]) -> None:
        self.emit(
            "answer",
            answer=result.answer,
            explanation=result.explanation,
            citations=cited,
            status=result.status,
            exit_code=result.exit_code,
        )
        self.emit(
            "summary",
            question=question,
            steps=result.steps,
            usage=result.usage,
            elapsed_s=round(result.elapsed_s, 3),
            trace=result.trace_path,
            message=result.message,
        )
