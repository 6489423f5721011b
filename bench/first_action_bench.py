"""How often the offline model's first typed action finds the answer.

The first action decides most small-model runs: a query that finds the answer is usually
followed by `final` with it; one that does not is rarely repaired. This measures that step
alone, quickly (one greedy reply a question, no loop, no synthesis), so that a change to the
typed protocol's prompt or schema can be compared on many questions in minutes:

1. `rlm ask FILE QUESTION --protocol typed` runs in this process up to its first model call,
   and the request rlm would send (messages and the table's action schema) is kept;
2. the request goes to the local model's server (llama.cpp, greedy, the schema as its
   grammar), as rlm's own client would send it;
3. the action is compiled to SQL (rlm.run.typed.compile_sql) and run on the input's table,
   with the conditions rlm adds before it runs (rlm.run.typed.with_question_conditions: values a
   column lists, the line the question quotes), and the measure the question's words ask for
   (rlm.run.typed.measure: an average where a sum was sent), as a run does; what the first
   action would have held without that measure is counted beside it;
   it *holds the answer* when a cell of its result is the task's answer (every item of a set),
   scored as `rlm eval` normalises answers.

    python bench/first_action_bench.py fixtures/eval/tasks.jsonl [--limit N] [--json]

The probabilities printed are those the server gave the reply's first choice (the token after
`{"asks": "` with the typed schema): how sure the model was of what the question asks.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RLM_NO_MEMORY", "1")
os.environ["RLM_NO_WARM"] = "1"

import duckdb  # noqa: E402

from rlm.cli import app  # noqa: E402
from rlm.cli.evaluate import Task, load_tasks, normalize  # noqa: E402
from rlm.input.source import open_source  # noqa: E402
from rlm.local import installed_gguf  # noqa: E402
from rlm.local.server import local_server  # noqa: E402
from rlm.model import client as model_client  # noqa: E402
from rlm.run.runner import text_pattern  # noqa: E402
from rlm.run.typed import compile_sql, with_question_conditions  # noqa: E402
from rlm.run.typed.fields import sample_lines, with_quoted_fields  # noqa: E402
from rlm.run.typed.measure import with_asked_measure  # noqa: E402


class _Captured(Exception):
    """Raised from the model call once its request is kept: the run goes no further."""


def first_request(task: Task, work: Path) -> dict[str, Any] | None:
    """The first model request `rlm ask` makes for the task with the typed protocol."""
    kept: dict[str, Any] = {}

    def keep(self: Any, messages: list[dict[str, Any]], *args: Any, schema: Any = None, **kw: Any) -> Any:
        kept.update(messages=messages, schema=schema)
        raise _Captured

    script = work / "script.json"
    script.write_text(json.dumps({"default": "{}"}))
    original = model_client.ModelClient.complete
    model_client.ModelClient.complete = keep  # type: ignore[method-assign]
    try:
        argv = ["ask", str(task.file), task.question, "-m", f"scripted/{script}", "--protocol", "typed"]
        # The run ends at the kept request, which it reports as an internal error: not shown.
        with contextlib.redirect_stderr(io.StringIO()):
            app.app([*argv, "-q", "--trace-dir", str(work / "traces")], standalone_mode=False)
    except BaseException:
        pass
    finally:
        model_client.ModelClient.complete = original  # type: ignore[method-assign]
    return kept or None


def ask_server(api_base: str, request: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    """The server's greedy reply held to the schema, parsed, and the first choice's probability."""
    body = {
        "model": "local",
        "messages": request["messages"],
        "temperature": 0,
        "max_tokens": 300,
        "logprobs": True,
        "top_logprobs": 1,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "action", "schema": request["schema"], "strict": True},
        },
    }
    req = urllib.request.Request(
        f"{api_base}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=900) as resp:
        out = json.load(resp)
    choice = out["choices"][0]
    try:
        action = json.loads(choice["message"]["content"])
    except json.JSONDecodeError:
        action = {}
    return action, _first_choice_probability(choice)


def _first_choice_probability(choice: dict[str, Any]) -> float | None:
    """The probability of the first token after the reply's first `": "` (its first value)."""
    text = ""
    for token in (choice.get("logprobs") or {}).get("content") or []:
        if text.rstrip().endswith('"') and '": "' in text:
            return round(math.exp(token["logprob"]), 3)
        text += token["token"]
    return None


