"""`rlm eval`: score a model on a set of questions whose answers are known.

A tasks file is JSON lines, one task each:

    {"id": "t01", "file": "../access.log", "question": "...", "answer": 35,
     "check": "number", "tolerance": 0}

`file` is relative to the tasks file. Each task runs through the same engine
as `rlm ask`, and what `rlm ask` would print on stdout is scored strictly,
after a documented normalisation (`normalize`): case, surrounding quotes and
whitespace, a trailing full stop, and for numbers thousands separators. Checks:

- `exact`: the normalised answer equals the normalised expected text;
- `number`: the answer is one number within `tolerance` (default 0) of it;
- `set`: the answer's items (one per line, or a JSON array) are the expected set;
- `contains`: the expected text appears in the normalised answer.

Beside accuracy, the report gives the grounded rate: the share of tasks whose
answer states only values held by the findings its synthesis was shown
(rlm.run.grounding). A right answer that is not grounded was right by luck or
by the model's own knowledge, not by what the investigation established.
`confident_wrong` counts the answers that are grounded, not in doubt, and wrong:
those `rlm ask --strict` would still print. `doubted` counts the answers in
doubt: their query left out a condition the question names, or was the
prompt's example as shown (rlm.run.doubts; --strict withholds them), and
`doubted_but_right` those of them that were right.

With a baseline (`rlm eval --baseline plain`), every task is also answered by
one plain call (rlm.run.plain) with the same model and settings, scored the
same way: each task's `baseline` and the report's `baseline_*` totals.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlm.errors import InputError, UsageError

CHECKS = ("exact", "number", "set", "contains")
_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$")


@dataclass(frozen=True)
class Task:
    id: str
    file: Path
    question: str
    answer: Any
    check: str
    tolerance: float = 0.0


@dataclass
class Arm:
    """One task as the baseline answered it, scored as the task is."""

    passed: bool
    got: str | None
    grounded: bool | None
    seconds: float
    status: str
    trace: str | None
    error: str | None = None
    doubts: list[str] = field(default_factory=list)  # as a TaskResult's


@dataclass
class TaskResult:
    id: str
    passed: bool
    expected: Any
    got: str | None
    status: str
    steps: int
    tokens: int
    cost: float | None
    seconds: float
    trace: str | None
    error: str | None = None
    # Whether every value of the answer was held by a finding the synthesis was shown
    # (rlm.run.grounding); None without an answer, or for one that states no value (yes, no).
    grounded: bool | None = None
    # Conditions the question names that the query behind the answer left out: --strict
    # withholds such an answer as it does one that is not grounded (rlm.run.typed.conditions).
    doubts: list[str] = field(default_factory=list)
    baseline: Arm | None = None  # the same task answered by the baseline (--baseline)


def load_tasks(path: Path) -> list[Task]:
    """Read and check a tasks file; every fault is a one-line InputError naming the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the tasks file {path}: {exc.strerror or exc}") from None
    tasks: list[Task] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            check = raw.get("check", "exact")
            if check not in CHECKS:
                raise ValueError(f"check must be one of {', '.join(CHECKS)}, not {check!r}")
            task = Task(
                id=str(raw["id"]),
                file=(path.parent / raw["file"]).resolve(),
                question=str(raw["question"]),
                answer=raw["answer"],
                check=check,
                tolerance=float(raw.get("tolerance") or 0.0),  # null: none, as for an exact check
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise InputError(f"{path}:{number}: not a task ({what})") from None
        tasks.append(task)
    if not tasks:
        raise InputError(f"{path} holds no tasks")
    return tasks


def normalize(text: str) -> str:
    """Case, outer whitespace and quotes, and one trailing full stop do not count."""
    s = text.strip()
    while len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'`":
        s = s[1:-1].strip()
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    return s.lower()


def _items(text: str) -> set[str]:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
            if isinstance(value, list):
                return {normalize(str(v)) for v in value}
        except ValueError:
            pass
    return {normalize(line.lstrip("-*• ").strip()) for line in stripped.splitlines() if line.strip()}


def _listings(text: str) -> list[set[str]]:
    """The ways `text` lists items: one per line, and where it is one line, also separated by
    commas ("root, admin" lists two; an item may hold a comma itself, so both are tried)."""
    lines = _items(text)
    one_line = text.strip() and "\n" not in text.strip() and not text.strip().startswith("[")
    return [lines, {normalize(part) for part in text.split(",") if part.strip()}] if one_line else [lines]


def score(task: Task, got: str | None) -> bool:
    """Whether `got` (what stdout carried, without its newline) answers the task."""
    if got is None:
        return False
    if task.check == "set":
        expected = task.answer if isinstance(task.answer, list) else [task.answer]
        return {normalize(str(v)) for v in expected} in _listings(got)
    answer = normalize(got)
    if task.check == "contains":
        return normalize(str(task.answer)) in answer
    if task.check == "number":
        if not _NUMBER.match(answer):
            return False
        value = float(answer.replace(",", ""))
        return math.isclose(value, float(task.answer), rel_tol=0.0, abs_tol=task.tolerance)
    return answer == normalize(str(task.answer))


Runner = Callable[[Task], Any]


def _arm(task: Task, runner: Runner) -> Arm:
    """The task answered by `runner` (the baseline), timed and scored."""
    from rlm.errors import RlmError

    started = time.monotonic()
    try:
        run = runner(task)
    except RlmError as exc:
        arm = Arm(False, None, None, 0.0, "error", None, exc.message)
    else:
        doubts = list(getattr(run, "doubts", None) or [])
        arm = Arm(
            score(task, run.answer), run.answer, run.grounded, 0.0, run.status, run.trace_path, None, doubts
        )
    arm.seconds = round(time.monotonic() - started, 2)
    return arm


def run_tasks(
    tasks: list[Task],
    runner: Runner,
    on_result: Callable[[TaskResult], None] | None = None,
    baseline: Runner | None = None,
    on_baseline: Callable[[TaskResult], None] | None = None,
) -> list[TaskResult]:
    """Run every task (a failing run is a failed task, never the end of the evaluation), and
    with a `baseline`, every task again through it once all have run: file by file, so that
    consecutive baseline calls share their prompt's start (a plain call's file text) and a
    model server's prompt cache can keep it."""
    from rlm.errors import RlmError

    results: list[TaskResult] = []
    for task in tasks:
        started = time.monotonic()
        try:
            run = runner(task)
        except RlmError as exc:
            result = TaskResult(
                task.id, False, task.answer, None, "error", 0, 0, None, 0.0, None, exc.message
            )
        else:
            usage = run.usage or {}
            result = TaskResult(
                id=task.id,
                passed=score(task, run.answer),
                expected=task.answer,
                got=run.answer,
                status=run.status,
                steps=run.steps,
                tokens=int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)),
                cost=usage.get("cost"),
                seconds=0.0,
                trace=run.trace_path,
                grounded=run.grounded,
                doubts=list(getattr(run, "doubts", None) or []),
            )
        result.seconds = round(time.monotonic() - started, 2)
        results.append(result)
        if on_result is not None:
            on_result(result)
    if baseline is not None:
        by_id = {r.id: r for r in results}
        for task in sorted(tasks, key=lambda t: str(t.file)):  # stable: the given order within a file
            by_id[task.id].baseline = _arm(task, baseline)
            if on_baseline is not None:
                on_baseline(by_id[task.id])
    return results


