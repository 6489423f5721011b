"""`rlm ask --jsonl`: the run as a stream of JSON events on stdout, one per line.

For scripts that want to follow a run as it goes. Every event has `schema`
(`rlm-events/1`), `event` and `t` (seconds since the run started); the last two
are always `answer` and `summary`, or the last is `error`. Events and their fields,
in the order written (those of the run are declared in rlm.run.events; this
writer is one sink of that stream):

    start     question, file
    node      node, parent, depth, question
    step      node, depth, step, action, args, parse_error, ok, shown (the observation's first line)
    finding   id, kind, text, evidence, node
    fanout    node, chunks, and children: true when each chunk is a child investigation
    batch     node, batch, status, completed, failed, total, waited_s (--batch: the provider's job, at each look)
    warning   message
    restart   node, why
    retry     model, where, attempt, attempts, error, wait_s, retry_after
    waiting   model, where, waited_s, limit_s
    answer    answer, explanation, citations, status, exit_code, confidence, grounded, supporting, doubts
    summary   question, steps, usage, elapsed_s, trace, message
    error     message, exit_code, trace

A reader ignores an event or a field it does not know: later versions of
rlm-events/1 may add some, never change or remove one.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, TextIO

from rlm.run.actions import Action, ParseError
from rlm.run.events import (
    BatchProgress,
    Event,
    Fanout,
    FindingAdded,
    NodeStarted,
    Restart,
    Retry,
    RunWarning,
    Step,
    TableBuild,
    Waiting,
    fields_of,
)
from rlm.trace.redact import redact

SCHEMA = "rlm-events/1"


class JsonlEvents:
    """A sink of the run's events (rlm.run.events) that writes each as one JSON line, and the
    lines of the command's own (start, answer, summary, error) through `emit`."""

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

    def __call__(self, event: Event, /) -> None:
        if isinstance(event, Step):
            action, outcome = event.action, event.outcome
            shown = next((ln for ln in outcome.observation.splitlines() if ln.strip()), "")
            self.emit(
                "step",
                node=event.node,
                depth=event.depth,
                step=event.step,
                action=action.name if isinstance(action, Action) else None,
                args=action.args if isinstance(action, Action) else None,
                parse_error=action.message if isinstance(action, ParseError) else None,
                ok=outcome.ok,
                shown=shown[:300],
            )
        elif isinstance(event, Fanout):
            # `children` is written only when true, as rlm-events/1 has always had it.
            extra = {"children": True} if event.children else {}
            self.emit(event.event, node=event.node, chunks=event.chunks, **extra)
        elif isinstance(
            event,
            NodeStarted | FindingAdded | RunWarning | Retry | Waiting | Restart | TableBuild | BatchProgress,
        ):
            self.emit(event.event, **fields_of(event))
        # A phase is the live status line's; a give-up on a provider arrives as the error or
        # the summary's message.

    def finish(self, result: Any, question: str, cited: list[dict[str, str]]) -> None:
        self.emit(
            "answer",
            answer=result.answer,
            explanation=result.explanation,
            citations=cited,
            status=result.status,
            exit_code=result.exit_code,
            confidence=result.confidence,
            grounded=result.grounded,
            supporting=result.supporting,
            doubts=list(getattr(result, "doubts", None) or []),
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
