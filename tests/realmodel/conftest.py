"""Collects the results of the real-model questions and writes the summary at the end of the session."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

RESULTS: list[dict[str, Any]] = []
_STARTED = time.monotonic()


@pytest.fixture
def realmodel_results() -> list[dict[str, Any]]:
    """Where each question's test appends its record; summarised at the end of the session."""
    return RESULTS


def summary_path() -> Path:
    explicit = os.environ.get("RLM_REALMODEL_SUMMARY")
    if explicit:
        return Path(explicit)
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S")
    return Path(__file__).resolve().parents[2] / "bench" / "out" / f"realmodel-{stamp}.json"


def summarise(results: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    tokens = [r["prompt_tokens"] + r["completion_tokens"] for r in results if r["prompt_tokens"] is not None]
    return {
        "questions": len(results),
        "right": sum(r["correct"] for r in results),
        "median_elapsed_s": round(statistics.median(r["elapsed_s"] for r in results), 1) if results else None,
        "median_tokens": int(statistics.median(tokens)) if tokens else None,
        "median_calls": statistics.median(r["calls"] for r in results if r["calls"] is not None)
        if any(r["calls"] is not None for r in results)
        else None,
        "suite_wall_s": round(wall_s, 1),
        "results": results,
    }


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [
        f"real model: {summary['right']}/{summary['questions']} right, median {summary['median_elapsed_s']}s and "
        f"{summary['median_tokens']} tokens per question, suite {summary['suite_wall_s']}s"
    ]
    for r in summary["results"]:
        mark = "ok  " if r["correct"] else "MISS"
        answer = " ".join(str(r["answer"]).split())[:90]
        lines.append(
            f"  {mark} {r['id']:<22} want {r['expected']:<15} {r['status']!s:<8} {r['elapsed_s']:>6.1f}s "
            f"{r['prompt_tokens']!s:>6}+{r['completion_tokens']!s:<5} | {answer}"
        )
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RESULTS:
        return
    summary = summarise(RESULTS, time.monotonic() - _STARTED)
    path = summary_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2))
    lines = summary_lines(summary) + [f"summary written to {path}"]
    print("\n".join(lines), file=sys.__stderr__, flush=True)
    terminalreporter.write_sep("=", "real-model summary")
    for line in lines:
        terminalreporter.write_line(line)