def _rate(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def _confident_wrong(got: str | None, grounded: bool | None, passed: bool, doubted: bool = False) -> bool:
    """An answer printed, grounded, not in doubt, and wrong: what --strict still lets through."""
    return got is not None and grounded is True and not doubted and not passed


def _baseline_totals(results: list[TaskResult]) -> dict[str, Any]:
    """The baseline's totals beside the run's: none when no task had one."""
    arms = [r.baseline for r in results if r.baseline is not None]
    if not arms:
        return {}
    passed = sum(a.passed for a in arms)
    grounded = sum(a.grounded is True for a in arms)
    return {
        "baseline": "plain",
        "baseline_passed": passed,
        "baseline_accuracy": _rate(passed, len(results)),
        "baseline_grounded": grounded,
        "baseline_grounded_rate": _rate(grounded, len(results)),
        "baseline_confident_wrong": sum(
            _confident_wrong(a.got, a.grounded, a.passed, bool(a.doubts)) for a in arms
        ),
        "baseline_doubted": sum(bool(a.doubts) for a in arms if a.got is not None),
    }


def report(results: list[TaskResult]) -> dict[str, Any]:
    passed = sum(r.passed for r in results)
    tokens = sorted(r.tokens for r in results)
    seconds = sorted(r.seconds for r in results)
    costs = [r.cost for r in results if r.cost is not None]
    grounded = sum(r.grounded is True for r in results)
    # A task run without a baseline has no `baseline` key: the report is as it was without one.
    tasks = [{k: v for k, v in asdict(r).items() if k != "baseline" or v is not None} for r in results]
    return {
        "schema": "rlm-eval/1",
        "passed": passed,
        "total": len(results),
        "accuracy": round(passed / len(results), 4) if results else 0.0,
        # Of every task: an answer that is not grounded, or no answer, counts against it.
        "grounded": grounded,
        "grounded_rate": round(grounded / len(results), 4) if results else 0.0,
        "passed_and_grounded": sum(r.passed and r.grounded is True for r in results),
        "confident_wrong": sum(
            _confident_wrong(r.got, r.grounded, r.passed, bool(r.doubts)) for r in results
        ),
        # Answers in doubt (--strict withholds them), and how many of those were right.
        "doubted": sum(bool(r.doubts) for r in results if r.got is not None),
        "doubted_but_right": sum(bool(r.doubts) and r.passed for r in results),
        "median_tokens": tokens[len(tokens) // 2] if tokens else 0,
        "median_seconds": seconds[len(seconds) // 2] if seconds else 0.0,
        "cost": round(sum(costs), 6) if costs else None,
        **_baseline_totals(results),
        "tasks": tasks,
    }


def check_tasks_arg(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(f"no such tasks file: {path}")
    if p.is_dir():
        raise UsageError(f"{path} is a directory; give a tasks .jsonl file")
    return p