def holds_answer(task: Task, rows: list[tuple[Any, ...]]) -> bool:
    """Whether a cell of the rows is the task's answer (each item of a set), as `rlm eval`
    normalises: numbers by value, within the task's tolerance."""
    cells = [c for row in rows for c in row if c is not None]
    texts = {normalize(str(c)) for c in cells}
    numbers = [float(c) for c in cells if isinstance(c, int | float)]

    def found(value: Any) -> bool:
        if task.check == "number" or isinstance(value, int | float):
            try:
                wanted = float(str(value).replace(",", ""))
            except ValueError:
                return normalize(str(value)) in texts
            return any(math.isclose(n, wanted, abs_tol=max(task.tolerance, 1e-9)) for n in numbers)
        return normalize(str(value)) in texts

    items = task.answer if isinstance(task.answer, list) else [task.answer]
    return all(found(v) for v in items)


def _holds(path: Path) -> Callable[[str, bool], bool]:
    """Whether a line of the file holds a text, in any case: what the run asks its worker's grep."""

    def holds(text: str, whole: bool = False) -> bool:
        wanted = re.compile(text_pattern(text, whole), re.IGNORECASE)
        with open(path, encoding="utf-8", errors="replace") as fh:
            return any(wanted.search(line) for line in fh)

    return holds


def run_action(action: dict[str, Any], table: dict[str, Any]) -> list[tuple[Any, ...]] | str:
    """The action's rows on the table, or what kind of action it was when it is not a query."""
    try:
        query = compile_sql(action, table)
    except ValueError as exc:
        return f"not a query: {str(exc)[:80]}"
    with duckdb.connect(table["path"], read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")  # as the worker's sql() connection has it
        return con.execute(query).fetchall()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="the first N tasks only")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    gguf = installed_gguf()
    if gguf is None:
        print("no local model installed: run `rlm local setup`", file=sys.stderr)
        return 4
    tasks = load_tasks(args.tasks)[: args.limit or None]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlm-first-action-") as tmp, local_server(gguf) as server:
        for task in tasks:
            request = first_request(task, Path(tmp))
            table = open_source(str(task.file)).profile.table
            if request is None or request.get("schema") is None or table is None:
                results.append({"id": task.id, "error": "no typed request (no table?)"})
                continue
            sample = functools.partial(sample_lines, str(task.file))
            table = with_quoted_fields(table, task.question, sample)  # as a run's node has it
            started = time.monotonic()
            action, probability = ask_server(server.api_base, request)
            seconds = round(time.monotonic() - started, 1)
            added = with_question_conditions(task.question, json.dumps(action), table, _holds(task.file))
            conditioned = added[0] if added else action
            measured = with_asked_measure(task.question, json.dumps(conditioned), table)
            rows = run_action(measured[0] if measured else conditioned, table)
            held = not isinstance(rows, str) and holds_answer(task, rows)
            unmeasured = run_action(conditioned, table) if measured else rows
            held_unmeasured = not isinstance(unmeasured, str) and holds_answer(task, unmeasured)
            results.append(
                {
                    "id": task.id,
                    "op": action.get("op"),
                    "holds": held,
                    "holds_without_measure": held_unmeasured,
                    "p": probability,
                    "seconds": seconds,
                    "action": action,
                    "added": added[1] if added else [],
                    "measure": measured[1] if measured else None,
                }
            )
            if not args.json:
                print(
                    f"{task.id} {'holds ' if held else 'misses'} {action.get('op')!s:15} p={probability} {seconds} s"
                    + (f" (added {'; '.join(added[1])})" if added else "")
                    + (f" ({measured[1]}; held before: {held_unmeasured})" if measured else "")
                )
    held_count = sum(1 for r in results if r.get("holds"))
    ops: dict[str, int] = {}
    for r in results:
        ops[str(r.get("op"))] = ops.get(str(r.get("op")), 0) + 1
    times = [r["seconds"] for r in results if "seconds" in r]
    summary = {
        "tasks": len(results),
        "holds_answer": held_count,
        "holds_without_measure": sum(1 for r in results if r.get("holds_without_measure")),
        "measure_changed": sum(1 for r in results if r.get("measure")),
        "ops": ops,
        "median_seconds": statistics.median(times) if times else None,
    }
    if args.json:
        print(json.dumps({**summary, "results": results}, indent=1))
    else:
        print(
            f"first action holds the answer: {held_count} of {len(results)} "
            f"({summary['holds_without_measure']} without the measure, changed on {summary['measure_changed']}); ops {ops}; "
            f"median {summary['median_seconds']} s a request"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
