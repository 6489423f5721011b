"""End to end with the real local model: `rlm ask FILE QUESTION -m local --json` over real logs.

Selected with `pytest -m realmodel` (deselected by default: each question
takes minutes on 2 cores). Needs `rlm local setup` (or
scripts/setup-local-model.sh). Each answer is computed independently in
tests/realmodel/questions.py and checked leniently: the number or word must
appear in the answer. A summary (right count, median time and tokens) goes
to stderr and to bench/out/realmodel-<time>.json (or $RLM_REALMODEL_SUMMARY).

Knobs: RLM_REALMODEL_TIMEOUT (seconds per question, default 900),
RLM_REALMODEL_ARGS (extra `rlm ask` arguments), RLM_REALMODEL_ONLY
(comma-separated question ids), RLM_REALMODEL_COMMAND (the command to run
instead of the installed `rlm`, e.g. to compare a modified prompt).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlm.local import installed_gguf
from rlm.local.server import installed_backend

from .questions import QUESTIONS, Question, is_correct

pytestmark = pytest.mark.realmodel

TIMEOUT_S = float(os.environ.get("RLM_REALMODEL_TIMEOUT", "900"))
EXTRA_ARGS = shlex.split(os.environ.get("RLM_REALMODEL_ARGS", ""))
ONLY = {q for q in os.environ.get("RLM_REALMODEL_ONLY", "").split(",") if q}
RLM = Path(sys.executable).with_name("rlm")
COMMAND = shlex.split(os.environ.get("RLM_REALMODEL_COMMAND", "")) or [str(RLM)]


def _selected() -> list[Question]:
    return [q for q in QUESTIONS if not ONLY or q.id in ONLY]


@pytest.fixture(scope="module", autouse=True)
def _real_model_present() -> None:
    if installed_backend() is None or installed_gguf() is None:
        pytest.skip("the local model is not set up: run scripts/setup-local-model.sh (or `rlm local setup`)")
    if COMMAND == [str(RLM)] and not RLM.exists():
        pytest.skip(f"the rlm command is not installed next to {sys.executable}")


@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("q", _selected(), ids=lambda q: q.id)
def test_question(q: Question, realmodel_results: list[dict[str, Any]]) -> None:
    if not q.file.is_file():
        pytest.skip(f"data file missing: {q.file}")
    expected = q.answer()
    command = [*COMMAND, "ask", str(q.file), q.question, "-m", "local", "--json", *EXTRA_ARGS]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        code = None
    wall = time.monotonic() - started
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        report = {}
    usage = report.get("usage") or {}
    answer = str(report.get("answer") or "")
    correct = bool(answer) and is_correct(expected, answer)
    realmodel_results.append(
        {
            "id": q.id,
            "file": q.file.name,
            "question": q.question,
            "expected": expected,
            "answer": answer,
            "correct": correct,
            "status": report.get("status"),
            "exit_code": code,
            "elapsed_s": round(float(report.get("elapsed_s") or wall), 1),
            "wall_s": round(wall, 1),
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "calls": usage.get("calls"),
            "trace": report.get("trace"),
            "stderr_tail": stderr.strip().splitlines()[-8:],
        }
    )
    assert code is not None, f"timed out after {TIMEOUT_S:.0f}s; stderr ends:\n{stderr[-2000:]}"
    assert report, f"no JSON on stdout (exit {code}); stderr ends:\n{stderr[-2000:]}"
    assert correct, f"expected {expected!r} in the answer, got {answer!r} (status {report.get('status')})"
