"""Writing a trace: how long TraceWriter takes for a run of N steps, in all and per event.

    .venv/bin/python bench/trace_bench.py [--steps 500] [--repeat 3] [--keep DIR]

Feeds one TraceWriter, in a fresh folder, what a run of N steps gives it, in the order a
run does: the start (question, settings, input, models), the root node, then per step the
step record as the engine writes it (the messages summarised, the routed context, the whole
reply, the action, a 2,000-character observation preview taken from fixtures/access.log),
a finding every other step (the ledger given whole, as the engine gives it), a sub-call
every fifth step, a child node with steps of its own every fiftieth, a provider retry now
and then, and at the end the synthesis, the totals and the close. Prints, per repeat, the
seconds spent in the writer, the events, the microseconds per event and the trace's size.
Only the writer's public methods are used, so the same script measures any version of it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlm.trace.writer import TraceWriter, preview  # noqa: E402

FIXTURE = ROOT / "fixtures" / "access.log"
LINES = FIXTURE.read_text(encoding="utf-8").splitlines()


def _observation(step: int) -> str:
    start = (step * 13) % max(1, len(LINES) - 40)
    return "\n".join(LINES[start : start + 40])


def _code(step: int) -> str:
    return (
        "from collections import Counter\n"
        f"rows = [l for l in context_lines[{step * 10}:{step * 10 + 500}] if '\" 404 ' in l]\n"
        "c = Counter(r.split()[0] for r in rows)\n"
        "print(len(rows), c.most_common(5))"
    )


def _step(node: str, index: int, turns: int) -> dict[str, Any]:
    """A step record shaped as rlm.run.engine.record_step writes it."""
    code = _code(index)
    observation = _observation(index)
    messages = [{"role": "system", "tokens": 1180}, {"role": "user", "tokens": 240}]
    for t in range(min(turns, 12)):  # the history window keeps the last turns
        messages += [{"role": "assistant", "tokens": 90 + t}, {"role": "tool", "tokens": 600 + t}]
    return {
        "node": node,
        "index": index,
        "model_call": {
            "messages": messages,
            "dropped_turns": max(0, turns - 12),
            "context": {
                "kind": "root_turn" if node == "n0" else "child_turn",
                "budget": 12000,
                "focus": {"time": False, "entities": ["404"]},
                "whole": {"system": 1180, "question": 24, "profile": 216},
                "included": [f"T{t}" for t in range(max(1, turns - 12), turns + 1)],
                "excluded": [{"id": f"T{t}", "why": "older turn"} for t in range(1, max(1, turns - 12))][
                    -20:
                ],
                "tokens": {"memories": 0, "findings": 420, "turns": 7800},
                "allotted": {"memories": 1800, "findings": 3000, "turns": 7200},
                "top": f"F{max(1, index // 2)}",
            },
            "prompt_tokens": 2400 + 90 * min(turns, 12),
            "prompt_tokens_est": 2380 + 90 * min(turns, 12),
            "completion_tokens": 96,
            "cost": 0.00041,
            "latency_s": 1.734,
            "reply": {
                "content": "Counting the 404 responses per client in the next window of lines.",
                "tool_calls": [
                    {
                        "id": f"call_{index:012x}",
                        "name": "execute",
                        "arguments": json.dumps({"code": code}),
                    }
                ],
                "finish_reason": "tool_calls",
            },
        },
        "action": {"name": "execute", "args": {"code": code}},
        "parse_error": None,
        "observation": {"preview": preview(observation), "chars": len(observation), "ok": True},
        "duration_s": 1.912,
    }


def _finding(n: int, node: str, step: int) -> dict[str, Any]:
    return {
        "id": f"F{n}",
        "kind": "result",
        "text": f"{n * 7} requests returned 404 in lines {step * 10}-{step * 10 + 500}: "
        + LINES[n % len(LINES)][:300],
        "full": None,
        "evidence": f"{node}.s{step}",
        "node": node,
        "topic": f"count 404 window {n % 9}",
        "superseded_by": None,
    }


def write_run(directory: str, steps: int) -> tuple[float, int, int]:
    """(seconds spent in the writer, events given to it, bytes of the finished trace)."""
    events = 0
    spent = 0.0

    def call(method: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal events, spent
        started = time.perf_counter()
        method(*args, **kwargs)
        spent += time.perf_counter() - started
        events += 1

    trace = TraceWriter(directory)
    call(trace.flush)
    call(
        trace.update,
        question="How many requests returned status 404, and from which clients?",
        settings={"max_steps": steps + 10, "max_depth": 3, "protocol": "tools", "model": "gpt-4o-mini"},
        input={"path": str(FIXTURE), "display_name": "fixtures/access.log", "size": FIXTURE.stat().st_size},
    )
    call(trace.update, models={"root": "gpt-4o-mini", "sub": "gpt-4o-mini"})
    call(trace.add_node, {"id": "n0", "parent": None, "depth": 0, "question": "404s?", "status": "running"})
    ledger: list[dict[str, Any]] = []
    root_step = 0
    child = 0
    for i in range(1, steps + 1):
        if i % 50 == 0:  # a child investigation of four steps
            child += 1
            node = f"n{child}"
            call(trace.add_node, {"id": node, "parent": "n0", "parent_step": root_step + 1, "depth": 1})
            for j in range(1, 5):
                call(trace.add_step, _step(node, j, j))
            call(
                trace.update_node,
                node,
                status="final",
                steps=4,
                answer="12 of them",
                answer_source="synthesis",
            )
            continue
        root_step += 1
        if i % 2 == 0:
            if ledger and i % 10 == 0:
                ledger[-3]["superseded_by"] = f"F{len(ledger) + 1}"
            ledger.append(_finding(len(ledger) + 1, "n0", root_step))
            call(trace.update, ledger=[dict(f) for f in ledger])
        if i % 5 == 0:
            call(
                trace.add_subcall,
                {
                    "node": "n0",
                    "step": root_step,
                    "question": "Which clients appear here?",
                    "slice": f"lines {i * 10}-{i * 10 + 80}",
                    "prompt_tokens": 1900,
                    "completion_tokens": 40,
                    "cost": 0.0003,
                    "latency_s": 0.9,
                    "answer": "Mostly 83.149.9.216 and 24.236.252.67.",
                },
            )
        if i % 97 == 0:
            call(
                trace.add_provider_event,
                {"kind": "retry", "at_s": i * 2.0, "model": "gpt-4o-mini", "attempt": 2, "wait_s": 1.0},
            )
        call(trace.add_step, _step("n0", root_step, root_step))
    call(trace.update_node, "n0", status="final", steps=root_step)
    call(
        trace.update,
        synthesis={"source": "synthesis", "answer": "35", "citations": ["F1", "F2"], "confidence": "high"},
    )
    call(
        trace.update,
        status="final",
        exit_code=0,
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        ledger=[dict(f) for f in ledger],
        totals={"calls": steps + 20, "steps": steps},
        answer="35",
    )
    close = getattr(trace, "close", None)  # a writer that folds a log at the end
    if close is not None:
        call(close)
    assert trace.path is not None, trace.warning
    return spent, events, trace.path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", help="copy the last trace here")
    args = parser.parse_args()
    per_event: list[float] = []
    for _ in range(args.repeat):
        folder = tempfile.mkdtemp(prefix="rlm-trace-bench-")
        try:
            spent, events, size = write_run(folder, args.steps)
            per_event.append(spent / events * 1e6)
            print(
                f"{args.steps} steps: {spent:.3f} s in the writer, {events} events, "
                f"{spent / events * 1e6:,.0f} us per event, trace {size:,} bytes"
            )
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                for name in os.listdir(folder):
                    shutil.copy(os.path.join(folder, name), args.keep)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if args.repeat > 1:
        print(f"median {statistics.median(per_event):,.0f} us per event over {args.repeat} repeats")


if __name__ == "__main__":
    main()
