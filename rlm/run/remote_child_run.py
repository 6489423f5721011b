"""What a cluster worker runs for a child investigation sent to it (rlm.run.remote_child):
the child's node over its slice, with a sandboxed worker of its own on that machine, under its
share of the run's budget; its outcome and records sent back as plain data.

The run's entry point hands `investigate_child` to the engine (rlm.run.wiring), so the engine
and the children that send a task never import what runs it: this module builds an engine of
its own for the child's run there.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import traceback
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

from rlm.errors import ConfigError, ProviderError, RlmError
from rlm.input.source import Profile
from rlm.model.budget import Budget, BudgetExceeded, Reservation, Usage
from rlm.model.remote_call import client_of
from rlm.run.engine import Engine
from rlm.run.events import ProviderEventsTrace
from rlm.run.node import Node
from rlm.run.remote_child import RECORDS, ChildTask
from rlm.run.scope import NodeResult, NodeScope
from rlm.sandbox.client import WorkerSpec
from rlm.trace.writer import TraceWriter


class _StoppableBudget(Budget):
    """A child's share of the run's budget that also ends when the parent's run is stopped."""

    def __init__(self, stop_event: str, **limits: Any) -> None:
        super().__init__(**limits)
        self._event: Any = None
        try:
            from distributed import Event

            self._event = Event(stop_event)  # type: ignore[no-untyped-call]
        except (ImportError, RuntimeError, ValueError):  # not in a Dask worker: the share's own limits
            self._event = None

    def _stopped_at_home(self) -> None:
        try:
            stopped = self._event is not None and self._event.is_set()
        except (OSError, RuntimeError, ValueError):  # the scheduler gone: the share's limits hold
            stopped = False
        if stopped:
            with self._lock:
                if self.stopped is None:
                    self.stopped = BudgetExceeded("stopped", "the run that sent this child was stopped")
                raise self.stopped

    def admit(self, est_tokens: int, reservation: Reservation | None = None) -> None:
        self._stopped_at_home()
        super().admit(est_tokens, reservation)

    def admit_answer(self, est_tokens: int) -> None:
        self._stopped_at_home()
        super().admit_answer(est_tokens)


def investigate_child(task: ChildTask) -> dict[str, Any]:
    """Run the child `task` describes on this machine; its outcome and records as plain data.
    A provider's or configuration's failure is returned (message and kind), not raised, so
    the parent decides as it would at home."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="rlm-child-")
    engine: Engine | None = None
    try:
        import zstandard

        text_path = os.path.join(tmp, "slice.txt")
        with open(text_path, "wb") as fh:
            fh.write(zstandard.ZstdDecompressor().decompress(task.text, max_output_size=1 << 40))
        table_path = None
        if task.table is not None:
            table_path = os.path.join(tmp, "slice.duckdb")
            with open(table_path, "wb") as fh:
                fh.write(task.table)
        spec = WorkerSpec(
            path=text_path,
            encoding="utf-8",
            memory_bytes=task.settings.memory_headroom_mb * 1024 * 1024,
            table_path=table_path,
            parts=task.parts,
        )
        done: Future[str] = Future()
        done.set_result("")
        profile = Profile(
            path=text_path,
            display_name=task.display_name,
            size=os.path.getsize(text_path),
            lines=task.n_lines,
            encoding="utf-8",
            format=task.format,
            digest=done,
            invalid_lines=0,
            binary=False,
            work_path=text_path,
            table=task.table_info,
            table_path=table_path,
            parts=[{"name": n, "first_line": a, "last_line": b} for n, a, b, *_ in task.parts or []] or None,
        )
        client = client_of(task.model)
        client.role = "sub"
        calls: list[dict[str, Any]] = []
        client.recorder = calls.append
        budget = _StoppableBudget(
            task.stop_event,
            max_calls=task.calls,
            max_tokens=task.tokens,
            max_cost=task.cost,
            max_time=task.seconds,
            synthesis_tokens=min(8000, task.tokens // 4),
        )
        trace = TraceWriter(None)
        engine = Engine(
            task.settings,
            path=text_path,
            profile=profile,
            question=task.question,
            root_model=client,
            sub_model=client,
            trace=trace,
            progress=ProviderEventsTrace(trace, started),
            budget=budget,
        )
        engine.services.number_under(task.node_id)
        engine.cell_seconds = task.cell_seconds
        client.attach(budget, engine.progress, {})
        scope = NodeScope(
            spec=spec,
            profile_block=task.profile_block,
            description=task.description,
            first_line=1,
            n_lines=task.n_lines,
        )
        node = Node(engine, task.node_id, task.depth, task.question, scope)
        try:
            result = node.run()
        except BudgetExceeded as exc:
            result = NodeResult(node.id, None, "budget", engine.steps_total, exc.detail, node.largest_prompt)
        synthesis = engine.node_synthesis.synthesize(node, result)
        doc: Any = trace.doc
        return {
            "ran_on": where,
            "stop": result.stop,
            "detail": result.detail,
            "steps": result.steps,
            "steps_total": engine.steps_total,
            "largest_prompt": engine.largest_prompt,
            "answer": synthesis.answer,
            "established": synthesis.established,
            "answer_source": synthesis.source,
            "synthesis_payload": synthesis.payload,
            "budget_stopped": budget.stopped.detail if budget.stopped is not None else None,
            "usage": {nid: asdict(engine.services.usage_for(nid)) for nid in _node_ids(doc, task.node_id)},
            "total": asdict(budget.usage),
            "findings": [asdict(f) for f in engine.ledger.current],
            "records": {name: list(doc.get(name) or []) for name in RECORDS},
            "warnings": list(doc.get("warnings") or []),
            "cassette": calls,
        }
    except (ProviderError, ConfigError) as exc:
        kind = "config" if isinstance(exc, ConfigError) else "provider"
        return {"ran_on": where, "error": exc.message, "kind": kind, "total": _spent(engine)}
    except RlmError as exc:
        return {"ran_on": where, "error": exc.message, "kind": "child", "total": _spent(engine)}
    except Exception as exc:  # noqa: BLE001 (a bug on the worker: told to the parent, with its traceback)
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return {
            "ran_on": where,
            "error": f"internal error ({what})",
            "kind": "internal",
            "traceback": "".join(traceback.format_exception(exc))[-8000:],
            "total": _spent(engine),
        }
    finally:
        if engine is not None:
            engine.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _node_ids(doc: Any, child_id: str) -> list[str]:
    return [child_id, *(str(n.get("id")) for n in doc.get("nodes") or [])]


def _spent(engine: Any) -> dict[str, Any]:
    return asdict(engine.budget.usage) if engine is not None else asdict(Usage())
